"""IMDb movie reviews for sentiment classification (the tutorial's experiment 1).

Source: the Hugging Face dataset ``stanfordnlp/imdb`` by default, or the official ``aclImdb_v1.tar.gz`` /
its extracted ``aclImdb/`` directory with no network. Tokens are lower-cased words and punctuation; the
vocabulary is the most frequent words of the training part (validation held out first); padding is
dynamic, with batches of similar lengths.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ..atomic import saved_whole
from ..bounds import Count, OpenRate, PathName, Rate, Seed, Workers, check_args
from .files import DataError, inflates_past, predicting, read_text, utf8
from .ids import IGNORE_INDEX
from .progress import ResumableData
from .vocab import TokenizerVocab, WordVocab, distinct, vocab_from_state, vocab_state

HF_NAME = "stanfordnlp/imdb"
ACLIMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
ACLIMDB = f"aclImdb_v1.tar.gz from {ACLIMDB_URL} or the aclImdb/ directory it extracts to"  # what data.path takes
CLASSES = ("neg", "pos")  # label 0, label 1 (as in the Hugging Face dataset)
TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")  # words (with "don't"-style endings) and symbols
TOKENIZER_VERSION = 1  # bump when tokenize() changes, so caches are rebuilt
MAX_REVIEW, MAX_REVIEWS = 1_000_000, 1_000_000_000  # bytes of a review (IMDb's longest: 14 KB), of all (0.13 GB)
MAX_PREDICT = 100_000_000  # bytes of reviews predict reads at once (about 1 GB in memory; IMDb's test split: 33 MB)
Split = tuple[list[str], list[int]]  # texts, labels


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text.replace("<br />", " ").lower())


def _reviews(path: Path, pattern: re.Pattern, flag: str) -> list[tuple[re.Match, str]]:
    """(name match, text) of every review file whose path inside the aclImdb/ folder matches ``pattern``, from a
    tarball or an extracted folder given as ``flag``."""
    found, total = [], 0

    def sized(size: int, name: str) -> None:  # sizes are known before a byte is read: an archive may be a bomb
        nonlocal total
        total += size
        if size > MAX_REVIEW or total > MAX_REVIEWS:
            raise DataError(f"{name} is a review of {size:,} bytes, of {total:,} so far (IMDb's are at most "
                            f"{MAX_REVIEW:,}, of {MAX_REVIEWS:,} in all); pass {ACLIMDB_URL}")  # fmt: skip

    try:
        if path.is_dir():
            root = path if path.name == "aclImdb" else path / "aclImdb"
            for f in sorted(root.glob("*/*/*.txt")):
                if f.is_symlink() or not f.is_file() or not f.resolve().is_relative_to(root.resolve()):
                    continue  # a link could point anywhere, a pipe wait for ever: only the folder's own files
                if m := pattern.search(f.relative_to(root.parent).as_posix()):
                    sized(f.stat().st_size, repr(str(f)))
                    found.append((m, utf8(f.read_bytes(), repr(str(f)))))
        elif not path.is_file():  # a device or a pipe: xz's reader takes /dev/zero's nulls for padding, without end
            raise DataError(f"{flag} {str(path)!r} is neither a file nor a folder (a device or a pipe); pass {ACLIMDB}")
        else:
            with tarfile.open(path) as archive:
                for member in archive:  # regular files only (no links), named inside the archive's folder
                    parts = member.name.split("/")
                    if member.isfile() and ".." not in parts and parts[0] and (m := pattern.search(member.name)):
                        sized(member.size, f"{str(path)!r}'s {member.name}")
                        body = archive.extractfile(member)  # a regular file's: never None
                        text = utf8(body.read(), f"{str(path)!r}'s {member.name}") if body is not None else ""
                        found.append((m, text))
    except (tarfile.TarError, EOFError, OSError) as e:
        reason = (str(e).splitlines() or [""])[0].rstrip(":")  # tarfile's may list what it tried, a line each
        raise DataError(
            f"{str(path)!r} is truncated or corrupt ({type(e).__name__}: {reason}); download {ACLIMDB_URL} again"
        ) from e
    return found


def read_aclimdb(path: Path) -> dict[str, Split]:
    """train/test texts and labels from aclImdb_v1.tar.gz or an extracted aclImdb/ directory."""
    splits: dict[str, Split] = {"train": ([], []), "test": ([], [])}
    for m, text in _reviews(path, re.compile(r"(?:^|/)aclImdb/(train|test)/(neg|pos)/[^/]+\.txt$"), "data.path"):
        splits[m[1]][0].append(text)
        splits[m[1]][1].append(CLASSES.index(m[2]))
    counts = {f"{name}/{c}": labels.count(i) for name, (_, labels) in splits.items() for i, c in enumerate(CLASSES)}
    if min(counts.values()) == 0:
        raise DataError(
            f"data.path {str(path)!r} holds no aclImdb/{{train,test}}/{{pos,neg}}/*.txt reviews (found {counts}); "
            f"pass {ACLIMDB}"
        )
    return splits


def read_unlabeled(path: Path, flag: str) -> list[str]:
    """The 50,000 unlabeled reviews, aclImdb/train/unsup/*.txt, from a tarball or an extracted folder."""
    return [text for _, text in _reviews(path, re.compile(r"(?:^|/)aclImdb/train/unsup/[^/]+\.txt$"), flag)]


def read_hf(name: str, splits: tuple[str, ...] = ("train", "test")) -> dict[str, Split]:
    """Texts and labels of ``splits`` from the Hugging Face Hub (cached by ``datasets`` after the first time);
    ``unsupervised`` holds the 50,000 unlabeled reviews."""
    try:
        import datasets

        ds = datasets.load_dataset(name)
    except Exception as e:  # noqa: BLE001 - network, hub and cache errors come in many types
        raise DataError(
            f"could not load the IMDb dataset {name!r} from the Hugging Face Hub ({type(e).__name__}: {e}). "
            f"With no network, download {ACLIMDB_URL}, put it in data/ (or anywhere) and pass "
            "--data.path data/aclImdb_v1.tar.gz (the extracted aclImdb/ directory works too)"
        ) from e
    return {split: (list(ds[split]["text"]), list(ds[split]["label"])) for split in splits}


def hold_out(labels: list[int], size: int, seed: int) -> list[int]:
    """Indices of a class-balanced, seeded validation sample of ``size`` examples."""
    g = torch.Generator().manual_seed(seed)
    per_class = size // len(CLASSES)
    chosen = []
    for c in range(len(CLASSES)):
        members = [i for i, y in enumerate(labels) if y == c]
        if not 0 < per_class < len(members):  # a class with none held out, or none left to train on
            most = len(CLASSES) * (len(members) - 1)  # none, for a class of one review
            fix = f"pass from {len(CLASSES)} to {most}" if most else "pass data that holds more"
            raise DataError(f"data.val_size={size} holds out {per_class} reviews of class {CLASSES[c]!r} of the "
                            f"training data's {len(members)}; {fix}")  # fmt: skip
        chosen += [members[j] for j in torch.randperm(len(members), generator=g)[:per_class].tolist()]
    return sorted(chosen)


def stale(path: Path) -> DataError:
    return DataError(f"{str(path)!r} is no cache this version reads; delete it, and it is rebuilt from the data")


def load_cache(path: Path, *keys: str) -> dict:
    """A cache this module wrote (``imdb-*.pt`` under data_dir), read as data, holding ``keys``; a damaged one, or
    one an earlier version wrote, is named, to delete."""
    try:
        cache = None if inflates_past(path) else torch.load(path, weights_only=True)
    except Exception:  # torch's reader fails in many ways on a broken file
        cache = None
    if not isinstance(cache, dict) or not all(key in cache for key in keys) or not distinct(cache.get("vocab", [])):
        raise stale(path)
    return cache


def unpacked(cache: dict, path: Path, max_length: int, vocab_size: int) -> list[Tensor]:
    """A cache's reviews (their ids in one row, cut by their lengths), each at most ``max_length`` ids below
    ``vocab_size``; none (a hold-out of every review, written before it was refused) or a damaged cache is named."""
    try:
        ids = cache["ids"]
        inside = not ids.is_floating_point() and 0 <= int(ids.min()) and int(ids.max()) < vocab_size  # an embedding row
        reviews = [x[:max_length].long() for x in ids.split(cache["lengths"].tolist())] if inside else []
    except (KeyError, TypeError, AttributeError, RuntimeError, ValueError):
        reviews = []
    if not reviews:
        raise stale(path)
    return reviews


def labels_of(cache: dict, path: Path, count: int) -> Tensor:
    """A cache's labels: one class id for each of its ``count`` reviews, or the cache is named."""
    labels = cache.get("labels")
    if not torch.is_tensor(labels) or labels.is_floating_point() or labels.shape != (count,):
        raise stale(path)
    if not 0 <= int(labels.min()) <= int(labels.max()) < len(CLASSES):
        raise stale(path)
    return labels


class PaddedBatches(Dataset):
    """Item i is a whole batch, padded to its longest review: (ids (b, t), mask (b, t), labels (b,)) and the
    texts when given. ``order``: ``bucketed`` (training: seeded random pools of ``pool`` batches sorted by length),
    ``length`` (evaluation) or ``given`` (prediction, one output per input line)."""

    def __init__(
        self,
        ids: list[Tensor],
        labels: Tensor,
        batch_size: int,
        order: Literal["bucketed", "length", "given"],
        seed: int = 0,
        pool: int = 50,
        texts: list[str] | None = None,
    ) -> None:
        self.ids, self.labels, self.texts = ids, labels, texts
        lengths = torch.tensor([len(x) for x in ids])
        if order == "bucketed":
            shuffled = torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))
            index = torch.cat([p[lengths[p].argsort(stable=True)] for p in shuffled.split(batch_size * pool)])
        elif order == "length":
            index = lengths.argsort(stable=True)
        else:
            index = torch.arange(len(ids))
        self.batches = list(index.split(batch_size))

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> tuple:
        chosen = self.batches[i % len(self.batches)]  # i: a training batch number (epoch * n + k)
        index = chosen.tolist()
        rows = [self.ids[j] for j in index]
        ids = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=WordVocab.PAD)  # (b, t)
        mask = torch.arange(ids.size(1))[None] < torch.tensor([len(r) for r in rows])[:, None]  # (b, t)
        batch = ids, mask, self.labels[chosen]
        return batch if self.texts is None else (*batch, [self.texts[j] for j in index])


class WordDropout(Dataset):
    """Training batches in which each real token is replaced by <unk> with probability ``prob`` (word dropout:
    the classifier cannot lean on any one word). Batch number i's choice is a function of (seed, i), so a
    resumed run drops the same words."""

    def __init__(self, batches: PaddedBatches, prob: float, seed: int) -> None:
        self.batches, self.prob, self.seed = batches, prob, seed

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, Tensor]:
        ids, real, labels = self.batches[i]
        generator = torch.Generator().manual_seed(hash((self.seed, i, 1)))  # not the masks' (seed, i)
        dropped = (torch.rand(ids.shape, generator=generator) < self.prob) & real  # (b, t)
        return ids.masked_fill(dropped, WordVocab.UNK), real, labels


def fingerprint(path: str, flag: str, hint: str) -> str:
    """A source's identity in a cache's name: its full path, size and time of change (a changed file, a new cache)."""
    p = Path(path).resolve()
    if not p.exists():
        raise DataError(f"{flag} {path!r} does not exist; pass {hint}")
    return f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}"


class IMDbDataModule(ResumableData):
    """IMDb: 25,000 training reviews (less a held-out validation set) and 25,000 test reviews; the vocabulary
    travels in checkpoints (``state_dict``)."""

    num_classes = len(CLASSES)
    class_names = CLASSES

    def __init__(
        self,
        path: PathName | None = None,
        data_dir: PathName = "data",
        vocab_words: Count = 50_000,
        max_length: Count = 512,
        val_size: Count = 5_000,
        batch_size: Count = 32,
        num_workers: Workers = 0,
        seed: Seed = 1234,
        predict_path: PathName | None = None,
        word_dropout: Rate = 0.0,
        tokenizer: str | None = None,
    ) -> None:
        """
        Args:
            path: aclImdb_v1.tar.gz or an extracted aclImdb/ directory; None: the Hugging Face ``stanfordnlp/imdb``.
            data_dir: Where the tokenised cache is written.
            vocab_words: Keep the most frequent N training words; the rest become <unk>.
            max_length: Truncate reviews to this many tokens (the model's context must be at least this).
            val_size: Reviews held out of the training data for validation, seeded: half of each class (an odd
                count holds out one fewer).
            batch_size: Reviews per batch.
            num_workers: DataLoader worker processes.
            seed: Seed of the validation hold-out and of batch shuffling.
            predict_path: For ``predict``: a text file with one review per line.
            word_dropout: Training only: replace each token by <unk> with this probability (0: off).
            tokenizer: A Hugging Face ``tokenizer.json``, or a folder holding one (a pretrained BERT's): its sub-word
                ids instead of a vocabulary of words (``vocab_words`` is then unused).
        """
        super().__init__()
        check_args(IMDbDataModule.__init__, locals(), "data")
        self.word_dropout = word_dropout
        self.path, self.data_dir, self.vocab_words, self.max_length = path, Path(data_dir), vocab_words, max_length
        self.val_size, self.batch_size, self.num_workers, self.seed = val_size, batch_size, num_workers, seed
        self.predict_path, self.tokenizer = predict_path, tokenizer
        self.vocab: WordVocab | TokenizerVocab | None = None
        self.splits: dict[str, tuple[list[Tensor], Tensor]] = {}

    @property
    def vocab_size(self) -> int:
        """Token ids the model needs: the words plus <pad> and <unk>, or the tokenizer's. Linked to
        model.vocab_size by the CLI."""
        return self._tokenizer().size if self.tokenizer else self.vocab_words + 2

    @property
    def context(self) -> int:
        """The longest review in tokens, ``max_length``. Linked to model.context by the CLI."""
        return self.max_length

    @property
    def cache_file(self) -> Path:
        if self.path is None:
            source = HF_NAME
        else:
            source = fingerprint(self.path, "data.path", f"aclImdb_v1.tar.gz or an aclImdb/ directory ({ACLIMDB_URL}), "
                                 "or leave it unset to use the Hugging Face dataset")  # fmt: skip
        words = (
            self.vocab_words if self.tokenizer is None else hashlib.sha256(self._tokenizer().json.encode()).hexdigest()
        )
        key = f"{source}|{words}|{self.val_size}|{self.seed}|{TOKENIZER_VERSION}"
        return self.data_dir / f"imdb-{hashlib.sha256(key.encode()).hexdigest()[:12]}.pt"

    def prepare_data(self) -> None:
        """Read, split, tokenise and encode once, on one process per node; the result is cached."""
        if predicting(self) or self.cache_file.exists():
            return
        raw = read_hf(HF_NAME) if self.path is None else read_aclimdb(Path(self.path))
        texts, labels = raw["train"]
        val = hold_out(labels, self.val_size, self.seed)  # sorted indices
        train = sorted(set(range(len(texts))) - set(val))
        parts = {
            "train": ([texts[i] for i in train], [labels[i] for i in train]),
            "val": ([texts[i] for i in val], [labels[i] for i in val]),
            "test": raw["test"],
        }
        if self.tokenizer is None:
            tokens = {name: [tokenize(t) for t in part[0]] for name, part in parts.items()}
            words = WordVocab.build(tokens["train"], self.vocab_words)  # training data only
            cache: dict[str, Any] = {"vocab": words.itos[2:]}
            encode = lambda name: [words.encode(t) for t in tokens[name]]  # noqa: E731
        else:
            sub_words = self._tokenizer()
            cache = {"tokenizer_json": sub_words.json}
            encode = lambda name: [sub_words.encode(t.encode("utf-8")).tolist() for t in parts[name][0]]  # noqa: E731
        for name, (_, ys) in parts.items():
            encoded = encode(name)
            if not any(encoded):  # a split of nothing to read (it would be written, then refused as damaged)
                raise DataError(
                    f"data.path {str(self.path)!r}: no review of its {name} split holds a word; pass {ACLIMDB}"
                )
            cache[name] = {
                "ids": torch.tensor([i for e in encoded for i in e], dtype=torch.int32),
                "lengths": torch.tensor([len(e) for e in encoded]),
                "labels": torch.tensor(ys),
            }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        saved_whole(cache, self.cache_file)

    def setup(self, stage: str | None = None) -> None:
        if self.splits or stage == "predict":  # predict reads predict_path with the checkpoint's vocabulary
            return
        cache = load_cache(
            self.cache_file, "train", "val", "test", "vocab" if self.tokenizer is None else "tokenizer_json"
        )
        if "tokenizer_json" in cache:
            if self.vocab is not None and getattr(self.vocab, "json", None) != cache["tokenizer_json"]:
                raise DataError("the checkpoint's tokenizer is not data.tokenizer; pass the one it was trained with")
            try:
                self.vocab = self.vocab or TokenizerVocab(cache["tokenizer_json"])
            except DataError:  # the cache's copy of the tokenizer is damaged
                raise stale(self.cache_file) from None
        elif self.vocab is None:
            self.vocab = WordVocab(cache["vocab"])
        elif not isinstance(self.vocab, WordVocab):
            raise DataError("the checkpoint tokenizes with a tokenizer.json, and these data settings with words; "
                            "pass --data.tokenizer, the tokenizer it was trained with")  # fmt: skip
        elif self.vocab.itos[2:] != cache["vocab"]:  # a checkpoint's: the ids below must mean its words
            given, built = self.vocab.itos[2:], cache["vocab"]
            i = next(
                (i for i, (a, b) in enumerate(zip(given, built, strict=False)) if a != b), min(len(given), len(built))
            )
            raise DataError(
                f"the checkpoint's vocabulary ({len(given)} words) is not the one these data settings build "
                f"({len(built)} words; id {i + 2} is {given[i] if i < len(given) else None!r} there and "
                f"{built[i] if i < len(built) else None!r} here), so every id would mean another word; pass the "
                "data settings it was trained with (data.path, data.vocab_words, data.val_size, data.seed)"
            )
        for name in ("train", "val", "test"):
            reviews = unpacked(cache[name], self.cache_file, self.max_length, self.vocab.size)
            self.splits[name] = (reviews, labels_of(cache[name], self.cache_file, len(reviews)))

    def _eval_loader(self, split: str) -> DataLoader:
        ids, labels = self.splits[split]
        batches = PaddedBatches(ids, labels, self.batch_size, "length")
        return DataLoader(batches, batch_size=None, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        batches = PaddedBatches(*self.splits["train"], self.batch_size, "bucketed", self.seed)
        if self.word_dropout:
            dropped = WordDropout(batches, self.word_dropout, self.seed)
            return self.train_loader(dropped, len(dropped), shuffle=True)
        return self.train_loader(batches, len(batches), shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

    def predict_dataloader(self) -> DataLoader:
        """Reviews from ``predict_path``, one a line, in file order, encoded with the model's vocabulary."""
        if self.predict_path is None:
            raise ValueError("predict needs reviews: pass --data.predict_path FILE with one review per line")
        if self.vocab is None:
            raise ValueError("predict needs the vocabulary of a trained classifier: pass --ckpt_path")
        where = f"data.predict_path {self.predict_path!r}"
        text = read_text(self.predict_path, where, MAX_PREDICT, "a text file with one review a line")
        texts = [line for line in text.split("\n") if line.strip()]  # a review may hold \x85 or \u2028
        if not texts:
            raise DataError(f"{where} holds no reviews; give one review a line")
        if isinstance(self.vocab, TokenizerVocab):
            try:
                encoded = [self.vocab.encode(t.encode("utf-8")).tolist() for t in texts]
            except DataError as e:  # a word a tokenizer with no unknown token cannot read
                raise DataError(f"{where}: {e}") from None
        else:
            encoded = [self.vocab.encode(tokenize(t)) for t in texts]
        ids = [torch.tensor(e[: self.max_length] or [WordVocab.UNK]) for e in encoded]
        batches = PaddedBatches(ids, torch.zeros(len(ids), dtype=torch.long), self.batch_size, "given", texts=texts)
        return DataLoader(batches, batch_size=None)

    def _tokenizer(self) -> TokenizerVocab:
        if getattr(self, "_tokenizer_vocab", None) is None:
            assert self.tokenizer is not None
            self._tokenizer_vocab = TokenizerVocab.from_file(self.tokenizer)
        return self._tokenizer_vocab

    def state_dict(self) -> dict:
        return {**(vocab_state(self.vocab) if self.vocab is not None else {}), **self.progress_state()}

    def load_state_dict(self, state: dict) -> None:
        vocab = vocab_from_state(state)
        if isinstance(vocab, (WordVocab, TokenizerVocab)):  # what a reviews checkpoint holds
            self.vocab = vocab
        self.load_progress(state)


def mask_tokens(
    ids: Tensor, real: Tensor, mask_id: int, words: range, prob: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """BERT's corruption (Devlin et al. 2019, 3.1) of ids (b, t) whose real tokens are ``real`` (b, t): each real
    token is chosen with probability ``prob`` (at least one per batch); a chosen token becomes ``mask_id`` 80 %
    of the time, a random id of ``words`` 10 %, and stays itself 10 %. Returns (inputs, targets), both (b, t):
    targets hold the original id where a token was chosen and ``IGNORE_INDEX`` elsewhere."""
    chosen = (torch.rand(ids.shape, generator=generator) < prob) & real  # (b, t)
    if not chosen.any() and real.any():  # a loss over no token is 0 / 0
        chosen.view(-1)[real.view(-1).nonzero()[0]] = True
    action = torch.rand(ids.shape, generator=generator)  # (b, t): < 0.8 mask, < 0.9 random, else keep
    randoms = torch.randint(words.start, words.stop, ids.shape, generator=generator)  # (b, t)
    inputs = torch.where(chosen & (action < 0.8), mask_id, ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), randoms, inputs)
    return inputs, ids.masked_fill(~chosen, IGNORE_INDEX)


class MaskedBatches(Dataset):
    """Batches of :class:`PaddedBatches`, corrupted by :func:`mask_tokens`: (inputs, real-token mask, targets).
    Batch number i is masked by a generator seeded with (seed, i), so a resumed run and every validation see the
    same masks for the same batch."""

    def __init__(self, batches: PaddedBatches, mask_id: int, words: range, prob: float, seed: int) -> None:
        self.batches, self.mask_id, self.words, self.prob, self.seed = batches, mask_id, words, prob, seed

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, Tensor]:
        ids, real, _ = self.batches[i]
        generator = torch.Generator().manual_seed(hash((self.seed, i)))
        inputs, targets = mask_tokens(ids, real, self.mask_id, self.words, self.prob, generator)
        return inputs, real, targets


class IMDbMLMDataModule(IMDbDataModule):
    """Masked-token pretraining on IMDb (the tutorial's BERT section): the classifier's training reviews plus the
    50,000 unlabeled ones, validated on its validation reviews; its vocabulary is the classifier's, plus [MASK]."""

    @property
    def num_classes(self):
        raise AttributeError("masked-token pretraining has no classes")  # so the CLI links none into the model

    def __init__(
        self,
        path: PathName | None = None,
        unlabeled_path: PathName | None = None,
        data_dir: PathName = "data",
        vocab_words: Count = 50_000,
        max_length: Count = 512,
        val_size: Count = 5_000,
        batch_size: Count = 32,
        num_workers: Workers = 0,
        seed: Seed = 1234,
        mask_prob: OpenRate = 0.15,
    ) -> None:
        """
        Args:
            path: The labeled reviews, as for the classifier: aclImdb_v1.tar.gz or aclImdb/; None: Hugging Face.
            unlabeled_path: The unlabeled reviews (aclImdb/train/unsup/): aclImdb_v1_unsup.tar.gz or a folder;
                None: from ``path`` (the official tarball holds them) or, with no path, Hugging Face's
                ``unsupervised`` split.
            data_dir: Where the tokenised caches are written.
            vocab_words: Keep the most frequent N training words (as the classifier that will be fine-tuned).
            max_length: Truncate reviews to this many tokens (as the classifier).
            val_size: Training reviews held out (as the classifier: these are never pretrained on).
            batch_size: Reviews per batch.
            num_workers: DataLoader worker processes.
            seed: Seed of the hold-out (as the classifier), of batch order and of the masks.
            mask_prob: Share of real tokens chosen for prediction (BERT: 0.15).
        """
        super().__init__(path, data_dir, vocab_words, max_length, val_size, batch_size, num_workers, seed)
        check_args(IMDbMLMDataModule.__init__, locals(), "data")
        self.unlabeled_path, self.mask_prob = unlabeled_path, mask_prob
        self.unlabeled: list[Tensor] = []

    @property
    def vocab_size(self) -> int:
        """The classifier's ids plus [MASK]. Linked to model.vocab_size by the CLI."""
        return super().vocab_size + 1

    @property
    def mask_id(self) -> int:
        return super().vocab_size

    @property
    def unlabeled_cache_file(self) -> Path:
        source = self.unlabeled_path or self.path or HF_NAME
        if source != HF_NAME:
            hint = f"aclImdb_v1_unsup.tar.gz (or {ACLIMDB_URL}, which holds aclImdb/train/unsup/) or an aclImdb/ folder"
            source = fingerprint(source, "data.unlabeled_path", hint)
        key = f"{source}|{self.cache_file.name}"  # encoded with that cache's vocabulary
        return self.data_dir / f"imdb-unsup-{hashlib.sha256(key.encode()).hexdigest()[:12]}.pt"

    def prepare_data(self) -> None:
        super().prepare_data()
        if self.unlabeled_cache_file.exists():
            return
        source, flag = self.unlabeled_path or self.path, f"data.{'unlabeled_path' if self.unlabeled_path else 'path'}"
        if source is None:
            texts = read_hf(HF_NAME, ("unsupervised",))["unsupervised"][0]
        else:
            texts = read_unlabeled(Path(source), flag)
        vocab = WordVocab(load_cache(self.cache_file, "vocab")["vocab"])
        encoded = [ids for text in texts if (ids := vocab.encode(tokenize(text)))]  # a review of no word teaches none
        if not encoded:
            raise DataError(
                f"{flag} {str(source)!r} holds no unlabeled reviews (aclImdb/train/unsup/*.txt) with a word in them; "
                "pass --data.unlabeled_path aclImdb_v1_unsup.tar.gz"
            )
        cache = {
            "ids": torch.tensor([i for e in encoded for i in e], dtype=torch.int32),
            "lengths": torch.tensor([len(e) for e in encoded]),
        }
        saved_whole(cache, self.unlabeled_cache_file)

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        if not self.unlabeled:
            cache = load_cache(self.unlabeled_cache_file)
            assert self.vocab is not None  # set by the classifier's setup
            self.unlabeled = unpacked(cache, self.unlabeled_cache_file, self.max_length, self.vocab.size)

    def _masked(self, ids: list[Tensor], order: Literal["bucketed", "length"]) -> MaskedBatches:
        batches = PaddedBatches(ids, torch.zeros(len(ids), dtype=torch.long), self.batch_size, order, self.seed)
        return MaskedBatches(batches, self.mask_id, range(2, self.mask_id), self.mask_prob, self.seed)

    def train_dataloader(self) -> DataLoader:
        batches = self._masked(self.splits["train"][0] + self.unlabeled, "bucketed")
        return self.train_loader(batches, len(batches), shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._masked(self.splits["val"][0], "length"), batch_size=None, num_workers=self.num_workers)

    def test_dataloader(self) -> DataLoader:
        raise ValueError(
            "masked-token pretraining has no test of its own: fine-tune a classifier from its checkpoint "
            "(model.pretrained) and test that"
        )

    def predict_dataloader(self) -> DataLoader:
        raise ValueError("masked-token pretraining predicts nothing: fine-tune a classifier and predict with it")

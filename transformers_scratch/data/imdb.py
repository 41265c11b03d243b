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
from typing import Literal

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from .files import DataError, predicting
from .progress import ResumableData
from .vocab import WordVocab, vocab_from_state, vocab_state

HF_NAME = "stanfordnlp/imdb"
ACLIMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
CLASSES = ("neg", "pos")  # label 0, label 1 (as in the Hugging Face dataset)
TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")  # words (with "don't"-style endings) and symbols
TOKENIZER_VERSION = 1  # bump when tokenize() changes, so caches are rebuilt
Split = tuple[list[str], list[int]]  # texts, labels


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text.replace("<br />", " ").lower())


def read_aclimdb(path: Path) -> dict[str, Split]:
    """train/test texts and labels from aclImdb_v1.tar.gz or an extracted aclImdb/ directory."""
    pattern = re.compile(r"(?:^|/)aclImdb/(train|test)/(neg|pos)/[^/]+\.txt$")
    splits: dict[str, Split] = {"train": ([], []), "test": ([], [])}

    def add(name: str, text: str) -> None:
        m = pattern.search(name)
        if m:
            splits[m[1]][0].append(text)
            splits[m[1]][1].append(CLASSES.index(m[2]))

    try:
        if path.is_dir():
            root = path if path.name == "aclImdb" else path / "aclImdb"
            for f in sorted(root.glob("*/*/*.txt")):
                if f.is_symlink() or not f.resolve().is_relative_to(root.resolve()):
                    continue  # a link could point anywhere: only the folder's own files are read
                add(f.relative_to(root.parent).as_posix(), f.read_text(encoding="utf-8"))
        else:
            with tarfile.open(path) as archive:
                for member in archive:  # regular files only (no links), named inside the archive's folder
                    parts = member.name.split("/")
                    if member.isfile() and ".." not in parts and parts[0] and pattern.search(member.name):
                        add(member.name, archive.extractfile(member).read().decode("utf-8"))
    except (tarfile.TarError, EOFError, OSError) as e:
        raise DataError(
            f"{str(path)!r} is truncated or corrupt ({type(e).__name__}: {e}); download {ACLIMDB_URL} again"
        ) from e
    counts = {name: len(texts) for name, (texts, _) in splits.items()}
    if min(counts.values()) == 0:
        raise DataError(
            f"data.path {str(path)!r} holds no aclImdb/{{train,test}}/{{pos,neg}}/*.txt reviews (found {counts}); "
            f"pass aclImdb_v1.tar.gz from {ACLIMDB_URL} or the aclImdb/ directory it extracts to"
        )
    return splits


def read_hf(name: str) -> dict[str, Split]:
    """train/test texts and labels from the Hugging Face Hub (cached by ``datasets`` after the first time)."""
    try:
        import datasets

        ds = datasets.load_dataset(name)
    except Exception as e:  # noqa: BLE001 - network, hub and cache errors come in many types
        raise DataError(
            f"could not load the IMDb dataset {name!r} from the Hugging Face Hub ({type(e).__name__}: {e}). "
            f"With no network, download {ACLIMDB_URL}, put it in data/ (or anywhere) and pass "
            "--data.path data/aclImdb_v1.tar.gz (the extracted aclImdb/ directory works too)"
        ) from e
    return {split: (list(ds[split]["text"]), list(ds[split]["label"])) for split in ("train", "test")}


def hold_out(labels: list[int], size: int, seed: int) -> list[int]:
    """Indices of a class-balanced, seeded validation sample of ``size`` examples."""
    g = torch.Generator().manual_seed(seed)
    per_class = size // len(CLASSES)
    chosen = []
    for c in range(len(CLASSES)):
        members = [i for i, y in enumerate(labels) if y == c]
        if len(members) < per_class:
            raise DataError(
                f"data.val_size={size} needs {per_class} reviews of class {CLASSES[c]!r}, "
                f"the training data has {len(members)}; lower data.val_size"
            )
        chosen += [members[j] for j in torch.randperm(len(members), generator=g)[:per_class].tolist()]
    return sorted(chosen)


class PaddedBatches(Dataset):
    """Item i is a whole batch, padded only to its longest review: (ids (b, t), mask (b, t), labels (b,)),
    and the reviews' texts when given (prediction prints them beside the predicted class).

    ``order``: ``bucketed`` (training) cuts batches from seeded random pools of ``pool`` batches sorted by
    length, so little is padding, and the training order shuffles the batches each epoch; ``length`` sorts everything by
    length (evaluation); ``given`` keeps the reviews in their order (prediction, one output per input line).
    """

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


class IMDbDataModule(ResumableData):
    """IMDb: 25,000 training reviews (less a held-out validation set) and 25,000 test reviews.

    What a model needs from it (``vocab_size``, ``num_classes``, ``context``) is linked into the model's
    config by the CLI; ``vocab`` and ``class_names`` serve prediction, and the vocabulary travels in
    checkpoints (``state_dict``).
    """

    num_classes = len(CLASSES)
    class_names = CLASSES

    def __init__(
        self,
        path: str | None = None,
        data_dir: str = "data",
        vocab_words: int = 50_000,
        max_length: int = 512,
        val_size: int = 5_000,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 1234,
        predict_path: str | None = None,
    ) -> None:
        """
        Args:
            path: aclImdb_v1.tar.gz or an extracted aclImdb/ directory; None: the Hugging Face ``stanfordnlp/imdb``.
            data_dir: Where the tokenised cache is written.
            vocab_words: Keep the most frequent N training words; the rest become <unk>.
            max_length: Truncate reviews to this many tokens (the model's context must be at least this).
            val_size: Reviews held out of the training data for validation (balanced, seeded).
            batch_size: Reviews per batch.
            num_workers: DataLoader worker processes.
            seed: Seed of the validation hold-out and of batch shuffling.
            predict_path: For ``predict``: a text file with one review per line.
        """
        super().__init__()
        for name, value in (("vocab_words", vocab_words), ("max_length", max_length), ("batch_size", batch_size)):
            if value < 1:
                raise ValueError(f"data.{name}={value} must be a positive integer")
        self.path, self.data_dir, self.vocab_words, self.max_length = path, Path(data_dir), vocab_words, max_length
        self.val_size, self.batch_size, self.num_workers, self.seed = val_size, batch_size, num_workers, seed
        self.predict_path = predict_path
        self.vocab: WordVocab | None = None
        self.splits: dict[str, tuple[list[Tensor], Tensor]] = {}

    @property
    def vocab_size(self) -> int:
        """Token ids the model needs: the words plus <pad> and <unk>. Linked to model.vocab_size by the CLI."""
        return self.vocab_words + 2

    @property
    def context(self) -> int:
        """The longest review in tokens, ``max_length``. Linked to model.context by the CLI."""
        return self.max_length

    @property
    def cache_file(self) -> Path:
        if self.path is None:
            source = HF_NAME
        else:
            p = Path(self.path).resolve()
            if not p.exists():
                raise DataError(
                    f"data.path {self.path!r} does not exist; pass aclImdb_v1.tar.gz or an aclImdb/ "
                    f"directory ({ACLIMDB_URL}), or leave it unset to use the Hugging Face dataset"
                )
            source = f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
        key = f"{source}|{self.vocab_words}|{self.val_size}|{self.seed}|{TOKENIZER_VERSION}"
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
        tokens = {name: [tokenize(t) for t in part[0]] for name, part in parts.items()}
        vocab = WordVocab.build(tokens["train"], self.vocab_words)  # training data only
        cache = {"vocab": vocab.itos[2:]}
        for name, (_, ys) in parts.items():
            encoded = [vocab.encode(t) for t in tokens[name]]
            cache[name] = {
                "ids": torch.tensor([i for e in encoded for i in e], dtype=torch.int32),
                "lengths": torch.tensor([len(e) for e in encoded]),
                "labels": torch.tensor(ys),
            }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.cache_file.with_suffix(".tmp")
        torch.save(cache, tmp)
        tmp.replace(self.cache_file)

    def setup(self, stage: str | None = None) -> None:
        if self.splits or stage == "predict":  # predict reads predict_path with the checkpoint's vocabulary
            return
        cache = torch.load(self.cache_file, weights_only=True)
        if self.vocab is None:  # a checkpoint's vocabulary, if loaded, wins
            self.vocab = WordVocab(cache["vocab"])
        for name in ("train", "val", "test"):
            part = cache[name]
            ids = [x[: self.max_length].long() for x in part["ids"].split(part["lengths"].tolist())]
            self.splits[name] = (ids, part["labels"])

    def _eval_loader(self, split: str) -> DataLoader:
        ids, labels = self.splits[split]
        batches = PaddedBatches(ids, labels, self.batch_size, "length")
        return DataLoader(batches, batch_size=None, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        batches = PaddedBatches(*self.splits["train"], self.batch_size, "bucketed", self.seed)
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
        path = Path(self.predict_path)
        if not path.is_file():
            raise DataError(
                f"data.predict_path {self.predict_path!r} is not a file; give a text file with one review a line"
            )
        texts = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not texts:
            raise DataError(f"data.predict_path {self.predict_path!r} holds no reviews; give one review a line")
        ids = [torch.tensor(self.vocab.encode(tokenize(t))[: self.max_length] or [WordVocab.UNK]) for t in texts]
        batches = PaddedBatches(ids, torch.zeros(len(ids), dtype=torch.long), self.batch_size, "given", texts=texts)
        return DataLoader(batches, batch_size=None)

    def state_dict(self) -> dict:
        return {**(vocab_state(self.vocab) if self.vocab is not None else {}), **self.progress_state()}

    def load_state_dict(self, state: dict) -> None:
        self.vocab = vocab_from_state(state) or self.vocab
        self.load_progress(state)

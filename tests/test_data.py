"""Data modules: splits, windows, vocabularies, archives, and the real IMDb tarball."""

import gzip
import http.server
import itertools
import os
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest
import torch

from transformers_scratch.data import ByteVocab, DataError, IMDbDataModule, IMDbMLMDataModule, TextDataModule
from transformers_scratch.data.files import read_bytes
from transformers_scratch.data.imdb import WordVocab, read_aclimdb, tokenize
from transformers_scratch.data.progress import Progress, ResumableOrder
from transformers_scratch.data.sources import ENWIK8_BYTES, SOURCES
from transformers_scratch.data.text import RandomWindows, StridedWindows, split_bounds

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
IMDB_TARBALL = SHARED / "aclImdb_v1.tar.gz"


@pytest.mark.parametrize("module, loader, message", [
    (lambda: IMDbDataModule(), "predict_dataloader", "predict needs reviews: pass --data.predict_path FILE"),
    (lambda: IMDbDataModule(predict_path="reviews.txt"), "predict_dataloader",
     "predict needs the vocabulary of a trained classifier: pass --ckpt_path"),
    (lambda: IMDbMLMDataModule(), "predict_dataloader", "masked-token pretraining predicts nothing: fine-tune"),
    (lambda: IMDbMLMDataModule(), "test_dataloader", "masked-token pretraining has no test of its own: fine-tune"),
])  # fmt: skip
def test_a_split_the_reviews_modules_cannot_serve_says_what_to_do(module, loader, message):
    with pytest.raises(ValueError, match=message):
        getattr(module(), loader)()


def test_a_tokenizer_path_that_holds_no_tokenizer_json_is_refused_naming_it(tmp_path, monkeypatch):
    from transformers_scratch.data.vocab import TokenizerVocab

    with pytest.raises(DataError, match=f"data.tokenizer '{tmp_path}' is not a tokenizer.json or a folder holding"):
        TokenizerVocab.from_file(str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub name with no hub: the flag is named too
    with pytest.raises(DataError, match="^data.tokenizer 'nobody-here/no-tok' is no folder here"):
        TokenizerVocab.from_file("nobody-here/no-tok")


@pytest.mark.parametrize("words, source, refusal", [
    ({"the": 0}, "data.tokenizer T", r"^the prompt: data.tokenizer T failed to encode text \(.*\); pass one with an "
     "unknown token, or a byte-level one$"),
    ({"the": 0}, "the checkpoint's tokenizer", r"^the prompt: the checkpoint's tokenizer failed to encode text "
     r"\(.*\); give only words it knows$"),
    ({}, "data.tokenizer T", r"^data.tokenizer T holds no tokens; pass a tokenizer.json with a vocabulary$"),
])  # fmt: skip
def test_a_tokenizer_that_cannot_encode_the_text_is_refused_naming_it(words, source, refusal):
    """tokenizers refuses a word its vocabulary lacks, with no unknown token, by a plain Exception; an empty
    vocabulary would reach the model as 0 ids, refused there without naming the tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from transformers_scratch.data.vocab import TokenizerVocab

    tokenizer = Tokenizer(models.WordLevel(words, unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(DataError, match=refusal):
        TokenizerVocab(tokenizer.to_str(), source).encode_text("the cat")


def test_a_zip_of_several_files_none_named_as_the_archive_is_refused(tmp_path):
    archive = tmp_path / "text.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("a.txt", "one")
        z.writestr("b.txt", "two")
    with pytest.raises(DataError, match=f"'{archive}' holds 2 files and none named 'text'"):
        read_bytes(archive)
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("text", "the one")
    assert read_bytes(archive) == b"the one"


def test_an_eval_stride_past_the_context_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"data.eval_stride=9 must lie in \[1, context=8\], or be None"):
        TextDataModule(context=8, eval_stride=9)


@pytest.mark.parametrize("given", [{"path": "text.txt"}, {"download": "python-stdlib"}])
def test_a_download_address_that_nothing_downloads_is_refused(given):
    with pytest.raises(ValueError, match=r"data.url 'https://mirror/x' is unused: .*; drop data.url \(or data"):
        TextDataModule(url="https://mirror/x", **given)
    TextDataModule(url="https://mirror/x")  # a mirror of the text that download names


def test_enwik8_split_is_90m_5m_5m():
    bounds = split_bounds(ENWIK8_BYTES)
    assert bounds == {"train": (0, 90_000_000), "val": (90_000_000, 95_000_000), "test": (95_000_000, 100_000_000)}
    b = split_bounds(1_115_394)  # any other file: 90/5/5, nothing lost
    assert b["train"][0] == 0 and b["train"][1] == b["val"][0] and b["val"][1] == b["test"][0]
    assert b["test"][1] == 1_115_394


@pytest.mark.parametrize("stride", [None, 1, 7, 16])
def test_evaluation_scores_every_byte_exactly_once(stride):
    data = torch.arange(203) % 256  # n = 203, awkward on purpose
    ds = StridedWindows(data.to(torch.uint8), context=16, stride=stride)
    scored = torch.zeros(203, dtype=torch.long)
    for i, p in enumerate(ds.start(i) for i in range(len(ds))):
        x, y = ds[i]
        assert torch.equal(x, data[p : p + 16]) and x.shape == (16,)
        keep = y != -100
        assert torch.equal(y[keep], data[p + 1 : p + 17][keep])  # targets are the next bytes
        scored[p + 1 : p + 17] += keep.long()
        if stride == 1 and i > 0:
            assert keep.sum() == 1 and keep[-1]  # exhaustive: only the byte with a full context
    assert scored[0] == 0 and (scored[1:] == 1).all()


def test_random_windows_are_next_byte_pairs_and_a_function_of_the_batch_number():
    data = torch.arange(1000).to(torch.uint8)
    a = RandomWindows(data, context=32, batch_size=8, seed=1)
    x, y = a[0]
    assert x.shape == y.shape == (8, 32)
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal((x[:, -1] + 1) % 256, y[:, -1])
    assert not torch.equal(a[0][0], a[1][0])  # fresh windows every batch
    assert torch.equal(RandomWindows(data, 32, 8, seed=1)[7][0], a[7][0])  # in any process, in any order
    assert not torch.equal(RandomWindows(data, 32, 8, seed=2)[0][0], a[0][0])


def test_batches_are_the_same_with_a_worker_process_or_without(tmp_path):
    """The CPU recipe makes its batches in the training process (``num_workers: 0``, faster on 2 cores);
    that changes no number, because every batch is a function of its number, not of the process."""
    text = tmp_path / "text.txt"
    text.write_text("".join(chr(97 + (i * i) % 26) for i in range(6000)))

    def batches(workers: int) -> tuple[list, list]:
        module = TextDataModule(str(text), context=16, batch_size=4, batches_per_epoch=6, num_workers=workers)
        module.setup("fit")
        return list(module.train_dataloader()), list(module.val_dataloader())

    (train0, val0), (train1, val1) = batches(0), batches(1)
    assert len(train0) == 6 and len(val0) > 1
    for a, b in zip(train0 + val0, train1 + val1, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_training_order_shares_batches_between_ranks_and_resumes_part_way():
    progress = Progress()
    ranks = [ResumableOrder(10, seed=3, shuffle=True, rank=r, world=2, progress=Progress()) for r in (0, 1)]
    for order in ranks:
        order.set_epoch(1)
    mine = [list(order) for order in ranks]
    assert len(mine[0]) == len(mine[1]) == len(ranks[0]) == 5
    assert not set(mine[0]) & set(mine[1]) and set(mine[0]) | set(mine[1]) == set(range(10, 20))  # epoch 1: 10..19
    one = ResumableOrder(10, seed=3, shuffle=True, rank=0, world=1, progress=progress)
    whole = list(one)
    one.set_epoch(1)
    epoch1 = list(one)
    assert sorted(epoch1) == list(range(10, 20)) and epoch1 != [b + 10 for b in whole]  # reshuffled
    progress.epoch, progress.batches = 1, 4  # a checkpoint saved after 4 batches of epoch 1
    resumed = ResumableOrder(10, seed=3, shuffle=True, rank=0, world=1, progress=progress)
    assert list(resumed) == epoch1[4:] and len(resumed) == 10  # the rest of the epoch; Lightning counts all
    progress.epoch, progress.batches = 1, 10  # saved at the end of epoch 1: the next starts afresh
    assert list(ResumableOrder(10, seed=3, shuffle=True, rank=0, world=1, progress=progress))[0] >= 20


def test_fewer_training_batches_than_devices_are_refused():
    """Each rank takes a whole batch of every ``world``: fewer batches than ranks gave every rank an empty epoch."""
    with pytest.raises(ValueError, match="3 training batches per epoch cannot be shared by 4 devices; use more"):
        ResumableOrder(3, seed=0, shuffle=True, rank=0, world=4, progress=Progress())
    assert len(ResumableOrder(4, seed=0, shuffle=True, rank=3, world=4, progress=Progress())) == 1


def test_byte_vocab_round_trips_and_refuses_unknown_characters():
    full = ByteVocab()
    assert full.size == 256 and full.decode(full.encode_text("héllo")[0]) == "héllo"
    small = ByteVocab(b"\n !abc")
    assert small.size == 6
    assert small.decode(small.encode(b"a cab!")) == "a cab!"
    with pytest.raises(DataError, match="bytes outside the vocabulary of 6"):  # never a silent wrong id
        small.encode(b"a cab?")
    with pytest.raises(ValueError, match="prompt character 'z' is not in the model's vocabulary of 6"):
        small.encode_text("abz")
    with pytest.raises(ValueError, match="empty prompt"):
        full.encode_text("")


def test_archives_read_the_same_bytes(tmp_path):
    payload = b"<mediawiki>" + bytes(range(256)) * 40 + b"</mediawiki>"
    (tmp_path / "enwik8").write_bytes(payload)
    with zipfile.ZipFile(tmp_path / "enwik8.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.write(tmp_path / "enwik8", "enwik8")
    (tmp_path / "enwik8.gz").write_bytes(gzip.compress(payload))
    for name in ("enwik8", "enwik8.zip", "enwik8.gz"):
        assert read_bytes(tmp_path / name) == payload


def test_a_pipe_is_read_whole_and_a_device_without_end_is_refused(tmp_path, monkeypatch):
    """A stream has no size to check first: a pipe (``--data.path <(...)``) is read to its end, and /dev/zero, which
    has none, is refused once past the archives' bound instead of filling the memory (found by the fuzz suite)."""
    from transformers_scratch.data import files

    monkeypatch.setattr(files, "MAX_INFLATED", 1_000_000)
    fifo, payload = tmp_path / "pipe", b"to be or not to be\n" * 1000
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(payload,))
    writer.start()
    assert read_bytes(fifo) == payload
    writer.join()
    with pytest.raises(DataError, match=r"data.path '/dev/zero' is not a regular file and gave more than 1,000,000"):
        read_bytes("/dev/zero")


def test_a_file_past_half_the_memory_is_refused_before_it_is_read(tmp_path):
    """A file is read whole and copied as ids: one past half the memory was read until the machine ran out, and the
    refusal was an out-of-memory line that asked for a smaller batch. A sparse file stands in for a large one."""
    from transformers_scratch.model.config import memory_bytes

    with open(tmp_path / "huge.txt", "wb") as f:
        f.truncate(memory_bytes() // 2 + 1)  # nothing written: no disk or memory used
    said = r"data.path '.*huge.txt' holds .* GB, held twice \(bytes, ids\): more than this machine's memory of .* GB"
    with pytest.raises(DataError, match=said):
        read_bytes(tmp_path / "huge.txt")


@pytest.mark.parametrize("suffix", [".zip", ".gz"])
def test_truncated_archives_are_reported(tmp_path, suffix):
    payload = bytes(range(256)) * 400
    path = tmp_path / f"enwik8{suffix}"
    if suffix == ".zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("enwik8", payload)
    else:
        path.write_bytes(gzip.compress(payload))
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(DataError, match="truncated or corrupt"):
        read_bytes(path)


def test_module_on_an_enwik8_shaped_zip(tmp_path):
    text = b"".join(
        b"<page><title>Article %d</title><text>[[Link]] '''bold''' &amp; more</text></page>\n" % i for i in range(2000)
    )
    with zipfile.ZipFile(tmp_path / "enwik8.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("enwik8", text)
    dm = TextDataModule(path=str(tmp_path / "enwik8.zip"), context=32, batch_size=4, batches_per_epoch=5)
    dm.setup()
    assert sum(len(s) for s in dm.splits.values()) == len(text)
    assert len(dm.splits["val"]) == int(0.05 * len(text))
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 32) and x.dtype == torch.long
    assert dm.vocab_size == 256


def test_file_vocabulary_keeps_only_present_bytes(tmp_path):
    (tmp_path / "t.txt").write_bytes(b"abcab cab\n" * 500)
    dm = TextDataModule(path=str(tmp_path / "t.txt"), vocab="file", context=8)
    assert dm.vocab_size == 5  # \n, space, a, b, c
    dm.setup()
    assert int(dm.splits["train"].max()) == 4


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_enwik8_download_is_verified(tmp_path):
    """The real download path against a loopback server: a file of enwik8's size that is not enwik8 is refused
    by its SHA-256, and removed."""
    served = tmp_path / "served"
    served.mkdir()
    with zipfile.ZipFile(served / "enwik8.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("enwik8", bytes(ENWIK8_BYTES))  # the right size, the wrong bytes
    handler = lambda *a, **k: _Quiet(*a, directory=str(served), **k)  # noqa: E731
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/enwik8.zip"
        dm = TextDataModule(data_dir=str(tmp_path / "data"), url=url)
        sha = SOURCES["enwik8"].sha256
        with pytest.raises(DataError, match=f"its SHA-256 is [0-9a-f]{{64}}, not {sha}; removed it"):
            dm.prepare_data()
        server.shutdown()
    assert not (tmp_path / "data").exists()  # nothing half-right left behind: no file, no partial, no empty folder


@pytest.mark.skipif(not (SHARED / "tinyshakespeare.txt").exists(), reason="needs ../shared/data/tinyshakespeare.txt")
def test_tiny_shakespeare_downloads_through_the_same_verified_path(tmp_path):
    """``download: tinyshakespeare`` fetches the text by its checksum, here from a loopback server that serves
    the real file, then trains on it; a wrong file of the same name is refused."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "input.txt").write_bytes((SHARED / "tinyshakespeare.txt").read_bytes())
    (served / "other.txt").write_bytes(b"not shakespeare " * 1000)
    handler = lambda *a, **k: _Quiet(*a, directory=str(served), **k)  # noqa: E731
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        wrong = TextDataModule(data_dir=str(tmp_path / "bad"), download="tinyshakespeare", url=f"{base}/other.txt")
        with pytest.raises(DataError, match="its SHA-256 is"):
            wrong.prepare_data()
        dm = TextDataModule(data_dir=str(tmp_path / "data"), download="tinyshakespeare", url=f"{base}/input.txt",
                            context=32, batch_size=4)  # fmt: skip
        dm.prepare_data()
        server.shutdown()
    assert (tmp_path / "data" / "tinyshakespeare.txt").stat().st_size == 1_115_394
    dm.setup("fit")
    assert dm.vocab_size == 256 and len(dm.splits["train"]) == int(1_115_394 * 0.9)


def test_enwik8_download_failure_says_what_to_fetch(tmp_path):
    dm = TextDataModule(data_dir=str(tmp_path / "data"), url="http://127.0.0.1:9/enwik8.zip")
    with pytest.raises(DataError, match=r"put it at .*enwik8.zip, or pass --data.path"):
        dm.prepare_data()
    assert not (tmp_path / "data").exists()  # no partial file, and not the empty folder made for it


def make_aclimdb(root: Path, per_class: int = 6) -> Path:
    """A miniature aclImdb/ tree in the official layout."""
    words = {"pos": "great wonderful superb loved", "neg": "awful boring terrible hated"}
    for split in ("train", "test"):
        for label, text in words.items():
            d = root / "aclImdb" / split / label
            d.mkdir(parents=True)
            for i in range(per_class):
                review = f"A {text} film {i}.<br /><br />The END {split}"
                (d / f"{i}_{7 if label == 'pos' else 2}.txt").write_text(review)
    return root / "aclImdb"


def test_imdb_reads_directory_and_tarball_alike(tmp_path):
    root = make_aclimdb(tmp_path)
    with tarfile.open(tmp_path / "aclImdb_v1.tar.gz", "w:gz") as tar:
        tar.add(root, arcname="aclImdb")
    from_dir, from_tar = read_aclimdb(root), read_aclimdb(tmp_path / "aclImdb_v1.tar.gz")
    assert sorted(zip(*from_dir["train"], strict=True)) == sorted(zip(*from_tar["train"], strict=True))
    assert len(from_dir["test"][0]) == 12 and sum(from_dir["test"][1]) == 6


def test_an_imdb_archive_or_folder_holding_a_review_past_any_of_imdbs_is_refused_before_it_is_read(tmp_path):
    """A review's size is known before it is read: a 4 MB tarball holding a gigabyte of one letter took 2.4 GB to
    read (a bomb); one in a folder too."""
    root = make_aclimdb(tmp_path)
    (root / "train" / "pos" / "9_7.txt").write_bytes(b"a" * 1_000_001)
    with tarfile.open(tmp_path / "aclImdb_v1.tar.gz", "w:gz") as tar:
        tar.add(root, arcname="aclImdb")
    for path, name in ((root, "9_7.txt'"), (tmp_path / "aclImdb_v1.tar.gz", "aclImdb_v1.tar.gz''s aclImdb/train/pos/")):
        with pytest.raises(DataError, match=f"{name}.* is a review of 1,000,001 bytes, of .* so far \\(IMDb's are at"):
            read_aclimdb(path)


def test_an_imdb_path_that_is_a_device_is_refused_unread():
    """/dev/zero was read without end (xz's reader takes its nulls for padding); /dev/null stands in for it."""
    with pytest.raises(DataError, match="^data.path '/dev/null' is neither a file nor a folder"):
        read_aclimdb(Path("/dev/null"))


def test_a_pipe_in_an_imdb_folder_is_not_read(tmp_path, waiting_pipe):
    """A review that is a named pipe would be waited on for ever."""
    waiting_pipe(make_aclimdb(tmp_path) / "train" / "pos" / "9_9.txt", "a pipe")
    texts, _ = read_aclimdb(tmp_path / "aclImdb")["train"]
    assert "a pipe" not in texts and len(texts) == 12


def test_imdb_tokens_vocabulary_and_batches(tmp_path):
    make_aclimdb(tmp_path)
    dm = IMDbDataModule(
        path=str(tmp_path / "aclImdb"), data_dir=str(tmp_path / "cache"), val_size=4, batch_size=3, vocab_words=10
    )
    dm.prepare_data()
    dm.setup()
    assert tokenize("Don't stop<br />NOW!") == ["don't", "stop", "now", "!"]
    assert len(dm.splits["train"][0]) == 8 and len(dm.splits["val"][0]) == 4 and len(dm.splits["test"][0]) == 12
    assert dm.splits["val"][1].sum() == 2  # balanced hold-out
    assert "test" not in dm.vocab.stoi  # only "test" split reviews contain that word: vocabulary from training only
    assert len(dm.vocab) == 12 and dm.vocab_size == 12
    for ids, mask, labels in dm.train_dataloader():
        assert ids.shape == mask.shape and len(labels) == len(ids)
        assert (ids[~mask] == WordVocab.PAD).all() and (ids[mask] != WordVocab.PAD).all()
        assert mask.any(1).all() and mask[:, 0].all()  # right padding, to the longest in the batch only


@pytest.mark.parametrize("size", [1, 12])  # none held out of a class; none left to train on (6 reviews a class)
def test_a_hold_out_that_empties_a_split_is_refused_with_the_sizes_that_fit(tmp_path, size):
    make_aclimdb(tmp_path)
    dm = IMDbDataModule(path=str(tmp_path / "aclImdb"), data_dir=str(tmp_path / "cache"), val_size=size)
    with pytest.raises(DataError, match=f"data.val_size={size} holds out {size // 2} reviews of class .* of the "
                                        "training data's 6; pass from 2 to 10"):  # fmt: skip
        dm.prepare_data()


def test_a_class_with_too_few_reviews_to_hold_any_out_is_named(tmp_path):
    """A class with no training review (not one validation size fits), or with one (none is left to train on)."""
    make_aclimdb(tmp_path, per_class=1)
    dm = IMDbDataModule(path=str(tmp_path / "aclImdb"), data_dir=str(tmp_path / "cache"), val_size=2)
    with pytest.raises(DataError, match="holds out 1 reviews of class 'neg' of the training data's 1; pass data tha"):
        dm.prepare_data()
    (tmp_path / "aclImdb/train/neg/0_2.txt").unlink()
    with pytest.raises(DataError, match=r"holds no aclImdb/.*'train/neg': 0, 'train/pos': 1, 'test/neg': 1"):
        dm.prepare_data()


def test_a_split_whose_reviews_hold_no_word_is_named(tmp_path):
    """Its cache would be written, then refused as damaged ("delete it"), and rebuilt the same."""
    for review in (make_aclimdb(tmp_path) / "test").glob("*/*.txt"):
        review.write_text("<br /><br />")
    dm = IMDbDataModule(path=str(tmp_path / "aclImdb"), data_dir=str(tmp_path / "cache"), val_size=2)
    with pytest.raises(DataError, match="aclImdb': no review of its test split holds a word; pass aclImdb_v1.tar.gz"):
        dm.prepare_data()


def _split(cache: dict, **changed) -> dict:
    return {**cache, "train": {**cache["train"], **changed}}


CACHE_DAMAGE = {  # an earlier version's hold-out of every review; a cache without its vocabulary; damaged contents
    "empty-split": lambda c: _split(c, ids=torch.zeros(0, dtype=torch.int32), lengths=torch.zeros(0, dtype=torch.long)),
    "no-vocab": lambda c: {k: v for k, v in c.items() if k != "vocab"},
    "id-past-vocab": lambda c: _split(c, ids=c["train"]["ids"].index_fill(0, torch.tensor([3]), 10**6)),
    "negative-id": lambda c: _split(c, ids=c["train"]["ids"].index_fill(0, torch.tensor([3]), -4)),
    "float-ids": lambda c: _split(c, ids=c["train"]["ids"].float()),
    "label-past-classes": lambda c: _split(c, labels=c["train"]["labels"].index_fill(0, torch.tensor([0]), 7)),
    "labels-too-few": lambda c: _split(c, labels=c["train"]["labels"][:3]),
    "words-repeated": lambda c: {**c, "vocab": c["vocab"][:2] * 2},
    "words-not-text": lambda c: {**c, "vocab": list(range(len(c["vocab"])))},
}


@pytest.mark.parametrize("damage", ["truncated", "compressed", *CACHE_DAMAGE])
def test_a_damaged_or_stale_imdb_cache_is_named_to_delete(tmp_path, damage):
    """The cache is read from disk like any file: ids past the vocabulary, labels past the classes or fewer than
    the reviews were an IndexError at the first batch; compressed entries were inflated whole (a bomb)."""
    make_aclimdb(tmp_path)
    settings = dict(path=str(tmp_path / "aclImdb"), data_dir=str(tmp_path / "cache"), val_size=4)
    IMDbDataModule(**settings).prepare_data()  # type: ignore[arg-type]
    (cache_file,) = (tmp_path / "cache").glob("imdb-*.pt")
    cache = torch.load(cache_file, weights_only=True)
    if damage == "truncated":
        cache_file.write_bytes(cache_file.read_bytes()[:500])
    elif damage == "compressed":  # a cache torch reads, its 8 MB of zeros deflated to kilobytes
        torch.save({**cache, "pad": torch.zeros(2_000_000)}, tmp_path / "plain.pt")
        deflating = zipfile.ZipFile(cache_file, "w", zipfile.ZIP_DEFLATED)
        with zipfile.ZipFile(tmp_path / "plain.pt") as plain, deflating as deflated:
            for entry in plain.infolist():
                deflated.writestr(entry.filename, plain.read(entry.filename))
    else:
        torch.save(CACHE_DAMAGE[damage](cache), cache_file)
    with pytest.raises(DataError, match="is no cache this version reads; delete it, and it is rebuilt from the data"):
        IMDbDataModule(**settings).setup()  # type: ignore[arg-type]


def test_an_imdb_cache_whose_tokenizer_is_damaged_is_named_to_delete(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    make_aclimdb(tmp_path)
    settings = dict(path=str(tmp_path / "aclImdb"), data_dir=str(tmp_path / "cache"), val_size=4,
                    tokenizer=str(tmp_path / "tokenizer.json"))  # fmt: skip
    IMDbDataModule(**settings).prepare_data()  # type: ignore[arg-type]
    (cache_file,) = (tmp_path / "cache").glob("imdb-*.pt")
    torch.save({**torch.load(cache_file, weights_only=True), "tokenizer_json": "{}"}, cache_file)
    with pytest.raises(DataError, match="is no cache this version reads; delete it, and it is rebuilt from the data"):
        IMDbDataModule(**settings).setup()  # type: ignore[arg-type]


def test_a_review_the_checkpoints_tokenizer_cannot_read_names_the_predict_file(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from transformers_scratch.data.vocab import TokenizerVocab

    tokenizer = Tokenizer(models.WordLevel({"good": 0, "film": 1}, unk_token=None))  # no unknown token
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    (tmp_path / "reviews.txt").write_text("good film\ngood zebra\n")
    dm = IMDbDataModule(predict_path=str(tmp_path / "reviews.txt"))
    dm.vocab = TokenizerVocab(tokenizer.to_str())  # as a checkpoint's restores it
    with pytest.raises(DataError, match=r"^data.predict_path '.*reviews.txt': the checkpoint's tokenizer failed to "
                                        r"encode text \(.*\); give only words it knows$"):  # fmt: skip
        dm.predict_dataloader()


def predicting(root: Path, tmp_path: Path) -> IMDbDataModule:
    """A data module set up on the aclImdb/ tree ``root``, to predict the reviews of tmp_path/reviews.txt."""
    dm = IMDbDataModule(path=str(root), data_dir=str(tmp_path / "cache"), val_size=4, batch_size=3,
                        predict_path=str(tmp_path / "reviews.txt"))  # fmt: skip
    dm.prepare_data()
    dm.setup()
    return dm


def test_a_review_or_a_predict_file_that_is_not_utf8_is_named(tmp_path):
    """Not "a --config is not UTF-8": the review in a folder or a tarball, or data.predict_path, by its name."""
    root = make_aclimdb(tmp_path)
    dm = predicting(root, tmp_path)
    (tmp_path / "reviews.txt").write_bytes("a fine film\nun film très bien\n".encode("latin-1"))
    with pytest.raises(DataError, match="data.predict_path '.*reviews.txt' is not UTF-8 text \\(byte 0xe8 at 22\\)"):
        dm.predict_dataloader()
    (root / "train" / "pos" / "0_7.txt").write_bytes(b"caf\xe9")
    with pytest.raises(DataError, match="0_7.txt' is not UTF-8 text"):
        read_aclimdb(root)
    with tarfile.open(tmp_path / "aclImdb_v1.tar.gz", "w:gz") as tar:
        tar.add(root, arcname="aclImdb")
    with pytest.raises(DataError, match="aclImdb_v1.tar.gz''s aclImdb/train/pos/0_7.txt is not UTF-8 text"):
        read_aclimdb(tmp_path / "aclImdb_v1.tar.gz")


def test_a_predict_file_holds_one_review_a_newline(tmp_path):
    """A review may hold characters that str.splitlines() also splits at (IMDb's own hold \\x85): it stays one."""
    root = make_aclimdb(tmp_path)
    dm = predicting(root, tmp_path)
    (tmp_path / "reviews.txt").write_text("a fine film\x85 really\n\nawful\u2028truly\r\n")
    assert sum(len(batch[0]) for batch in dm.predict_dataloader()) == 2


def test_a_predict_file_past_what_predict_reads_at_once_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """The reviews are read and tokenised whole, about ten times their size in memory: 107 MB took 1.2 GB, so a
    file of gigabytes met the machine's limit, with no line to say why. No more than the limit is read, from a
    file or a pipe."""
    from transformers_scratch.data import imdb

    root = make_aclimdb(tmp_path)
    dm = predicting(root, tmp_path)
    (tmp_path / "reviews.txt").write_text("a fine film\n" * 10)
    monkeypatch.setattr(imdb, "MAX_PREDICT", 100)
    with pytest.raises(DataError, match="reviews.txt. holds more than 100 bytes, more than is read at once"):
        dm.predict_dataloader()
    monkeypatch.setattr(imdb, "MAX_PREDICT", 120)
    assert len(dm.predict_dataloader().dataset) == 4  # 10 reviews in batches of 3
    read, write = os.pipe()  # a pipe (predict_path <(zcat reviews.gz)) was refused as no file
    os.write(write, b"a fine film\n" * 5)
    os.close(write)
    dm.predict_path = f"/dev/fd/{read}"
    try:
        assert len(dm.predict_dataloader().dataset) == 2
    finally:
        os.close(read)


def test_word_dropout_replaces_real_training_tokens_by_unk_the_same_way_each_time(tmp_path):
    for i, review in enumerate(sorted((make_aclimdb(tmp_path) / "train").glob("*/*.txt"))):
        review.write_text(review.read_text() + " so" * i)  # lengths differ, so batches have padding
    settings = dict(path=str(tmp_path / "aclImdb"), data_dir=str(tmp_path / "cache"), val_size=4, batch_size=8)
    plain, dropped = IMDbDataModule(**settings), IMDbDataModule(**settings, word_dropout=0.5)
    for dm in (plain, dropped):
        dm.prepare_data()
        dm.setup()
    loader = dropped.train_dataloader()
    (ids, mask, labels), (_, mask_p, labels_p) = loader.dataset[3], plain.train_dataloader().dataset[3]
    assert torch.equal(mask, mask_p) and torch.equal(labels, labels_p)
    for i in range(len(loader.dataset)):  # only real tokens become <unk>; padding is never touched
        (a, real, _), (b, _, _) = loader.dataset[i], plain.train_dataloader().dataset[i]
        assert (a[a != b] == WordVocab.UNK).all() and torch.equal(a[~real], b[~real])
    assert not mask.all()  # the batch above has padding
    assert 0.3 < (ids[mask] == WordVocab.UNK).float().mean() < 0.7  # about half of the real tokens
    assert torch.equal(loader.dataset[3][0], ids) and not torch.equal(loader.dataset[4][0][:1], ids[:1])
    for split in ("val", "test"):  # evaluation reads every word
        assert torch.equal(getattr(dropped, f"{split}_dataloader")().dataset[0][0],
                           getattr(plain, f"{split}_dataloader")().dataset[0][0])  # fmt: skip
    with pytest.raises(ValueError, match=r"data.word_dropout=1.0 is not a number in \[0.0, 1.0\)"):
        IMDbDataModule(word_dropout=1.0)


def test_imdb_bad_paths(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        IMDbDataModule(path=str(tmp_path / "nope.tar.gz")).prepare_data()
    (tmp_path / "broken.tar.gz").write_bytes(gzip.compress(b"x" * 10_000)[:100])
    with pytest.raises(DataError, match="truncated or corrupt"):
        IMDbDataModule(path=str(tmp_path / "broken.tar.gz"), data_dir=str(tmp_path)).prepare_data()
    (tmp_path / "junk.tar").write_bytes(b"junk" * 300)  # tarfile's refusal lists each method it tried, a line each
    with pytest.raises(DataError) as refused:
        IMDbDataModule(path=str(tmp_path / "junk.tar"), data_dir=str(tmp_path)).prepare_data()
    assert "\n" not in str(refused.value) and str(refused.value).endswith("aclImdb_v1.tar.gz again"), refused.value


@pytest.mark.slow
@pytest.mark.skipif(not IMDB_TARBALL.exists(), reason="needs ../shared/data/aclImdb_v1.tar.gz")
def test_real_imdb_tarball_has_the_official_splits():
    splits = read_aclimdb(IMDB_TARBALL)
    for name in ("train", "test"):
        texts, labels = splits[name]
        assert len(texts) == 25_000 and sum(labels) == 12_500


def test_word_vocab_orders_by_frequency_then_word():
    vocab = WordVocab.build([["b", "a", "b"], ["c", "a", "b"]], size=2)
    assert vocab.itos == ["<pad>", "<unk>", "b", "a"]
    assert vocab.encode(["a", "c", "zzz"]) == [3, 1, 1]


def test_imdb_cache_is_written_atomically(tmp_path):
    make_aclimdb(tmp_path)
    dm = IMDbDataModule(path=str(tmp_path / "aclImdb"), data_dir=str(tmp_path / "cache"), val_size=4)
    dm.prepare_data()
    assert [p.suffix for p in (tmp_path / "cache").iterdir()] == [".pt"]
    cache = torch.load(dm.cache_file)
    assert set(cache) == {"vocab", "train", "val", "test"}


def predict_windows(dm: TextDataModule, batches: int | None = None) -> list[tuple]:
    dm.setup("predict")
    loader = dm.predict_dataloader()
    return list(itertools.islice(loader, batches))  # None: all of them


def test_predict_streams_a_raw_file_with_the_windows_of_reading_it_whole(tmp_path):
    """A raw file is read a window at a time; its windows are exactly those of the file read whole (as a .gz
    is), targets and the bytes another window scored included."""
    text = bytes((97 + torch.randint(26, (5_003,), generator=torch.Generator().manual_seed(0))).tolist())
    (tmp_path / "t.txt").write_bytes(text)
    (tmp_path / "t.txt.gz").write_bytes(gzip.compress(text))
    for stride in (None, 5):
        got = [predict_windows(TextDataModule(path=str(tmp_path / "t.txt"), context=16, eval_stride=stride,
                                              batch_size=8, predict_path=str(tmp_path / name)))
               for name in ("t.txt", "t.txt.gz")]  # fmt: skip
        assert len(got[0]) == len(got[1]) > 10
        for (x, y), (x2, y2) in zip(*got, strict=True):
            assert torch.equal(x, x2) and torch.equal(y, y2)


def test_predict_memory_stays_flat_whatever_the_files_size(tmp_path):
    import tracemalloc

    big = tmp_path / "big.txt"
    with big.open("wb") as f:
        for _ in range(40):
            f.write(b"the cat sat on a mat. " * 50_000)  # 44 MB
    dm = TextDataModule(path=str(big), context=64, batch_size=32, predict_path=str(big))
    dm._vocab = ByteVocab()  # the checkpoint's vocabulary, as predict restores it (reading it needs no pass)
    tracemalloc.start()
    predict_windows(dm, batches=20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 5_000_000, peak  # not the file (44 MB), nor a list of its 690,000 windows


@pytest.mark.slow
def test_the_python_stdlib_corpus_is_assembled_the_same_way_and_recorded(tmp_path):
    """``data.download python-stdlib``: the running Python's library, tests and vendored code left out, in sorted
    order; two assemblies give the same bytes, and the record names the version and their SHA-256."""
    import hashlib
    import json
    import platform

    from transformers_scratch.data.sources import assemble_python_stdlib

    dm = TextDataModule(data_dir=str(tmp_path / "data"), download="python-stdlib", context=64)
    dm.prepare_data()
    corpus = tmp_path / "data" / f"python-stdlib-{platform.python_version()}.txt"
    record = json.loads(corpus.with_suffix(".json").read_text())
    text = corpus.read_bytes()
    assert record == {"python": platform.python_version(), "files": record["files"], "bytes": len(text),
                      "sha256": hashlib.sha256(text).hexdigest()}  # fmt: skip
    assert assemble_python_stdlib(tmp_path / "again.txt") == record and (tmp_path / "again.txt").read_bytes() == text
    lines = text.split(b"\n")
    paths = [x[2:].decode() for x in lines if x.startswith(b"# ") and x.endswith(b".py") and b" " not in x[2:]]
    assert text.startswith(b"# __future__.py\n") and {"os.py", "json/decoder.py"} <= set(paths)
    assert not [p for p in paths if {"test", "tests", "site-packages"} & set(p.split("/")[:-1])]
    dm.setup("fit")
    lo, hi = split_bounds(len(text))["test"]
    assert dm.splits["test"].numel() == hi - lo  # the held-out tail: the same bytes for every run on this Python

"""Byte-level language-modelling data: any text file, or enwik8 (the tutorial's experiment 2) by default.

Training batches are random windows of context + 1 bytes (inputs and next-byte targets), drawn afresh every
step, so there are no epochs in the usual sense: an "epoch" is ``batches_per_epoch`` batches. Validation and
test walk their split in windows and score every byte exactly once (see :class:`StridedWindows`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sized
from pathlib import Path
from typing import Literal, cast

import torch
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ..bounds import Count, PathName, Seed, Workers, check_args
from .files import DataError, download, predicting, read_bytes
from .ids import IGNORE_INDEX
from .progress import ResumableData
from .sources import SOURCES, assemble_python_stdlib, python_stdlib_file
from .vocab import ByteVocab, TokenizerVocab, vocab_from_state, vocab_state

SPLITS = (0.9, 0.05, 0.05)  # 90M / 5M / 5M bytes on enwik8, as in the tutorial and the literature


def split_bounds(n: int) -> dict[str, tuple[int, int]]:
    """[start, end) of train, val and test in a file of n bytes: 90/5/5 (90M/5M/5M on enwik8)."""
    n_train, n_val = int(n * SPLITS[0]), int(n * SPLITS[1])
    return {"train": (0, n_train), "val": (n_train, n_train + n_val), "test": (n_train + n_val, n)}


class RandomWindows(Dataset):
    """Item i is training batch number i: ``batch_size`` random windows drawn by a generator seeded with
    ``(seed, i)``, so a batch is the same whichever process (rank, worker) draws it, and a resumed run
    draws exactly the batches the interrupted one would have (see :mod:`.progress`)."""

    def __init__(self, data: Tensor, context: int, batch_size: int, seed: int) -> None:
        self.data, self.context, self.batch_size, self.seed = data, context, batch_size, seed

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        generator = torch.Generator().manual_seed(hash((self.seed, i)) % 2**63)
        starts = torch.randint(len(self.data) - self.context, (self.batch_size, 1), generator=generator)
        windows = self.data[starts + torch.arange(self.context + 1)].long()  # (b, context + 1)
        return windows[:, :-1], windows[:, 1:]  # inputs, next-byte targets: (b, context) each


def ids_at(data, p: int, length: int) -> Tensor:
    """Long ids of positions p .. p + length - 1 (fewer at the end) of ``data``: ids (n,), or a file read in
    windows (:class:`FileWindows`)."""
    return (data.window(p, length) if hasattr(data, "window") else data[p : p + length]).long()


class StridedWindows(Dataset):
    """Windows of context + 1 bytes starting every ``stride`` bytes, each scoring only targets that no
    earlier window scored, so every byte after the first is predicted exactly once.

    stride = context: contiguous, non-overlapping windows (a byte sees 0 to context - 1 earlier bytes).
    stride = 1: the tutorial's exhaustive protocol (every byte sees a full context; context times slower).
    """

    def __init__(self, data, context: int, stride: int | None = None) -> None:
        """``data``: ids (n,), or anything of a length whose ``window(p, length)`` gives ids (a file read in
        windows). Window i starts at i * stride, the last one at n - context - 1 (the tail, scoring only what is
        new); nothing is listed per window, so a file of any length costs the same memory."""
        self.data, self.context, self.stride = data, context, stride or context
        self.last = len(data) - context - 1
        self.regular = self.last // self.stride + 1  # windows at 0, stride, ..., up to last
        self.tail = self.last % self.stride != 0

    def __len__(self) -> int:
        return self.regular + self.tail

    def start(self, i: int) -> int:
        return self.last if i == self.regular else i * self.stride

    def first(self, i: int) -> int:
        """Targets of window i that an earlier window scored: none in the first; the overlap after it."""
        if i == 0:
            return 0
        return max(0, self.start(i - 1) + self.context - self.start(i))

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        window = ids_at(self.data, self.start(i), self.context + 1)  # (context + 1,)
        targets = window[1:].clone()
        targets[: self.first(i)] = IGNORE_INDEX
        return window[:-1], targets


class FileWindows:
    """A raw file's bytes as ids, read a window at a time (``predict`` on a file of any size): its length, and
    ``window(p, length)``, the ids of bytes p .. p + length - 1."""

    def __init__(self, path: Path, vocab: ByteVocab) -> None:
        self.path, self.vocab, self.size = path, vocab, path.stat().st_size

    def __len__(self) -> int:
        return self.size

    def window(self, p: int, length: int) -> Tensor:
        with open(self.path, "rb") as f:
            f.seek(p)
            data = f.read(length)
        try:
            return self.vocab.encode(data)
        except DataError as e:
            raise DataError(f"data.predict_path {str(self.path)!r}, bytes {p:,} on: {e}") from None


class TextDataModule(ResumableData):
    """Byte-level text: any local text file, or a known text downloaded into ``data_dir`` (enwik8 by default;
    :mod:`.sources`), split 90/5/5; the vocabulary travels in checkpoints (``state_dict``)."""

    def __init__(
        self,
        path: PathName | None = None,
        data_dir: PathName = "data",
        context: Count = 256,
        batch_size: Count = 32,
        batches_per_epoch: Count = 1000,
        eval_batch_size: Count | None = None,
        eval_stride: Count | None = None,
        vocab: Literal["bytes", "file"] = "bytes",
        num_workers: Workers = 0,
        seed: Seed = 1234,
        download: Literal["enwik8", "tinyshakespeare", "python-stdlib"] = "enwik8",
        url: str | None = None,
        predict_path: PathName | None = None,
        tokenizer: str | None = None,
    ) -> None:
        """
        Args:
            path: A raw text file, ``.zip`` or ``.gz``. None: the text named by ``download``.
            data_dir: Where that text is downloaded when ``path`` is not given.
            context: Window length the model sees; must not exceed the model's context.
            batch_size: Windows per training batch (per device).
            batches_per_epoch: Training batches that make one "epoch" (windows are random; there is no pass).
            eval_batch_size: Windows per validation/test batch; default: batch_size.
            eval_stride: Bytes between evaluation windows. None: context (contiguous windows);
                1: the tutorial's exhaustive evaluation, every byte predicted from a full context.
            vocab: ``bytes``: all 256 byte values; ``file``: only the byte values in the file.
            num_workers: DataLoader worker processes.
            seed: Seed of the training windows (batch i is drawn with seed and i).
            download: The text to download into ``data_dir`` when ``path`` is not given, checked by its SHA-256:
                ``enwik8`` (36 MB) or ``tinyshakespeare`` (1 MB); or ``python-stdlib``, assembled with no network
                from the running Python's standard library (about 12 MB of ``.py`` source; its version and
                SHA-256 are recorded beside it, in ``python-stdlib-VERSION.json``).
            url: Download it from this address instead (a mirror of the same file).
            predict_path: For ``predict``: a file to score in bits per byte, with this module's windows.
            tokenizer: A Hugging Face ``tokenizer.json``, or a folder that holds one (a pretrained model's):
                sub-word ids instead of bytes (``vocab`` is then unused). Windows, strides and the bits of the
                metrics are then per token, not per byte.
        """
        super().__init__()
        check_args(TextDataModule.__init__, locals(), "data")
        if eval_stride is not None and eval_stride > context:
            raise ValueError(f"data.eval_stride={eval_stride} must lie in [1, context={context}], or be None")
        if url is not None and (path is not None or download == "python-stdlib"):  # it would be read by no one
            why, other = ("data.path names the text", "data.path") if path else ("python-stdlib is assembled here, "
                          "not downloaded", "data.download")  # fmt: skip
            raise ValueError(f"data.url {url[:60]!r} is unused: {why}; drop data.url (or {other})")
        self.path, self.data_dir, self.context, self.batch_size = path, Path(data_dir), context, batch_size
        self.batches_per_epoch, self.eval_stride, self.vocab_kind = batches_per_epoch, eval_stride, vocab
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers, self.seed, self.predict_path = num_workers, seed, predict_path
        self.download = SOURCES.get(download)  # None: the standard library, assembled here
        self.url = url or (self.download.url if self.download else None)
        self.tokenizer = tokenizer
        self._raw: bytes | None = None
        self._vocab: ByteVocab | TokenizerVocab | None = None
        self.splits: dict[str, Tensor] = {}

    # ---- the file -------------------------------------------------------------------------------
    @property
    def source(self) -> Path:
        stored = self.data_dir / (self.download.file if self.download else python_stdlib_file())
        return stored if self.path is None else Path(self.path)

    def prepare_data(self) -> None:
        """Download the text when it is needed and missing (Lightning calls this on one process per node)."""
        if self.path is None and not self.source.exists() and not predicting(self):
            if self.download is None:
                record = assemble_python_stdlib(self.source)
                print(f"assembled {self.source}: the standard library of Python {record['python']}, {record['files']} "
                      f"files, {record['bytes']:,} bytes, SHA-256 {record['sha256']}", file=sys.stderr)  # fmt: skip
                return
            hint = (f"Fetch {self.download.url} yourself and put it at {self.source}, or pass --data.path with a local "
                    "copy (or any other text file).")  # fmt: skip
            assert self.url is not None
            download(self.url, self.source, self.download.about.split(",")[0], hint, sha256=self.download.sha256)

    def raw(self) -> bytes:
        if self._raw is None:
            if self.path is None and not self.source.exists():
                self.prepare_data()  # the vocabulary is wanted before Lightning would call prepare_data
            self._raw = read_bytes(self.source)
            if not self._raw:
                raise DataError(f"{str(self.source)!r} is empty; pass a text file (data.path) with something in it")
        return self._raw

    @property
    def vocab(self) -> ByteVocab | TokenizerVocab:
        if self._vocab is None and self.tokenizer is not None:
            self._vocab = TokenizerVocab.from_file(self.tokenizer)
        if self._vocab is None:
            self._vocab = ByteVocab(None if self.vocab_kind == "bytes" else bytes(sorted(set(self.raw()))))
        return self._vocab

    @property
    def vocab_size(self) -> int:
        """Linked to model.vocab_size by the CLI."""
        return 256 if self.vocab_kind == "bytes" and self.tokenizer is None else self.vocab.size

    # ---- splits and loaders ---------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        # how the printed figure was measured
        if stage in ("validate", "test") and getattr(rank_zero_only, "rank", 0) == 0:
            print(f"{'test' if stage == 'test' else 'val'}/bpc: {self.protocol}", file=sys.stderr)
        if self.splits or stage == "predict":
            return
        data = self.vocab.encode(self.raw())
        unit = f"{self.unit}s"  # a tokenizer's tokens stand for several bytes each
        for name, (lo, hi) in split_bounds(len(data)).items():
            if hi - lo < self.context + 1:
                raise DataError(
                    f"the {name} split of {str(self.source)!r} holds {hi - lo:,} {unit} (the file has {len(data):,}, "
                    f"split 90/5/5), fewer than one window of data.context + 1 = {self.context + 1}; "
                    f"use a file of at least {math.ceil((self.context + 1) / SPLITS[1]):,} {unit} or lower data.context"
                )
            self.splits[name] = data[lo:hi]

    def train_dataloader(self) -> DataLoader:
        windows = RandomWindows(self.splits["train"], self.context, self.batch_size, self.seed)
        return self.train_loader(windows, self.batches_per_epoch, shuffle=False)  # batch numbers are random enough

    def _eval_loader(self, split: str) -> DataLoader:
        dataset = StridedWindows(self.splits[split], self.context, self.eval_stride)
        return DataLoader(dataset, batch_size=self.eval_batch_size, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

    def predict_ids(self, minimum: int, least: str):
        """``predict_path``'s ids, encoded with the (checkpoint's) vocabulary: a raw byte file read in windows
        (:class:`FileWindows`), anything else whole. A file of fewer than ``minimum`` ids (bytes, or a tokenizer's
        tokens) is refused, the message saying ``least``."""
        if self.predict_path is None:
            raise ValueError("predict scores a file: pass --data.predict_path FILE")
        path = Path(self.predict_path)
        # memory flat whatever the size; a sub-word tokenizer reads the text whole (tokens do not start at bytes)
        streamed = path.is_file() and path.suffix not in (".zip", ".gz")
        windows = FileWindows(path, self.vocab) if streamed and isinstance(self.vocab, ByteVocab) else None
        whole = read_bytes(path, "data.predict_path") if windows is None else b""
        try:
            ids = windows if windows is not None else self.vocab.encode(whole)
        except DataError as e:
            raise DataError(f"data.predict_path {self.predict_path!r}: {e}") from e
        if len(ids) < minimum:
            raise DataError(f"data.predict_path {self.predict_path!r} holds {len(ids):,} {self.unit}s, fewer "
                            f"than {least}; pass a longer file")  # fmt: skip
        return ids

    def predict_dataloader(self) -> DataLoader:
        """``predict_path`` in evaluation windows."""
        ids = self.predict_ids(self.context + 1, f"one window of data.context + 1 = {self.context + 1}")
        dataset = StridedWindows(ids, self.context, self.eval_stride)
        return DataLoader(dataset, batch_size=self.eval_batch_size, num_workers=self.num_workers)

    @property
    def protocol(self) -> str:
        """How val/bpc and test/bpc are measured, in words (logged beside them)."""
        u = self.unit
        if self.eval_stride in (None, self.context):
            return f"contiguous windows of {self.context} {u}s (each {u} sees 0..{self.context - 1} earlier {u}s)"
        return f"windows every {self.eval_stride} {u}s (each {u} sees at least {self.context - self.eval_stride})"

    @property
    def unit(self) -> str:
        """What an id stands for: a byte, or a tokenizer's token (the checkpoint's vocabulary's, once it is read)."""
        return self._vocab.unit if self._vocab is not None else "byte" if self.tokenizer is None else "token"

    def seed_text(self, length: int, generator: torch.Generator | None = None) -> Tensor:
        """A random slice of the validation split, (1, length) ids, to seed samples."""
        val = self.splits["val"]
        start = torch.randint(max(1, len(val) - length), (1,), generator=generator).item()
        return val[start : start + length].long()[None]

    # ---- checkpoint state: the vocabulary ---------------------------------------------------------
    def state_dict(self) -> dict:
        return {**vocab_state(self.vocab), **self.progress_state()}

    def load_state_dict(self, state: dict) -> None:
        vocab = vocab_from_state(state)
        if isinstance(vocab, (ByteVocab, TokenizerVocab)):  # what a text checkpoint holds
            self._vocab = vocab
        self.load_progress(state)


class OrderedSegments(Dataset):
    """Transformer-XL's training batches (the authors' ``LMOrderedIterator``): the split cut into ``streams``
    contiguous streams, batch k holding segment k of ``rows`` of them, so that each row's memory is the text just
    before it. Item i: inputs and targets (b, context), and whether it begins the streams (a fresh memory)."""

    def __init__(self, data: Tensor, context: int, streams: int, rows: range) -> None:
        self.data, self.context, self.rows = data, context, rows
        self.length = (len(data) - 1) // streams  # targets per stream
        self.segments = self.length // context
        if self.segments < 1:
            raise DataError(
                f"the train split holds {len(data):,} bytes, too few for {streams} streams of one segment of "
                f"{context} (data.batch_size x devices streams, each at least data.context + 1 bytes); lower "
                "data.batch_size or data.context, or use a longer file"
            )

    def __len__(self) -> int:
        return self.segments

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, bool]:
        k = i % self.segments  # the epoch does not matter: every epoch walks the same streams
        starts = torch.tensor([row * self.length + k * self.context for row in self.rows])[:, None]  # (b, 1)
        windows = self.data[starts + torch.arange(self.context + 1)].long()  # (b, context + 1)
        return windows[:, :-1], windows[:, 1:], k == 0


class StreamedSegments(Dataset):
    """Evaluation with a memory: the split cut into ``streams`` contiguous streams walked in segments, every byte
    after the first scored once with its stream's memory. Item i: segment i of ``rows`` streams (targets
    IGNORE_INDEX past a stream's end), and whether it begins the streams."""

    def __init__(self, data: Tensor, context: int, streams: int, rows: range) -> None:
        self.data, self.context, self.rows = data, context, rows
        if streams > len(data) - 1:
            raise DataError(f"{streams:,} streams (data.eval_batch_size x devices) for {len(data) - 1:,} bytes to "
                            f"score: some would score none; pass a data.eval_batch_size of at most "
                            f"{max(len(data) - 1, 1):,} streams in all")  # fmt: skip
        self.length = -(-(len(data) - 1) // streams)  # targets per stream, the last stream shorter
        self.segments = -(-self.length // context)

    def __len__(self) -> int:
        return self.segments

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, bool]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        n = len(self.data)
        ids = torch.zeros(len(self.rows), self.context, dtype=torch.long)
        targets = torch.full_like(ids, IGNORE_INDEX)
        for r, row in enumerate(self.rows):
            first = row * self.length + i * self.context  # the input before the segment's first target
            end = min(n - 1, (row + 1) * self.length)  # the stream's last target's input + 1
            if first >= end:
                continue
            piece = ids_at(self.data, first, min(n, first + self.context + 1) - first)
            ids[r, : len(piece) - 1] = piece[:-1] if len(piece) > 1 else piece[:0]
            scored = min(end - first, len(piece) - 1)
            targets[r, :scored] = piece[1 : 1 + scored]
        return ids, targets, i == 0


class OrderedTextDataModule(TextDataModule):
    """Byte-level text in ordered streams, for ``LitXL`` (:class:`OrderedSegments`, :class:`StreamedSegments`):
    ``context`` is the segment length; an epoch is one pass down the streams."""

    def segments(self, split: str, streams_per_rank: int, cls: type) -> Dataset:
        rank, world = self.ranks()
        rows = range(rank * streams_per_rank, (rank + 1) * streams_per_rank)
        return cls(self.splits[split], self.context, streams_per_rank * world, rows)

    def train_dataloader(self) -> DataLoader:
        segments = self.segments("train", self.batch_size, OrderedSegments)
        return self.train_loader(segments, len(cast(Sized, segments)), shuffle=False, share=False)

    def _stream_loader(self, dataset: Dataset) -> DataLoader:
        from torch.utils.data import DistributedSampler

        # Every rank walks every segment of its own streams, in order: a DistributedSampler of one replica, which
        # Lightning keeps as it is instead of sharing the segments out between the ranks.
        order: DistributedSampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=False)
        return DataLoader(dataset, batch_size=None, sampler=order, num_workers=self.num_workers)

    def _eval_loader(self, split: str) -> DataLoader:
        return self._stream_loader(self.segments(split, self.eval_batch_size, StreamedSegments))

    def predict_dataloader(self) -> DataLoader:
        ids = self.predict_ids(2, "2: one to read and the one it predicts")
        streams = min(self.eval_batch_size, len(ids) - 1)  # a short file: a stream a byte, as many as it has
        return self._stream_loader(StreamedSegments(ids, self.context, streams, range(streams)))

    @property
    def protocol(self) -> str:
        return (
            f"{self.eval_batch_size} streams in consecutive segments of {self.context} {self.unit}s with the model's "
            f"memory (every {self.unit} scored once)"
        )

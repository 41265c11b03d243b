"""Transduction tasks for the encoder-decoder, generated on the fly from a seed: ``reverse``, ``sort`` and
``add``.

A source and its target are strings of digits (``add`` also uses ``+``), lengths drawn from a range:

    reverse   31415      -> 51413
    sort      31415      -> 11345
    add       315+4096   -> 4411        (each number has min_length..max_length digits)

Every source belongs to one split, by a hash of its text: 90 % of all possible sources are training
sources, 5 % validation, 5 % test. Training draws only training sources, so no validation or test example is
ever a training example, however long training runs. Validation and test are fixed sets drawn from their
own parts. Ids 0, 1 and 2 are padding, begin and end (:class:`~transformers_scratch.models.EncoderDecoder`'s
convention); the characters follow.
"""

from __future__ import annotations

import hashlib
import random
from typing import Literal, cast

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ..bounds import Count, Digits, HeldOut, Seed, Workers, check_args
from ..model.models import EncoderDecoder
from .ids import IGNORE_INDEX
from .progress import ResumableData

ALPHABET = "0123456789+"
SPECIALS = 3  # padding, begin, end
SPLIT_OF = {0: "test", 1: "val"}  # hash % 20 -> split; every other value is training


def split_of(source: str) -> str:
    """The split a source belongs to, the same on every machine and in every run."""
    digest = hashlib.blake2b(source.encode(), digest_size=8).digest()
    return SPLIT_OF.get(int.from_bytes(digest, "big") % 20, "train")


def encode(text: str) -> list[int]:
    """Characters -> ids; a character outside the alphabet is refused by name."""
    bad = next((c for c in text if c not in ALPHABET), None)
    if bad is not None:
        shown = repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text):,} characters)"
        raise ValueError(f"character {bad!r} in {shown} is not in the tasks' alphabet {ALPHABET!r}; use only those")
    return [SPECIALS + ALPHABET.index(c) for c in text]


def decode(ids: list[int]) -> str:
    """Ids -> characters, up to the first end id (special ids are dropped)."""
    out = []
    for i in ids:
        if i == EncoderDecoder.EOS:
            break
        if i >= SPECIALS:
            out.append(ALPHABET[i - SPECIALS])
    return "".join(out)


def example(task: str, rng: random.Random, lo: int, hi: int) -> tuple[str, str]:
    """One (source, target) pair of ``task``, lengths (digits, for add) drawn uniformly from [lo, hi]."""
    if task == "add":
        sizes = rng.randint(lo, hi), rng.randint(lo, hi)
        a, b = (rng.randint(10 ** (n - 1) if n > 1 else 0, 10**n - 1) for n in sizes)
        return f"{a}+{b}", str(a + b)
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(lo, hi)))
    return digits, digits[::-1] if task == "reverse" else "".join(sorted(digits))


def draw(task: str, rng: random.Random, lo: int, hi: int, split: str) -> tuple[str, str]:
    """An example whose source belongs to ``split`` (rejection sampling)."""
    while True:
        src, tgt = example(task, rng, lo, hi)
        if split_of(src) == split:
            return src, tgt


def collate(pairs: list[tuple[str, str]]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(source ids (b, u), source mask (b, u), decoder inputs BOS + target (b, t), targets target + EOS (b, t)),
    padded to the longest of the batch; padded targets are ``IGNORE_INDEX``."""
    src = [encode(s) for s, _ in pairs]
    tgt = [encode(t) for _, t in pairs]
    u, t = max(map(len, src)), max(map(len, tgt)) + 1
    ids = torch.full((len(pairs), u), EncoderDecoder.PAD)
    tgt_in = torch.full((len(pairs), t), EncoderDecoder.PAD)
    tgt_out = torch.full((len(pairs), t), IGNORE_INDEX)
    for i, (s, y) in enumerate(zip(src, tgt, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        tgt_in[i, : len(y) + 1] = torch.tensor([EncoderDecoder.BOS, *y])
        tgt_out[i, : len(y) + 1] = torch.tensor([*y, EncoderDecoder.EOS])
    return ids, ids != EncoderDecoder.PAD, tgt_in, tgt_out


class TrainingBatches(Dataset):
    """Item i is training batch number i, drawn by a generator seeded with ``(seed, i)``: the same batch in
    every process, and a resumed run draws the batches the interrupted one would have."""

    def __init__(self, task: str, lo: int, hi: int, batch_size: int, seed: int) -> None:
        self.task, self.lo, self.hi, self.batch_size, self.seed = task, lo, hi, batch_size, seed

    def __getitem__(self, i: int):
        rng = random.Random(f"train-{self.seed}-{i}")  # a str seed: the same in every process
        return collate([draw(self.task, rng, self.lo, self.hi, "train") for _ in range(self.batch_size)])


class TransductionDataModule(ResumableData):
    """Generated transduction tasks for :class:`~transformers_scratch.training.LitSeq2Seq`."""

    vocab_size = SPECIALS + len(ALPHABET)

    def __init__(
        self,
        task: Literal["reverse", "sort", "add"] = "reverse",
        min_length: Digits = 1,
        max_length: Digits = 12,
        batch_size: Count = 64,
        batches_per_epoch: Count = 500,
        val_size: HeldOut = 1000,
        test_size: HeldOut = 2000,
        num_workers: Workers = 0,
        seed: Seed = 1234,
    ) -> None:
        """
        Args:
            task: ``reverse`` or ``sort`` a string of digits, or ``add`` two numbers.
            min_length: Shortest source (for add: fewest digits of each number).
            max_length: Longest source (for add: most digits of each number).
            batch_size: Examples per batch.
            batches_per_epoch: Training batches that make one "epoch" (validation and checkpoint cadence).
            val_size: Validation examples (distinct, none of them a training example).
            test_size: Test examples (distinct, none of them a training or validation example).
            num_workers: DataLoader worker processes.
            seed: Seed of the training batches and of the validation and test sets.
        """
        super().__init__()
        check_args(TransductionDataModule.__init__, locals(), "data")
        if min_length > max_length:
            raise ValueError(
                f"data.min_length {min_length} and data.max_length {max_length} must satisfy 1 <= min <= max"
            )
        self.task, self.min_length, self.max_length = task, min_length, max_length
        self.batch_size, self.batches_per_epoch, self.val_size, self.test_size = (
            batch_size, batches_per_epoch, val_size, test_size)  # fmt: skip
        self.num_workers, self.seed = num_workers, seed
        self.sets: dict[str, list[tuple[str, str]]] = {}

    @property
    def context(self) -> int:
        """Positions the model needs: the longest source, or the longest target plus its begin/end id."""
        if self.task == "add":
            return max(2 * self.max_length + 1, self.max_length + 2)
        return self.max_length + 1

    def held_out(self, split: str, size: int) -> list[tuple[str, str]]:
        """``size`` distinct examples of ``split``, drawn from a generator of its own."""
        lengths = range(self.min_length, self.max_length + 1)
        numbers = sum(10 if n == 1 else 9 * 10 ** (n - 1) for n in lengths)  # of n digits, none led by a 0 but 0
        space = numbers**2 if self.task == "add" else sum(10**n for n in lengths)  # add's sources: two numbers
        if 20 * size > space + space // 20 + 2_000:  # one source in 20 is the split's: refused now, not after minutes
            raise ValueError(f"data.{split}_size {size} is more than the about {space // 20:,} distinct {split} "
                             f"examples of {self.task} at lengths {self.min_length}..{self.max_length} (one in 20 of "
                             "all); lower it or raise data.max_length")  # fmt: skip
        rng, seen, misses = random.Random(f"{split}-{self.seed}"), set(), 0
        out: list[tuple[str, str]] = []
        while misses <= 20 * len(out) + 10_000:  # that many draws in a row found nothing new: the split is spent
            src, tgt = draw(self.task, rng, self.min_length, self.max_length, split)
            if src in seen:
                misses += 1
                continue
            seen.add(src)
            out.append((src, tgt))
            misses = 0
            if len(out) == size:
                return out
        raise ValueError(
            f"data.{split}_size {size} is more than the {len(out)} distinct {split} examples found of "
            f"{self.task} at lengths {self.min_length}..{self.max_length}; lower it or raise data.max_length"
        )

    def setup(self, stage: str | None = None) -> None:
        if not self.sets and stage != "predict":
            self.sets = {"val": self.held_out("val", self.val_size), "test": self.held_out("test", self.test_size)}

    def train_dataloader(self) -> DataLoader:
        batches = TrainingBatches(self.task, self.min_length, self.max_length, self.batch_size, self.seed)
        return self.train_loader(batches, self.batches_per_epoch, shuffle=False)  # each batch is random already

    def _loader(self, split: str) -> DataLoader:
        sets, size = self.sets[split], self.batch_size
        return DataLoader(cast(Dataset, sets), batch_size=size, collate_fn=collate, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def state_dict(self) -> dict:
        return self.progress_state()

    def load_state_dict(self, state: dict) -> None:
        self.load_progress(state)

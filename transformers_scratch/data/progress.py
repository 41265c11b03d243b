"""Training batches that a resumed run continues exactly: a batch is a function of its number, epoch ``e``'s order
comes from ``(seed, e)``, and the count of batches consumed travels in the checkpoint (the data's ``state_dict``)."""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import asdict, dataclass
from typing import cast

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from ..bounds import MAX_COUNT, is_count


@dataclass
class Progress:
    """Training batches consumed in epoch ``epoch`` (of this rank's share)."""

    epoch: int = 0
    batches: int = 0

    def start(self, epoch: int) -> int:
        """Where epoch ``epoch`` begins: after the consumed batches if it is the epoch a checkpoint was saved
        in, else at its first batch."""
        if epoch != self.epoch:
            self.epoch, self.batches = epoch, 0
        return self.batches


class Epoch(Dataset):
    """Batches numbered without end (item i is batch number i), with an epoch's length: a sampler that lists a
    dataset's items, as Lightning's for ``trainer.overfit_batches`` does, walks batch numbers 0 .. n - 1."""

    def __init__(self, batches: Dataset, n: int) -> None:
        self.batches, self.n = batches, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return self.batches[i]


class ResumableOrder(DistributedSampler):
    """The numbers of this rank's training batches in one epoch, from where training left off: batch
    ``epoch * n + k``, shuffled by ``(seed, epoch)``, rank r of w taking every w-th. A ``DistributedSampler``, so
    Lightning uses it as it is."""

    def __init__(self, n: int, seed: int, shuffle: bool, rank: int, world: int, progress: Progress) -> None:
        if n < world:
            raise ValueError(f"{n} training batches per epoch cannot be shared by {world} devices; use more batches")
        super().__init__(
            cast(Dataset, range(n)), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=True
        )
        self.n, self.progress = n, progress
        # Lightning makes the first iterator before its first set_epoch: start in the epoch the checkpoint was
        # saved in, or in the next one if that epoch was complete (0 in a fresh run).
        self.epoch = progress.epoch + (progress.batches >= self.num_samples)

    def __iter__(self):
        if self.shuffle:
            order = torch.randperm(self.n, generator=torch.Generator().manual_seed(hash((self.seed, self.epoch))))
        else:
            order = torch.arange(self.n)
        mine = order[self.rank : self.num_samples * self.num_replicas : self.num_replicas]  # (num_samples,)
        start = self.progress.start(self.epoch)
        return iter((self.epoch * self.n + mine[start:]).tolist())

    def __len__(self) -> int:
        return self.num_samples  # the whole epoch's share, also when resuming part-way (Lightning counts it so)


class ResumableData(L.LightningDataModule):
    """What both data modules share: training loaders built on :class:`ResumableOrder`, and the count of
    consumed batches, which goes into checkpoints with the vocabulary."""

    seed: int
    num_workers: int
    batch_size: int

    def __init__(self) -> None:
        super().__init__()
        self.progress = Progress()

    def __str__(self) -> str:
        """Its class. Lightning's description builds every loader (jsonargparse writes it into a message), which
        read a predict file once more, and a pipe (``--data.predict_path <(zcat a.gz)``) to its end, first."""
        return type(self).__name__

    def ranks(self) -> tuple[int, int]:
        """This process's rank and the number of processes (0 and 1 outside a trainer)."""
        return (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)

    def train_loader(self, batches: Dataset, n: int, shuffle: bool, share: bool = True) -> DataLoader:
        """A loader of whole batches (``batches[i]`` is batch number i) in a resumable order. ``share``: the ranks
        share the epoch's batches out; else every rank walks all of them (its dataset gives it its own rows)."""
        rank, world = self.ranks() if share else (0, 1)
        order = ResumableOrder(n, self.seed, shuffle, rank, world, self.progress)
        batches = batches if isinstance(batches, Sized) else Epoch(batches, n)
        return DataLoader(
            batches, batch_size=None, sampler=order, num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0, pin_memory=torch.cuda.is_available(),
            generator=torch.Generator().manual_seed(self.seed),  # worker seeds drawn here, not from the global RNG
        )  # fmt: skip

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        if self.trainer is not None and self.trainer.training:  # consumed by a training step
            self.progress.batches += 1
        return batch

    def progress_state(self) -> dict:
        return {"progress": asdict(self.progress), "batch_size": self.batch_size}

    def load_progress(self, state: dict) -> None:
        was = state.get("batch_size")
        if self.trainer is not None and self.trainer.state.fn == "fit" and was not in (None, self.batch_size):
            rank_zero_warn(
                f"resuming with data.batch_size {self.batch_size} (was {was}): applied; the batches from here "
                "on are not those the interrupted run would have drawn"
            )
        if "progress" in state:  # in place: a loader already made holds this object
            where = state["progress"]
            epoch, batches = (where.get("epoch"), where.get("batches")) if isinstance(where, dict) else (None, None)
            if not (is_count(epoch, MAX_COUNT) and is_count(batches, MAX_COUNT)):
                raise ValueError(f"the data position it holds ({str(where)[:60]}) is no epoch and batch count; pass "
                                 "another checkpoint")  # fmt: skip
            self.progress.epoch, self.progress.batches = cast(int, epoch), cast(int, batches)

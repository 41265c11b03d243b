"""Checkpointing that never replaces a good checkpoint with a broken one."""

from __future__ import annotations

import os

import torch
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar


class TrainingDiverged(RuntimeError):
    """The parameters stopped being finite; the message says which checkpoint was kept."""


class SafeModelCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that writes to a temporary file and renames it into place (a crash mid-write
    leaves the previous checkpoint whole), and refuses to save non-finite weights: training stops with an
    error and the last good checkpoint stays as it was."""

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        params = trainer.lightning_module.parameters()
        if not all(torch.isfinite(p).all() for p in params):  # one sync per checkpoint, not per step
            kept = self._last_checkpoint_saved or "none was saved yet"
            raise TrainingDiverged(
                f"the weights became NaN or infinite by step {trainer.global_step}; not saving {filepath}. "
                f"Last good checkpoint: {kept}. Lower the learning rate, lengthen the warm-up or keep gradient "
                "clipping on, then resume from it with --ckpt_path"
            )
        tmp = f"{filepath}.tmp"
        trainer.save_checkpoint(tmp, self.save_weights_only)  # on all ranks; rank 0 writes
        if trainer.is_global_zero:
            os.replace(tmp, filepath)  # atomic on POSIX: the old file until the new one is complete
        trainer.strategy.barrier("SafeModelCheckpoint")
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(self)


class ProgressBar(TQDMProgressBar):
    """The usual bar, plus the training loss and throughput that the module copies to the host on logging
    steps (``TransformerModule.log_train``), so showing them costs no device sync."""

    def get_metrics(self, trainer, pl_module) -> dict:
        items = super().get_metrics(trainer, pl_module)
        items.update({k: f"{v:.4g}" for k, v in pl_module.__dict__.get("shown", {}).items()})
        return items

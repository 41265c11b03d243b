"""What a run says on the terminal. stdout holds a command's output only (a sample, predictions); the run's own
notes go to stderr through :func:`note`. By default a run is quiet: Lightning's and W&B's messages, the model
summary and the warnings listed in :func:`quiet` are left out, and ``--verbose`` brings them back."""

from __future__ import annotations

import logging
import os
import sys
import warnings

from lightning.pytorch.utilities import rank_zero_only

SILENCED = [
    # The run-folder lock (training/checkpoints.py) already refuses a fresh fit over another run's checkpoints;
    # the folder is never empty here, since the lock file lives in it.
    r"Checkpoint directory .* exists and is not empty",
    # Resume is exact: the data modules save and restore their position themselves (data/progress.py), which
    # Lightning cannot see in a plain DataLoader.
    r".*your dataloader is not resumable.*",
    # Inside Lightning with this torch; nothing a user can act on.
    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",
]


def note(message: str) -> None:
    """One line (or a few) for the user, on stderr, from the first process only."""
    if rank_zero_only.rank == 0:
        print(message, file=sys.stderr, flush=True)


def quiet() -> None:
    """Leave out what a run does not need to say: Lightning's information (devices, seed, tips), W&B's
    terminal output (the run's folder is in the run's own header) and the warnings in :data:`SILENCED`."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("WANDB_SILENT", "true")
    for pattern in SILENCED:
        warnings.filterwarnings("ignore", message=pattern)

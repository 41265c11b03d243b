"""What a run says on the terminal: stdout holds a command's output only, notes go to stderr (:func:`note`).
A run is quiet unless ``--verbose``; the warnings in :data:`SILENCED` are never shown (the reasons beside them)."""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_only

from ..data.files import LONGEST, shortened

INTERRUPTED = "interrupted (Ctrl-C); run the command again to redo it"
"""A command's one line on Ctrl-C, outside a fit (whose first Ctrl-C saves the run and says how to continue)."""

SILENCED = [
    # The run-folder lock (training/run_folder.py) already refuses a fresh fit over another run's checkpoints;
    # the folder is never empty here, since the lock file lives in it.
    r"Checkpoint directory .* exists and is not empty",
    # Resume is exact: the data modules save and restore their position themselves (data/progress.py), which
    # Lightning cannot see in a plain DataLoader.
    r".*your dataloader is not resumable.*",
    # A run that ends before its first validation has no score to rank checkpoints by, and last.ckpt holds it;
    # the hint asks whether the module logs its metric, which it does (a val/ monitor that validation never logs is
    # refused before the run starts, against the module's val_metrics; any other, at the first validation).
    r"`ModelCheckpoint\(monitor=.*could not find the monitored key",
    # predict's writer writes each batch's lines as they come, in the loader's order, and reads no batch indices,
    # which Lightning cannot infer where a loader's items are whole batches (the reviews').
    r"Couldn't infer the batch indices",
    # Inside Lightning with this torch; nothing a user can act on.
    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",
    r"torch\.distributed\.nn\.functional\.all_gather is deprecated",  # Lightning's all_gather (a LitXL's memory)
]


def silence() -> None:
    for pattern in SILENCED:
        warnings.filterwarnings("ignore", message=pattern)


def shown(path) -> str:
    """A path as the user would type it: relative to the working folder when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def clipped(message: str) -> str:
    """A message whose every value fits a line: each run of non-blank characters (a 50 MB ``--name``, a path
    of 5,000) :func:`~..data.files.shortened`."""

    def clip(word: re.Match) -> str:  # a quoted value keeps its quotes, and what follows them ("'x...':")
        parts = re.fullmatch(r"(['\"]?)(.*?)(\1\W*)", word[0], re.S)
        assert parts is not None  # every word matches: no quote, and nothing after it
        quote, value, after = parts.groups()
        return quote + shortened(value) + after

    return re.sub(rf"\S{{{LONGEST + 1},}}", clip, message)


def live_bars() -> list:
    """The progress bars (tqdm's, which Lightning's bar is) still drawn on the terminal."""
    from tqdm import tqdm

    return [bar for bar in list(getattr(tqdm, "_instances", ())) if not getattr(bar, "disable", True)]


def close_bars() -> None:
    """End every live progress bar on a line of its own, so that what follows starts a line and no bar is drawn
    again below it (tqdm redraws an open bar when it is collected)."""
    bars = live_bars()
    for bar in bars:
        bar.close()
    if bars and not bars[-1].leave and not sys.stderr.isatty():  # a bar closed in a pipe or file ends in "\r"
        print(file=sys.stderr)


def note(message: str) -> None:
    """One line (or a few) for the user, on stderr, from the first process only: above a live progress bar, which
    is drawn again below it, and never on the bar's own line."""
    if getattr(rank_zero_only, "rank", 0) != 0:
        return
    if live_bars() and sys.stderr.isatty():
        from tqdm import tqdm

        tqdm.write(clipped(message), file=sys.stderr)  # clears the bar, writes the line, draws the bar below
    else:  # in a file or pipe a bar is a run of carriage returns with no newline: end it first
        print(("\n" if live_bars() else "") + clipped(message), file=sys.stderr, flush=True)


def quiet() -> None:
    """Leave out Lightning's information, W&B's terminal output and the Hugging Face Hub's retries, and Lightning's
    advice to add loader workers on a machine of many cores: each config sets its workers on purpose (a worker of
    the CPU configs, whose batches are slices of text in memory, was measured to slow training: benchmarks.md)."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r"The '\w+' does not have many workers")
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")  # read when huggingface_hub is imported; if it was already,
    for name in ("huggingface_hub", "torch.multiprocessing.spawn"):  # and torch's "Terminating process" after a refusal
        logging.getLogger(name).setLevel(logging.ERROR)

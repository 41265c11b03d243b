"""Soak test: does a long run's memory stay flat? A benchmark-style script, not a timed test.

    python cli.py soak --data.path tinyshakespeare.txt

Runs the real ``fit`` (shared loggers and callbacks, CSV and W&B offline, validation and samples) on a tiny
character model for 2,000 steps, logging every step, and reads the process's resident memory (RSS) every
100 steps. After a warm-up, RSS must stay within ``--bound_mb`` of its value then; the script prints the
readings and exits 1 if it does not.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback

from ..bounds import Count, NonNegative, NonNegativeFloat, PathName
from . import Parser, bounded

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "tiny_charlm.yaml"


def rss_mb() -> float:
    """Resident memory of this process now (Linux: /proc/self/statm), in MiB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class Memory(Callback):
    def __init__(self, every: int) -> None:
        self.every = every
        self.readings: list[tuple[int, float]] = []

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step % self.every == 0:
            self.readings.append((trainer.global_step, rss_mb()))


def main(argv: list[str], build) -> int:
    """``build``: the command line's run builder (``cli.build_cli``), which the CLI hands in."""
    parser = Parser(prog=f"{Path(sys.argv[0]).name} soak", description=__doc__.splitlines()[0])
    parser.add_argument("--data.path", dest="path", type=bounded(PathName), required=True,
                        help="A text file (e.g. tinyshakespeare.txt).")  # fmt: skip
    parser.add_argument("--steps", type=bounded(Count), default=2000, help="Training steps.")
    parser.add_argument("--warmup", type=bounded(NonNegative), default=300, help="Steps before the reference reading.")
    parser.add_argument(
        "--bound_mb", type=bounded(NonNegativeFloat), default=20.0, help="Allowed RSS growth after the warm-up."
    )
    args = parser.parse_args(argv)
    if args.warmup > args.steps - 100:
        parser.error(f"--steps {args.steps} and --warmup {args.warmup}: RSS is read every 100 steps, and compared "
                     "after the warm-up, so give 0 <= warmup <= steps - 100")  # fmt: skip
    os.environ.setdefault("WANDB_MODE", "offline")
    data = Path(args.path).resolve()  # where the command was given, before the scratch folder

    work = Path(tempfile.mkdtemp(prefix="soak-"))
    os.chdir(work)  # its logs and checkpoints go to a scratch folder
    run = build(
        ["--config", str(CONFIG), "--data.path", str(data), "--trainer.max_steps",
         str(args.steps), "--trainer.log_every_n_steps", "1", "--data.batches_per_epoch", "250",
         "--trainer.limit_val_batches", "5", "--trainer.enable_progress_bar", "false"],
        run=False,
    )  # fmt: skip
    memory = Memory(every=100)
    run.trainer.callbacks.append(memory)
    start = time.perf_counter()
    run.trainer.fit(run.model, datamodule=run.datamodule)
    seconds = time.perf_counter() - start
    after = [(step, mb) for step, mb in memory.readings if step >= args.warmup]
    base = after[0][1]
    growth = max(mb for _, mb in after) - base
    print("step  RSS MiB")
    for step, mb in memory.readings:
        print(f"{step:>5}  {mb:8.1f}")
    verdict = "flat" if growth <= args.bound_mb else "GROWING"
    print(
        f"soak: {args.steps} steps logged every step in {seconds:.0f} s; RSS after step {after[0][0]}: {base:.1f} MiB, "
        f"largest growth since: {growth:+.1f} MiB (bound {args.bound_mb:g} MiB): {verdict}; logs in {work}"
    )
    return 0 if growth <= args.bound_mb else 1

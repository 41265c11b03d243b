"""The length-extrapolation experiment: do positions carry past the training context?

    python -m transformers_scratch.extrapolate --data.path ../shared/data/tinyshakespeare.txt

Trains the character model of ``configs/tiny_charlm.yaml`` + ``configs/extrapolate.yaml`` (context 256)
once per position kind, with the same steps and seed, through the real ``cli.py fit``; then runs
``cli.py test`` on each checkpoint with contiguous windows of 256, 512 and 1,024 bytes, and prints the
test bits per character as a table. A longer window gives each byte more earlier bytes to read, so a model
whose positions carry past its training context gains, and one whose positions do not, loses. Learned
embeddings have no vector past 256 and are refused there. Runs already trained in ``--work`` are reused.
``--config`` adds configs on top, e.g. ``configs/extrapolate_enwik8.yaml`` (the tutorial's enwik8 sizes).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [ROOT / "configs" / "tiny_charlm.yaml", ROOT / "configs" / "extrapolate.yaml"]
KINDS = ["learned", "sinusoidal", "rope", "alibi"]
TEST_BPC = re.compile(r"test/bpc[\s│|]+([0-9]+\.[0-9]+)")  # Lightning's table: plain, or boxed where rich is installed


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")}
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data.path", dest="path", required=True, help="A text file (e.g. tinyshakespeare.txt).")
    parser.add_argument("--steps", type=int, default=1000, help="Training steps per position kind.")
    parser.add_argument("--windows", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--kinds", nargs="+", default=KINDS, choices=KINDS)
    parser.add_argument("--work", default="runs/extrapolate", help="Checkpoints and logs go here.")
    parser.add_argument("--config", action="append", default=[], help="More configs on top (repeatable), "
                        "e.g. configs/extrapolate_enwik8.yaml for the tutorial's enwik8 sizes.")  # fmt: skip
    args = parser.parse_args(argv)
    work, path = Path(args.work).resolve(), str(Path(args.path).resolve())
    work.mkdir(parents=True, exist_ok=True)
    extra = [Path(config).resolve() for config in args.config]
    configs = [arg for config in CONFIGS + extra for arg in ("--config", str(config))]
    table, start = {}, time.perf_counter()
    for kind in args.kinds:
        name = f"extrapolate-{kind}"
        last = work / "checkpoints" / name / "last.ckpt"
        done = last.is_file() and torch.load(last, weights_only=True)["global_step"] >= args.steps
        if not done:
            resume = ["--ckpt_path", "last"] if last.is_file() else []
            began = time.perf_counter()
            fit = cli("fit", *configs, "--data.path", path, "--model.model.positions", kind, "--name", name,
                      "--trainer.max_steps", str(args.steps), "--trainer.enable_progress_bar", "false", *resume,
                      cwd=work)  # fmt: skip
            if fit.returncode:
                print(fit.stderr[-3000:], file=sys.stderr)
                return 1
            print(f"{kind}: trained {args.steps} steps in {time.perf_counter() - began:.0f} s", flush=True)
        for window in args.windows:
            test = cli("test", *configs, "--data.path", path, "--model.model.positions", kind, "--name", name,
                       "--data.context", str(window), "--ckpt_path", str(last), "--trainer.logger", "false",
                       "--trainer.enable_progress_bar", "false", cwd=work)  # fmt: skip
            found = TEST_BPC.search(test.stdout)
            error = next((line for line in test.stderr.splitlines() if line.startswith("error:")), "failed")
            if "have no vector past" in error:
                error = "refused: no learned vector past 256"
            table[kind, window] = f"{float(found.group(1)):.3f}" if found else error
            print(f"{kind} at {window}: {table[kind, window]}", flush=True)
    print(f"\ntest bits per character, trained at context 256 ({args.steps} steps each); "
          f"{time.perf_counter() - start:.0f} s in all\n")  # fmt: skip
    print("| positions | " + " | ".join(f"window {w}" for w in args.windows) + " |")
    print("|---|" + "---:|" * len(args.windows))
    for kind in args.kinds:
        print(f"| {kind} | " + " | ".join(table[kind, w] for w in args.windows) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

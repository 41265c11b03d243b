"""The length-extrapolation experiment: do positions carry past the training context?

    python cli.py extrapolate --data.path tinyshakespeare.txt

Trains ``configs/tiny_charlm.yaml`` + ``configs/extrapolate.yaml`` (context 256) once per position kind through
the real ``fit``, then tests each checkpoint with windows of 256, 512 and 1,024 bytes and prints the bits per
character (learned positions have none past 256). Runs already in ``--work`` are reused; ``--config`` adds configs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..bounds import Count, PathName
from ..training.checkpoints import Checkpoint
from . import Parser, bounded

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [ROOT / "configs" / "tiny_charlm.yaml", ROOT / "configs" / "extrapolate.yaml"]
KINDS = ["learned", "sinusoidal", "rope", "alibi"]


def run(build, args: list[str], cwd: Path) -> tuple[float | None, str]:
    """One fit or test through the command line's run builder, in ``cwd``: (test/bpc or None, the error if any)."""
    here = Path.cwd()
    os.chdir(cwd)
    try:
        trainer = build(args).trainer
        return (float(trainer.callback_metrics["test/bpc"]) if args[0] == "test" else None), ""
    except ValueError as e:  # the run's own refusal (a test split shorter than the window), one line
        return None, str(e)
    finally:
        os.chdir(here)


def main(argv: list[str], build) -> int:
    """``build``: the command line's run builder (``cli.build_cli``), which the CLI hands in."""
    parser = Parser(prog=f"{Path(sys.argv[0]).name} extrapolate", description=__doc__.splitlines()[0])
    a_path = bounded(PathName)  # an empty one would be the working folder
    parser.add_argument("--data.path", dest="path", type=a_path, required=True,
                        help="A text file (e.g. tinyshakespeare.txt).")  # fmt: skip
    parser.add_argument("--steps", type=bounded(Count), default=1000, help="Training steps per position kind.")
    parser.add_argument("--windows", type=bounded(Count), nargs="+", default=[256, 512, 1024],
                        help="Test windows, in characters (the models train at the config's context).")  # fmt: skip
    parser.add_argument("--kinds", nargs="+", default=KINDS, choices=KINDS, help="Position kinds to train.")
    parser.add_argument("--work", type=a_path, default="runs/extrapolate", help="Checkpoints and logs go here.")
    parser.add_argument("--config", type=a_path, action="append", default=[], help="More configs on top (repeatable), "
                        "e.g. configs/extrapolate_enwik8.yaml for the tutorial's enwik8 sizes.")  # fmt: skip
    args = parser.parse_args(argv)
    os.environ.setdefault("WANDB_MODE", "disabled")
    work, path = Path(args.work).resolve(), str(Path(args.path).resolve())
    work.mkdir(parents=True, exist_ok=True)
    extra = [Path(config).resolve() for config in args.config]
    configs = [arg for config in CONFIGS + extra for arg in ("--config", str(config))]
    table, contexts, start = {}, set(), time.perf_counter()
    for kind in args.kinds:
        name = f"extrapolate-{kind}"
        last = work / "checkpoints" / name / "last.ckpt"
        ckpt = Checkpoint(str(last), weights=False) if last.is_file() else None
        if ckpt is None or ckpt.step < args.steps:
            resume = ["--ckpt_path", "last"] if ckpt else []
            began = time.perf_counter()
            fit = ["fit", *configs, "--data.path", path, "--model.model.positions", kind, "--name", name,
                   "--trainer.max_steps", str(args.steps), "--trainer.enable_progress_bar", "false",
                   *resume]  # fmt: skip
            _, error = run(build, fit, work)
            if error:
                print(f"error: {kind}: {error}", file=sys.stderr)
                return 1
            print(f"{kind}: trained {args.steps} steps in {time.perf_counter() - began:.0f} s", flush=True)
            ckpt = Checkpoint(str(last), weights=False)
        trained = (ckpt.model or {}).get("context")  # the context it trained at
        contexts.add(str(trained))
        for window in args.windows:
            if kind == "learned" and window != trained:  # one vector a trained position: no other window to test
                table[kind, window] = "refused"
                print(f"learned at {window}: refused, its vectors are one for each of {trained} positions", flush=True)
                continue
            test = ["test", *configs, "--data.path", path, "--model.model.positions", kind, "--name", name,
                    "--data.context", str(window), "--ckpt_path", str(last), "--trainer.logger", "false",
                    "--trainer.enable_progress_bar", "false"]  # fmt: skip
            bpc, error = run(build, test, work)
            table[kind, window] = f"{bpc:.3f}" if bpc is not None else error or "failed"
            print(f"{kind} at {window}: {table[kind, window]}", flush=True)
    print(f"\ntest bits per character, trained at context {', '.join(sorted(contexts))} ({args.steps} steps each); "
          f"{time.perf_counter() - start:.0f} s in all\n")  # fmt: skip
    print("| positions | " + " | ".join(f"window {w}" for w in args.windows) + " |")
    print("|---|" + "---:|" * len(args.windows))
    for kind in args.kinds:
        print(f"| {kind} | " + " | ".join(table[kind, w] for w in args.windows) + " |")
    return 0

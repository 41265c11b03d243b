"""The command line: ``transformers-scratch`` once installed, or ``python cli.py`` in a checkout.

    cli.py fit --config configs/tiny_charlm.yaml            # train (validate, test and predict alike)
    cli.py fit --config configs/tiny_charlm.yaml --ckpt_path last     # resume
    cli.py sample --ckpt_path checkpoints/tiny_charlm/last.ckpt --prompt "ROMEO:"

Lightning's four commands come from :mod:`.lightning`; the others are the typed functions of :mod:`.commands`
(and two experiments that need a configured run), whose signatures and docstrings give their options and help.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jsonargparse import ArgumentError, ArgumentParser
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from ..data import DataError
from ..experiments import extrapolate, soak
from ..training.callbacks import TrainingDiverged
from ..training.console import clipped, close_bars, error_line
from . import commands
from .lightning import brief, build_cli

LIGHTNING = {
    "fit": "Train a model (a config names the model, data and trainer).",
    "validate": "Score a checkpoint on the validation split.",
    "test": "Score a checkpoint on the test split.",
    "predict": "Score or classify a file with a checkpoint.",
}
FUNCTIONS = {f.__name__: f for f in (commands.sample, commands.decode, commands.export, commands.attention,
                                     commands.plot, commands.convert_xl)}  # fmt: skip
EXPERIMENTS = {"extrapolate": extrapolate.main, "soak": soak.main}  # argparse scripts that build runs with build_cli


def prog() -> str:
    """The name this command was invoked by: ``cli.py`` or ``transformers-scratch``."""
    return Path(sys.argv[0]).name or "transformers-scratch"


def usage() -> str:
    lines = [f"usage: {prog()} COMMAND [options]      ({prog()} COMMAND --help for a command's options)", ""]
    lines += [f"  {name:<12}{text}" for name, text in LIGHTNING.items()]
    lines += [f"  {name:<12}{(f.__doc__ or '').splitlines()[0]}" for name, f in FUNCTIONS.items()]
    lines += [f"  {name:<12}{(f.__module__ and sys.modules[f.__module__].__doc__ or '').splitlines()[0]}"
              for name, f in EXPERIMENTS.items()]  # fmt: skip
    return "\n".join(lines)


def run_function(name: str, argv: list[str]) -> None:
    """One of :data:`FUNCTIONS`, its options parsed from its signature by jsonargparse."""
    function = FUNCTIONS[name]
    parser = ArgumentParser(prog=f"{prog()} {name}", description=(function.__doc__ or "").split("\n\n")[0],
                            exit_on_error=False)  # fmt: skip
    positional = ["run"] if name == "plot" else []  # plot RUN: the one argument that reads best bare
    parser.add_function_arguments(function, as_group=False, skip=set(positional))
    for arg in positional:
        parser.add_argument(arg, type=str, help="A run's log folder (logs/<name>/version_N) or its metrics.csv.")
    function(**parser.parse_args(argv).as_dict())


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        if not args or args[0] in ("-h", "--help"):
            print(usage())
        elif args[0] in FUNCTIONS:
            run_function(args[0], args[1:])
        elif args[0] in EXPERIMENTS:
            sys.exit(EXPERIMENTS[args[0]](args[1:], build_cli))
        else:
            build_cli(argv)  # None: LightningCLI reads sys.argv itself
    except (ValueError, OSError, TrainingDiverged, DataError, ArgumentError, MisconfigurationException) as e:
        # The user's input or files: one line.
        if os.environ.get("TS_DEBUG"):
            raise
        close_bars()
        print(f"error: {clipped(brief(error_line(e)))}\n(set TS_DEBUG=1 to see the traceback)", file=sys.stderr)
        sys.exit(1)

"""The command line: ``transformers-scratch`` once installed, or ``python cli.py`` in a checkout.

    cli.py fit --config configs/tiny_charlm.yaml            # train (validate, test and predict alike)
    cli.py fit --config configs/tiny_charlm.yaml --ckpt_path last     # resume
    cli.py sample --ckpt_path checkpoints/tiny_charlm/last.ckpt --prompt "ROMEO:"

Lightning's four commands come from :mod:`.lightning`; the others are the typed functions of :mod:`.commands`
(and two experiments that need a configured run), whose signatures and docstrings give their options and help.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
from functools import cache
from pathlib import Path
from typing import NoReturn

from ..atomic import debugging, output_closed, output_unwritable, stopped_reading

# The help names every command without importing torch or Lightning (a fraction of a second, not seconds).
LIGHTNING = {
    "fit": "Train a model (a config names the model, data and trainer).",
    "validate": "Score a checkpoint on the validation split.",
    "test": "Score a checkpoint on the test split.",
    "predict": "Score or classify a file with a checkpoint.",
}
FUNCTION_NAMES = ("sample", "decode", "export", "attention", "plot", "context", "convert_xl")  # of commands.py
EXPERIMENT_NAMES = ("extrapolate", "soak")  # argparse scripts of experiments/ that build runs with build_cli
PACKAGE = Path(__file__).resolve().parents[1]
RANKS = ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")  # a launcher's variables
DEBUG_HINT = "(set TS_DEBUG=1 to see the traceback)"
LIBRARY_SETTINGS = ("TORCH", "PYTORCH", "TRITON", "CUDA", "OMP_", "MKL_", "MPL", "TQDM_", "PL_", "WANDB_", "HF_",
                    "JSONARGPARSE_")  # fmt: skip


@cache
def _tables() -> tuple[dict, dict]:
    from ..experiments import extrapolate, soak
    from . import commands

    functions = {name: getattr(commands, name) for name in FUNCTION_NAMES}
    return functions, {"extrapolate": extrapolate.main, "soak": soak.main}


def __getattr__(name: str):
    """The parts that import torch and Lightning, imported on first use (PEP 562)."""
    if name in ("FUNCTIONS", "EXPERIMENTS"):
        return _tables()[name == "EXPERIMENTS"]
    if name == "build_cli":
        from .lightning import build_cli

        return build_cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache
def _parsed(source: Path) -> ast.Module:
    return ast.parse(source.read_text(encoding="utf-8"))  # once a file, for all of its commands


def summary(source: Path, function: str | None = None) -> str:
    """The first line of a module's docstring, or of one of its functions', read from its source unimported."""
    tree = _parsed(source)
    node = tree if function is None else next(n for n in tree.body if getattr(n, "name", None) == function)
    return (ast.get_docstring(node) or "").splitlines()[0]  # type: ignore[arg-type]


def prog() -> str:
    """The name this command was invoked by: ``cli.py`` or ``transformers-scratch``."""
    return Path(sys.argv[0]).name or "transformers-scratch"


def usage() -> str:
    lines = [f"usage: {prog()} COMMAND [options]      ({prog()} COMMAND --help for a command's options)", ""]
    lines += [f"  {name:<12}{text}" for name, text in LIGHTNING.items()]
    lines += [f"  {name:<12}{summary(PACKAGE / 'cli' / 'commands.py', name)}" for name in FUNCTION_NAMES]
    lines += [f"  {name:<12}{summary(PACKAGE / 'experiments' / f'{name}.py')}" for name in EXPERIMENT_NAMES]
    return "\n".join(lines)


def run_function(name: str, argv: list[str]) -> None:
    """One of :data:`FUNCTIONS`, its options parsed from its signature by jsonargparse."""
    from jsonargparse import ArgumentError, ArgumentParser

    from ..bounds import PathName, register

    function = _tables()[0][name]
    register()
    parser = ArgumentParser(prog=f"{prog()} {name}", description=(function.__doc__ or "").split("\n\n")[0],
                            exit_on_error=False)  # fmt: skip
    positional = ["run"] if name == "plot" else []  # plot RUN: the one argument that reads best bare
    parser.add_function_arguments(function, as_group=False, skip=set(positional))
    for arg in positional:
        parser.add_argument(arg, type=PathName, help="A run's log folder (logs/<name>/version_N) or its metrics.csv.")
    try:
        parsed = parser.parse_args(argv)
    except ArgumentError as e:  # the error line's "did you mean" for a misspelt flag reads the options from it
        e.options = [*inspect.signature(function).parameters, *positional]  # type: ignore[attr-defined]
        raise
    function(**parsed.as_dict())


def cap_memory() -> None:
    """On Linux without a GPU, memory capped at the machine's (``RLIMIT_DATA``): an allocation past it is an
    out-of-memory error (one line), not a kill without a word. A lower cap stays."""
    import torch

    if sys.platform != "linux" or torch.cuda.is_available():
        return
    import resource

    from ..model.config import memory_bytes

    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    cap = memory_bytes() if hard == resource.RLIM_INFINITY else min(memory_bytes(), hard)
    if soft == resource.RLIM_INFINITY or soft > cap:
        resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))


def process_at_fault() -> str | None:
    """A rank that is no integer, a closed output (``>&-``), a deleted working folder."""
    if bad := next((key for key in RANKS if not os.environ.get(key, "0").removeprefix("-").isdigit()), None):
        return (f"{bad}={os.environ[bad][:40]!r} is not an integer: a rank or count that a launcher (torchrun, "
                "SLURM) sets, read when torch starts; unset it")  # fmt: skip
    if sys.stdout is None:
        return "the standard output is closed (>&-), and the output would be lost; send it to a file or /dev/null"
    try:
        os.getcwd()
    except OSError:
        return "the working folder no longer exists (removed after the shell entered it); cd to a folder that does"
    return None


def fail(line: str) -> NoReturn:
    print(f"error: {line}\n{DEBUG_HINT}", file=sys.stderr)
    sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        try:
            print(usage(), flush=True)
        except BrokenPipeError:
            stopped_reading()
        except OSError as e:
            fail(output_unwritable(e) or str(e))
        return
    if line := process_at_fault():
        fail(line)
    given = [(k, v) for k, v in os.environ.items() if k.startswith(LIBRARY_SETTINGS)]
    try:  # the libraries read settings of their own as they load: TORCH_LOGS, MPLBACKEND, TQDM_MININTERVAL, ...
        from ..training.console import INTERRUPTED, clipped, close_bars
        from .errors import error_line, refused
        from .lightning import build_cli
    except (ValueError, OSError) as e:
        if debugging():
            raise
        named = [k for k, v in given if k in str(e) or len(v) > 1 and v in str(e) or repr(v) in str(e)]  # or value
        said = " ".join(str(e).split()).split(". ")[0][:200]
        fail(f"the libraries did not load ({said}); correct or unset {' or '.join(named) or 'the setting at fault'}")

    cap_memory()
    try:
        if args[0] in FUNCTION_NAMES:
            run_function(args[0], args[1:])
        elif args[0] in EXPERIMENT_NAMES:
            sys.exit(_tables()[1][args[0]](args[1:], build_cli))
        elif args[0] in LIGHTNING:
            build_cli(argv)  # None: LightningCLI reads sys.argv itself
        else:  # argparse would list Lightning's commands alone
            every = ", ".join([*LIGHTNING, *FUNCTION_NAMES, *EXPERIMENT_NAMES])
            what = "comes before any command" if args[0].startswith("-") else "is no command"  # --print_config
            raise ValueError(f"{args[0][:40]!r} {what}; pass one of {every} first (see {prog()} --help)")
    except Exception as e:
        if isinstance(e, BrokenPipeError) and output_closed():  # not another pipe (a service's, a worker's)
            stopped_reading()
        if debugging() or not refused(e):  # a fault of the project's: its traceback
            raise
        close_bars()
        print(f"error: {clipped(error_line(e, args))}\n{DEBUG_HINT}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C (a fit's first one saves the run and stops by itself): no traceback
        if debugging():
            raise
        close_bars()
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)

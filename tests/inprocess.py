"""The command line run inside the test process: argv in; exit code, stdout and stderr out.

``run_cli("fit", "--config", ..., cwd=folder)`` calls :func:`transformers_scratch.cli.main`, the entry point of
``cli.py`` and ``transformers-scratch``, as a user's shell would start it: in ``cwd``, with ``HOME`` there (no
W&B login from this machine), no ``WANDB_*`` settings of the caller's, and ``cli.py`` as the program's name. It
returns what :func:`subprocess.run` would, without the 4-5 s that a new process spends importing torch and
Lightning. What a run changes in the process (the working folder, the environment, the signal handlers, torch's
threads and random state, the warning filters, Lightning's log levels, a W&B run) is put back afterwards.

Tests about processes themselves (signals, a killed run, two processes racing, an install, the console script)
start a real one; ``tests/test_cli.py`` keeps one end-to-end run of ``python cli.py`` as a user types it."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import signal
import subprocess
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric")
# A new interpreter's warning filters (the warnings module's documentation), in place of pytest's.
PYTHON_FILTERS = [("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, ""),
                  ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""),
                  ("ignore", ResourceWarning, "")]  # fmt: skip


@dataclass
class Ran:
    """What a finished command left: the fields of :class:`subprocess.CompletedProcess` that tests read."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _process_state(cwd: Path, env: dict[str, str], argv: list[str]):
    """The folder, environment and program name a new process would have; the rest of this process's state as it
    was, afterwards."""
    saved_env, saved_cwd, saved_argv = dict(os.environ), Path.cwd(), sys.argv
    saved_signals = {number: signal.getsignal(number) for number in SIGNALS}
    saved_levels = {name: logging.getLogger(name).level for name in LOGGERS}
    saved_torch = (torch.get_num_threads(), torch.is_grad_enabled(), torch.get_default_dtype(),
                   torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled(),
                   torch.random.get_rng_state(), random.getstate())  # fmt: skip
    os.environ.clear()
    os.environ.update({k: v for k, v in saved_env.items() if not k.startswith("WANDB_")}, **env)
    os.chdir(cwd)
    sys.argv = argv
    try:
        yield
    finally:
        finish_wandb()
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        for number, handler in saved_signals.items():
            signal.signal(number, handler)
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
        threads, grad, dtype, precision, deterministic, rng, py_rng = saved_torch
        torch.set_num_threads(threads)
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
        torch.set_float32_matmul_precision(precision)
        torch.use_deterministic_algorithms(deterministic)
        torch.random.set_rng_state(rng)
        random.setstate(py_rng)


def finish_wandb() -> None:
    """A process's exit ends its W&B run; in one process the next ``wandb.init`` would return the old run."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            wandb.finish()


@contextlib.contextmanager
def _captured(out: io.StringIO, err: io.StringIO):
    """stdout and stderr into ``out`` and ``err``: prints, warnings as Python shows them, and Lightning's log lines
    (whose handler holds the stream it was made with)."""
    handlers = [h for name in LOGGERS for h in logging.getLogger(name).handlers
                if type(h) is logging.StreamHandler]  # fmt: skip
    streams = [h.setStream(err) for h in handlers]

    def show(message, category, filename, lineno, file=None, line=None):
        err.write(warnings.formatwarning(message, category, filename, lineno, line))

    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.resetwarnings()  # not pytest's filters (-W, filterwarnings) but a new process's, each seen anew
            for action, category, module in PYTHON_FILTERS:
                warnings.filterwarnings(action, category=category, module=module, append=True)
            warnings.showwarning = show
            yield
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            handler.setStream(stream)


def run_main(main, *args: str, cwd: Path, env: dict[str, str] | None = None, prog: str = "cli.py") -> Ran:
    """A command's entry point, ``main()``, as the program ``prog`` started with ``ARGS`` in ``cwd``, inside this
    process: it reads ``sys.argv`` as it would in a process of its own. ``env`` adds to the environment."""
    argv, out, err = [str(a) for a in args], io.StringIO(), io.StringIO()
    code = 0
    with _process_state(Path(cwd), {"HOME": str(cwd), **(env or {})}, [prog, *argv]), _captured(out, err):
        try:
            main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)  # what the interpreter prints for sys.exit("message")
        except Exception:  # what the interpreter prints for an uncaught exception, and its exit code
            traceback.print_exc(file=sys.stderr)
            code = 1
    return Ran(argv, code, out.getvalue(), err.getvalue())


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Ran:
    """``cli.py ARGS`` in ``cwd``, inside this process. ``env`` adds to the environment."""
    from transformers_scratch.cli import main

    return run_main(main, *args, cwd=cwd, env=env)


def run_process(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python ARGS`` in a process of its own, for what is about processes: in ``cwd``, with ``HOME`` there and no
    ``WANDB_*`` settings of the caller's, as :func:`run_cli` has them. ``env`` adds to the environment."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    clean.update(HOME=str(cwd), PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=clean, capture_output=True, text=True, timeout=600)

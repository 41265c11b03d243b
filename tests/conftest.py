"""Fixtures shared by the test files."""

import contextlib
import os
import threading
from pathlib import Path

import pytest
import torch
from inprocess import finish_wandb, run_cli

if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):  # pytest -n N: the cores shared out
    # the cores this process may run on (a container's or taskset's share), not the machine's
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = max(1, cores // workers)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # the processes that a test starts, too
    torch.set_num_threads(threads)


def pytest_collection_modifyitems(config, items):
    """The slow tests first, so that the workers end together on quick ones; a test marked ``gpu`` skips where there
    is no CUDA device (``.ci/gpu`` runs them on one: ``-m gpu``)."""
    items.sort(key=lambda item: "slow" not in item.keywords)  # stable: each file's order kept
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (.ci/gpu runs it)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fp32_matmuls_as_they_were():
    """Each test starts with fp32 matmuls at the precision the last one started with: a fit in this process
    turns TF32 on for the GPU (``configure_model``), which would loosen a later test's fp32 comparison."""
    precision = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(precision)


@pytest.fixture(autouse=True)
def no_wandb_run_left():
    """A W&B run that a test started ends with it: the next test's logger would join it (one process, one run)."""
    yield
    finish_wandb()


@pytest.fixture
def cli():
    """The command line inside the test process: ``cli("fit", ..., cwd=folder)`` returns the exit code, stdout and
    stderr (:func:`inprocess.run_cli`)."""
    return run_cli


@pytest.fixture
def waiting_pipe():
    """``waiting_pipe(path, text)`` makes a named pipe whose writer stands by with ``text``, so that a reader that
    should have left it alone shows instead of hanging; the writer is let go afterwards."""
    made = []

    def make(path: Path, text: str) -> None:
        os.mkfifo(path)

        def write() -> None:
            with contextlib.suppress(BrokenPipeError):
                path.write_text(text)

        made.append((path, threading.Thread(target=write, daemon=True)))
        made[-1][1].start()

    yield make
    for path, writer in made:  # a writer waits for a reader: one that reads nothing lets it go
        while writer.is_alive():
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
            writer.join(0.1)

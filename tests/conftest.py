"""Fixtures shared by the test files."""

import pytest
import torch
from inprocess import run_cli


def pytest_collection_modifyitems(config, items):
    """A test marked ``gpu`` skips where there is no CUDA device; ``.ci/gpu`` runs them on one (``-m gpu``)."""
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


@pytest.fixture
def cli():
    """The command line inside the test process: ``cli("fit", ..., cwd=folder)`` returns the exit code, stdout and
    stderr (:func:`inprocess.run_cli`)."""
    return run_cli

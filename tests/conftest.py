"""Fixtures shared by the test files."""

import pytest
from inprocess import run_cli


@pytest.fixture
def cli():
    """The command line inside the test process: ``cli("fit", ..., cwd=folder)`` returns the exit code, stdout and
    stderr (:func:`inprocess.run_cli`)."""
    return run_cli

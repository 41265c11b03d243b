"""Experiments and benchmarks: ``cli.py soak`` and ``cli.py extrapolate``, and ``python -m`` for the others."""

import argparse
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse's parser whose refusal is a ``ValueError``, so that the command line gives it as its one error line
    (argparse's own prints the usage and exits with status 2)."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(f"{message}; see {self.prog} --help")

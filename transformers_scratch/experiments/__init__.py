"""Experiments and benchmarks: ``cli.py soak`` and ``cli.py extrapolate``, and ``python -m`` for the others."""

import argparse
from collections.abc import Callable
from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """argparse's parser whose refusal is a ``ValueError``, so that the command line gives it as its one error line
    (argparse's own prints the usage and exits with status 2)."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(f"{message}; see {self.prog} --help")


def bounded(interval: type) -> Callable[[str], Any]:
    """An interval type of :mod:`transformers_scratch.bounds` as argparse's ``type=``: a value outside it is
    refused with the flag and the interval (``argument --depth: 0 is not an integer in [1, 1,000]``)."""

    def parse(text: str) -> Any:
        try:
            return interval.check(text)  # type: ignore[attr-defined]
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse

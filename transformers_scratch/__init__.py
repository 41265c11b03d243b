"""transformers-scratch: the transformer built from first principles, then trained for real.

    model/        the transformer in plain PyTorch (no Lightning): read it bottom-up
    data/         LightningDataModules: byte text (enwik8, any file), IMDb, generated transduction tasks
    training/     LightningModules, optimizer and schedule, callbacks, loggers, checkpoints
    cli/          the command line (``python cli.py``, ``transformers-scratch``)
    experiments/  benchmarks and studies built on the rest

Imports run one way, cli -> experiments -> training -> data -> model (tests/test_layers.py). The names below
are the model's; importing the package imports no Lightning.
"""

from .model import *  # noqa: F403
from .model import __all__  # noqa: F401

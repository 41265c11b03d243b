"""transformers-scratch: the transformer built from first principles, then trained for real.

    model/        the transformer in plain PyTorch (no Lightning): read it bottom-up
    data/         LightningDataModules: byte text (enwik8, any file), IMDb, generated transduction tasks
    training/     LightningModules, optimizer and schedule, callbacks, loggers, checkpoints
    cli/          the command line (``python cli.py``, ``transformers-scratch``)
    experiments/  benchmarks and studies built on the rest

Imports run one way, cli -> experiments -> training -> data -> model (tests/test_layers.py). The names below
are the model's; importing the package imports no Lightning.
"""

import importlib


def __getattr__(name: str):
    """The model's names (``from transformers_scratch import CausalLM``), imported on first use (PEP 562), so that
    the command line's help starts without torch; ``__all__`` too, for ``import *``."""
    if name == "model":  # the subpackage itself, while it is being imported
        raise AttributeError(name)
    model = importlib.import_module(f"{__name__}.model")
    try:
        return getattr(model, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *importlib.import_module(f"{__name__}.model").__all__})

"""Reading what ``fit`` wrote, one way for every command: the module through Lightning's
``load_from_checkpoint``, the vocabulary through :func:`~transformers_scratch.data.checkpoint_vocab`."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from ..data import checkpoint_vocab
from ..data.vocab import Vocab
from .modules import LitTransformer

CKPT_ALIASES = {"last", "best", "hpc", "registry"}  # names Lightning resolves itself


def check_ckpt_path(ckpt_path: str | None) -> None:
    """A ``--ckpt_path`` must name a file, or one of the names Lightning resolves (``last``, ...)."""
    if ckpt_path and ckpt_path not in CKPT_ALIASES and not Path(ckpt_path).is_file():
        raise FileNotFoundError(
            f"--ckpt_path {ckpt_path!r} does not exist; pass a checkpoint file such as "
            "checkpoints/enwik8/last.ckpt, or 'last' to resume the newest run of this config"
        )


def read_checkpoint(ckpt_path: str) -> dict:
    """The checkpoint's contents, loaded as data (``weights_only``), with one clear error if it cannot be."""
    check_ckpt_path(ckpt_path)
    try:
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    except (EOFError, RuntimeError, pickle.UnpicklingError, ValueError) as e:
        reason = (str(e).splitlines() or ["empty file"])[0]
        raise ValueError(
            f"--ckpt_path {ckpt_path!r} is not a readable checkpoint ({type(e).__name__}: {reason}); "
            "it may be truncated or not written by fit: pass another checkpoint"
        ) from e
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"--ckpt_path {ckpt_path!r} holds no model weights; pass a checkpoint written by fit")
    return checkpoint


def load_trained(ckpt_path: str, module_class: type[LitTransformer]) -> tuple[LitTransformer, Vocab | None]:
    """The trained module (on the CPU, in eval mode) and the vocabulary it was trained with."""
    checkpoint = read_checkpoint(ckpt_path)
    written_by = checkpoint.get("hyper_parameters", {}).get("_class_path", module_class.__name__)
    if written_by.rsplit(".", 1)[-1] != module_class.__name__:
        raise ValueError(
            f"--ckpt_path {ckpt_path!r} was written by {written_by}, and this command needs a {module_class.__name__} "
            "checkpoint"
        )
    module = module_class.load_from_checkpoint(ckpt_path, map_location="cpu", weights_only=True)
    return module.eval(), checkpoint_vocab(checkpoint)

"""A trained model outside the project: ``model.safetensors`` and ``config.json`` in one folder, read back
into the plain ``nn.Module`` with one call and without Lightning::

    import transformers_scratch
    model = transformers_scratch.from_pretrained("exported/tiny_charlm")

``config.json`` names the model class and holds its config; ``python cli.py export`` adds the vocabulary
(``"vocab": {"bytes": null}`` for all 256 byte values, ``{"bytes": [...]}`` for a file's symbols, or
``{"words": [...]}`` after ids 0 and 1, ``<pad>`` and ``<unk>``). The weights are safetensors: plain
tensors, nothing to unpickle, and a tied matrix stored once.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from ..atomic import unfinished, write_whole, written_whole
from ..bounds import refuse_unusable
from .config import ClassifierConfig, EncoderDecoderConfig, LMConfig, XLConfig, read_settings
from .models import CausalLM, EncoderDecoder, SequenceClassifier
from .xl import TransformerXL

MODELS = {
    "CausalLM": (CausalLM, LMConfig),
    "SequenceClassifier": (SequenceClassifier, ClassifierConfig),
    "EncoderDecoder": (EncoderDecoder, EncoderDecoderConfig),
    "TransformerXL": (TransformerXL, XLConfig),
}
WEIGHTS, CONFIG = "model.safetensors", "config.json"
FORMAT = 1  # config.json's layout; a reader refuses a newer one


def save_pretrained(model: nn.Module, folder: str | os.PathLike, extra: dict | None = None) -> Path:
    """Write ``model`` (one of :data:`MODELS`) and ``extra`` fields of config.json into a new or empty folder."""
    from safetensors.torch import save_model  # here: importing the package needs no safetensors

    name = type(model).__name__
    if name not in MODELS:
        raise ValueError(f"cannot export a {name}; exportable models: {', '.join(MODELS)}")
    folder = clear_unfinished(Path(folder))
    if taken := [f for f in (WEIGHTS, CONFIG) if (folder / f).exists()]:
        raise FileExistsError(f"{str(folder)!r} already holds {' and '.join(taken)}; pass another folder")
    config = {"format": FORMAT, "model": name, "config": dataclasses.asdict(cast(Any, model).cfg), **(extra or {})}
    return write_export(folder, lambda path: save_model(model, path), config)  # shared tensors (tied weights) once


def write_export(folder: Path, save_weights: Callable[[str], None], config: dict) -> Path:
    """``model.safetensors`` (``save_weights(path)`` writes it) and ``config.json`` in ``folder``, each whole;
    safetensors' own error for a failed write (a full disk) is an OSError naming the file, as Python's is."""
    from safetensors import SafetensorError

    folder.mkdir(parents=True, exist_ok=True)
    with written_whole(folder / WEIGHTS) as tmp:
        try:
            save_weights(str(tmp))
        except SafetensorError as e:
            raise OSError(errno.EIO, str(e), str(folder / WEIGHTS)) from e
    write_whole(folder / CONFIG, json.dumps(config, indent=2) + "\n")
    return folder


def clear_unfinished(folder: Path) -> Path:
    """``folder`` without the temporary files that a killed export left in it (hidden: the folder looked empty)."""
    for leftover in [*unfinished(folder, WEIGHTS), *unfinished(folder, CONFIG)]:
        leftover.unlink(missing_ok=True)
    return folder


MAX_CONFIG_BYTES = 1_000_000  # config.json with a vocabulary of words is well under this
MAX_CONTEXT = 2**20  # positions: a sinusoidal table is computed for the whole context


def read_json(path: Path, fix: str, error: type[ValueError] = ValueError) -> dict:
    """A JSON object from an untrusted file (an export's or a Hugging Face folder's config.json): at most
    :data:`MAX_CONFIG_BYTES`, UTF-8, an object; anything else is refused with ``error``, ending in ``fix``."""
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise error(f"{str(path)!r} holds {path.stat().st_size:,} bytes, more than {MAX_CONFIG_BYTES:,}; {fix}")
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:  # RecursionError: nested past reading
        raise error(f"{str(path)!r} is not JSON ({type(e).__name__}); {fix}") from None
    if not isinstance(value, dict):
        raise error(f"{str(path)!r} holds no model config; {fix}")
    return value


def read_config(folder: str | os.PathLike) -> dict:
    """config.json of an exported folder, checked: an export is untrusted input, like a checkpoint."""
    path = Path(folder) / CONFIG
    if missing := [name for name in (CONFIG, WEIGHTS) if not (Path(folder) / name).is_file()]:
        raise FileNotFoundError(f"{str(folder)!r} holds no {missing[0]}; pass a folder written by `cli.py export`")
    config = read_json(path, "export the model again")
    if not isinstance(config.get("config"), dict):  # transformers' config.json names a model_type instead
        fix = "it is a Hugging Face model's: from_hf reads it" if "model_type" in config else "export the model again"
        raise ValueError(f"{str(path)!r} holds no model config of this project's; {fix}")
    version = config.get("format", FORMAT)
    if not isinstance(version, int) or version > FORMAT or str(config.get("model")) not in MODELS:  # a list: no name
        raise ValueError(f"{str(path)!r} describes format {config.get('format')!r} model {config.get('model')!r}; "
                         f"this version reads format {FORMAT} of {', '.join(MODELS)}")  # fmt: skip
    return config


def from_pretrained(folder: str | os.PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """The model an exported folder holds, in eval mode, on ``device``."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_model

    config = read_config(folder)
    model_class, config_class = MODELS[config["model"]]
    weights = Path(folder) / WEIGHTS
    # unknown keys, choices this version lacks and sizes that are not positive integers are refused, naming the file
    cfg = read_settings(config_class, config["config"], repr(str(Path(folder) / CONFIG)), "export it with this version")
    check_sizes(cfg, weights)
    model = model_class(cfg)
    try:
        with safe_open(str(weights), "pt") as file:  # the types as stored: a load would cut integers into the weights
            stored = {name: file.get_slice(name).get_dtype() for name in file.keys()}
        load_model(model, str(weights), strict=True, device=str(device))
    except (SafetensorError, RuntimeError, ValueError, OSError) as e:  # a broken file; missing or misshapen tensors
        why = "is not a readable safetensors file" if isinstance(e, SafetensorError) else f"does not fit {CONFIG}"
        raise ValueError(f"{str(weights)!r} {why} ({' '.join(str(e).split())[:300]}); export the model again") from None
    if ints := [name for name, dtype in stored.items() if not dtype.startswith(("F", "BF"))]:
        raise ValueError(f"{str(weights)!r} holds {ints[0][:60]!r} as {stored[ints[0]]}, not as weights (floats): a "
                         "damaged model; export the model again")  # fmt: skip
    refuse_unusable(model.state_dict(), repr(str(weights)))
    return model.to(device).eval()


def check_sizes(cfg, weights: Path) -> None:
    """Refuse, before anything is allocated, sizes that the weights file cannot hold: a model of n parameters
    needs at least 2n bytes (16-bit), and its context bounds the position tables made from it."""
    config, fix = repr(str(weights.parent / CONFIG)), "the config does not match its weights; export the model again"
    if cfg.context > MAX_CONTEXT:
        raise ValueError(f"{config} declares context {cfg.context:,}, more than {MAX_CONTEXT:,}: {fix}")
    cfg.refuse_past(weights.stat().st_size // 2, config, f"{fix} ({WEIGHTS} holds at most one 16-bit number per 2 "
                    "bytes)")  # fmt: skip

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
import json
import os
from pathlib import Path

import torch
from torch import nn

from .config import ClassifierConfig, EncoderDecoderConfig, LMConfig
from .models import CausalLM, EncoderDecoder, SequenceClassifier

MODELS = {
    "CausalLM": (CausalLM, LMConfig),
    "SequenceClassifier": (SequenceClassifier, ClassifierConfig),
    "EncoderDecoder": (EncoderDecoder, EncoderDecoderConfig),
}
WEIGHTS, CONFIG = "model.safetensors", "config.json"
FORMAT = 1  # config.json's layout; a reader refuses a newer one


def save_pretrained(model: nn.Module, folder: str | os.PathLike, extra: dict | None = None) -> Path:
    """Write ``model`` (one of :data:`MODELS`) and ``extra`` fields of config.json into a new or empty folder."""
    from safetensors.torch import save_model  # here: importing the package needs no safetensors

    name = type(model).__name__
    if name not in MODELS:
        raise ValueError(f"cannot export a {name}; exportable models: {', '.join(MODELS)}")
    folder = Path(folder)
    taken = [f for f in (WEIGHTS, CONFIG) if (folder / f).exists()]
    if taken:
        raise FileExistsError(f"{str(folder)!r} already holds {' and '.join(taken)}; pass another folder")
    folder.mkdir(parents=True, exist_ok=True)
    config = {"format": FORMAT, "model": name, "config": dataclasses.asdict(model.cfg), **(extra or {})}
    for target, write in (
        (WEIGHTS, lambda tmp: save_model(model, str(tmp))),  # shared tensors (tied weights) once
        (CONFIG, lambda tmp: tmp.write_text(json.dumps(config, indent=2) + "\n")),
    ):
        tmp = folder / f".{target}.tmp"
        try:
            write(tmp)
            os.replace(tmp, folder / target)  # a killed export leaves no half-written file under the real name
        finally:
            tmp.unlink(missing_ok=True)
    return folder


def read_config(folder: str | os.PathLike) -> dict:
    """config.json of an exported folder, checked."""
    path = Path(folder) / CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{str(folder)!r} holds no {CONFIG}; pass a folder written by `cli.py export`")
    config = json.loads(path.read_text())
    if config.get("format", FORMAT) > FORMAT or config.get("model") not in MODELS:
        raise ValueError(
            f"{str(path)!r} describes format {config.get('format')} model {config.get('model')!r}; this version "
            f"reads format {FORMAT} of {', '.join(MODELS)}"
        )
    return config


def from_pretrained(folder: str | os.PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """The model an exported folder holds, in eval mode, on ``device``."""
    from safetensors.torch import load_model

    config = read_config(folder)
    model_class, config_class = MODELS[config["model"]]
    model = model_class(config_class(**config["config"]))
    load_model(model, str(Path(folder) / WEIGHTS), strict=True, device=str(device))
    return model.to(device).eval()

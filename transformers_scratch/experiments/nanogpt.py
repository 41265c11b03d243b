"""Side by side with nanoGPT: score a checkpoint of its ``train.py`` on this project's held-out bytes.

    python -m transformers_scratch.experiments.nanogpt --model_py ../nanoGPT/model.py \
        --ckpt ../nanoGPT/out-shakespeare-char/ckpt.pt --data.path ../shared/data/tinyshakespeare.txt

nanoGPT validates on the last 10 % of the file, this project on 5 % and tests on the last 5 %. Both train on
the first 90 %, so the last 5 % is held out from both. This scores nanoGPT's model there with the windows
that ``cli.py test`` uses (contiguous, every byte once), so its figure and ``test/bpc`` of
``configs/shakespeare_char.yaml`` are the same measurement. nanoGPT's character ids are the sorted
characters of the file, as ``--data.vocab file`` here; the script checks that the sizes agree.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import torch
import torch.nn.functional as F

from ..data import IGNORE_INDEX, TextDataModule


def import_model_py(path: str):
    """A ``model.py`` (nanoGPT's) imported from its path, as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{str(path)!r} cannot be imported as a module; pass nanoGPT's model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_nanogpt(model_py: str, ckpt: str, device: torch.device) -> torch.nn.Module:
    """nanoGPT's ``GPT`` from its ``model.py``, with the weights of a ``train.py`` checkpoint."""
    module = import_model_py(model_py)
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    model = module.GPT(module.GPTConfig(**state["model_args"]))
    weights = {k.removeprefix("_orig_mod."): v for k, v in state["model"].items()}  # compiled runs add a prefix
    model.load_state_dict(weights)
    return model.to(device).eval()


def nanogpt_logits(model: torch.nn.Module):
    """nanoGPT's logits at every position: it returns them all only when given targets."""
    return lambda x, y: model(x, y.clamp(min=0))[0]


@torch.no_grad()
def heldout_nats(logits_of, data: TextDataModule, device: torch.device, bf16: bool) -> float:
    """Mean nats per byte of the test split, each byte scored once (as ``cli.py test``); ``logits_of(x, y)``
    gives a model's logits (b, t, v) for inputs x and targets y."""
    data.setup("test")
    total, count = 0.0, 0
    for x, y in data.test_dataloader():
        x, y = x.to(device).long(), y.to(device).long()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = logits_of(x, y)
        nats = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum", ignore_index=IGNORE_INDEX)
        total += nats.item()
        count += (y != IGNORE_INDEX).sum().item()
    return total / count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m transformers_scratch.experiments.nanogpt",
                                description=__doc__.split("\n\n")[0])  # fmt: skip
    p.add_argument("--model_py", required=True, help="nanoGPT's model.py")
    p.add_argument("--ckpt", required=True, help="a ckpt.pt written by nanoGPT's train.py")
    p.add_argument("--data.path", dest="path", required=True, help="the text file both were trained on")
    p.add_argument("--context", type=int, default=256, help="evaluation window (nanoGPT's block_size)")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    model: Any = load_nanogpt(args.model_py, args.ckpt, device)  # nanoGPT's GPT
    data = TextDataModule(args.path, context=args.context, batch_size=args.batch_size, vocab="file")
    if model.config.vocab_size != data.vocab_size:
        print(f"error: the checkpoint has a vocabulary of {model.config.vocab_size} characters, "
              f"{args.path!r} has {data.vocab_size}; score the file it was trained on", file=sys.stderr)  # fmt: skip
        return 2
    if args.context > model.config.block_size:
        print(f"error: --context {args.context} is longer than the checkpoint's block_size "
              f"{model.config.block_size}; pass --context {model.config.block_size}", file=sys.stderr)  # fmt: skip
        return 2
    nats = heldout_nats(nanogpt_logits(model), data, device, bf16=device.type == "cuda")
    print(f"nanoGPT on the test split ({data.protocol}): {nats:.4f} nats/char = test/bpc {nats / math.log(2):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

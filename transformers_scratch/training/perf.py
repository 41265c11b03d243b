"""Performance arithmetic: model FLOPs per token, and the device peaks that Lightning keeps, for MFU (Chowdhery
et al. 2022, app. B)."""

from __future__ import annotations

import warnings

import torch
from lightning.fabric.utilities.throughput import get_available_flops

from ..model.config import TransformerConfig


def non_embedding_params(cfg: TransformerConfig) -> int:
    """Parameters of the blocks: per block 4k^2 + k (attention) + 2 * mult * k^2 + (mult + 1) * k (MLP) + 4k
    (two norms)."""
    k, m = cfg.emb, cfg.ff_mult
    return cfg.depth * (4 * k * k + k + 2 * m * k * k + (m + 1) * k + 4 * k)


def train_flops_per_token(cfg: TransformerConfig, context: int, output_size: int | None = None) -> float:
    """Forward + backward FLOPs per token: 6 per parameter-token (matmuls incl. the output layer, of
    ``output_size`` outputs, default the vocabulary) plus 12 * depth * context * width for the attention
    scores and weighted sums."""
    n = non_embedding_params(cfg) + cfg.emb * (output_size or cfg.vocab_size)  # the output layer is a matmul too
    return 6 * n + 12 * cfg.depth * context * cfg.emb


def peak_flops(device: torch.device | str | None = None, precision: str = "bf16-mixed") -> float | None:
    """The device's dense peak at the training precision, from Lightning's table of GPUs; None on a CPU or a
    GPU Lightning does not know (then no MFU is reported: :class:`~.callbacks.Throughput` says so once, where
    Lightning would warn at every fit)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type != "cuda":
        return None
    dtype = torch.bfloat16 if "bf16" in str(precision) else torch.float16 if "16" in str(precision) else torch.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_available_flops(device, dtype)

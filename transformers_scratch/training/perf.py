"""Performance arithmetic: model FLOPs per token and device peaks, for MFU (Chowdhery et al. 2022, app. B)."""

from __future__ import annotations

import torch

from ..model.config import TransformerConfig

# Dense bf16 tensor-core peaks (no sparsity), FLOP/s, from the vendors' data sheets. The first key found in
# the device's name wins, so variants come before their family.
PEAK_BF16_FLOPS = {
    "H200": 989e12,
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,  # SXM
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 70e12,
    "L4": 121e12,
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
}


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


def peak_flops(device: torch.device | str | None = None) -> float | None:
    """The device's dense bf16 peak, or None where unknown (CPU, unlisted GPUs: no MFU is reported)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_BF16_FLOPS.items() if key in name), None)

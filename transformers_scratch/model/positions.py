"""Where a token sits: vectors added to the embeddings (learned, sinusoidal), or a turn of queries and keys
(RoPE) and a bias on the scores (ALiBi) applied inside self-attention.

Shapes: b batch, h heads, t query length, u key length, k width, s head width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class LearnedPositions(nn.Module):
    """A trained vector per position (the tutorial's position embedding)."""

    def __init__(self, context: int, emb: int) -> None:
        super().__init__()
        self.table = nn.Embedding(context, emb)

    def forward(self, t: int, offset: int | Tensor = 0) -> Tensor:
        if torch.is_tensor(offset):  # a position on the device (a decoding step replayed as a CUDA graph)
            return self.table.weight[torch.arange(t, device=offset.device) + offset]  # (t, k)
        return self.table.weight[offset : offset + t]  # (t, k)


def sinusoids(start: int, t: int, emb: int) -> Tensor:
    """PE(p, 2i) = sin(p / 10000^(2i/k)), PE(p, 2i+1) = cos(...) for positions start .. start + t - 1: (t, k)."""
    position = torch.arange(start, start + t, dtype=torch.float32)[:, None]  # (t, 1)
    freq = torch.exp(torch.arange(0, emb, 2, dtype=torch.float32) * (-math.log(10000.0) / emb))  # (ceil(k/2),)
    table = torch.zeros(t, emb)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq[: emb // 2])
    return table


class SinusoidalPositions(nn.Module):
    """Fixed encodings (Vaswani et al. 3.5), a table for the context; positions past it are computed when
    asked for, since a formula has no last position."""

    table: Tensor  # (context, k), a buffer

    def __init__(self, context: int, emb: int) -> None:
        super().__init__()
        self.register_buffer("table", sinusoids(0, context, emb), persistent=False)  # derived: not saved

    def forward(self, t: int, offset: int | Tensor = 0) -> Tensor:
        if torch.is_tensor(offset):  # a position on the device, inside the table (a CUDA-graph decoding step)
            return self.table[torch.arange(t, device=offset.device) + offset]  # (t, k)
        if offset + t <= len(self.table):
            return self.table[offset : offset + t]  # (t, k)
        return sinusoids(offset, t, self.table.size(1)).to(self.table)  # (t, k)


POSITIONS: dict[str, type[nn.Module]] = {"learned": LearnedPositions, "sinusoidal": SinusoidalPositions}
"""Position vectors added to the token embeddings; ``rope`` and ``alibi`` act inside attention instead."""


def rotate(x: Tensor, offset: int | Tensor = 0, base: float = 10000.0) -> Tensor:
    """Rotary position embedding (RoPE, Su et al. 2021) of queries or keys x (b, h, t, s), x[:, :, i] sitting
    at position offset + i (offset: a number, or a 0-d tensor on the device). Dimension pairs (j, j + s/2)
    turn by the angle p * base^(-2j/s), so the dot product of a query at m and a key at n depends on m - n
    only: relative positions, nothing learned."""
    half = x.size(-1) // 2
    freq = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)  # (s/2,)
    angle = (torch.arange(x.size(-2), device=x.device) + offset).float()[:, None] * freq
    cos, sin = angle.cos(), angle.sin()  # (t, s/2)
    x1, x2 = x.float().split(half, dim=-1)  # (b, h, t, s/2) each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


def alibi_slopes(heads: int) -> Tensor:
    """ALiBi's per-head slopes (Press et al. 2022): the geometric sequence 2^(-8/n), 2^(-16/n), ... for n heads when n
    is a power of two; otherwise those of the power of two below, then every other slope of the power of two above."""
    n = 2 ** math.floor(math.log2(heads))
    slopes = [2 ** (-8 * (i + 1) / n) for i in range(n)]
    return torch.tensor(slopes + [2 ** (-8 * (i + 1) / (2 * n)) for i in range(0, 2 * (heads - n), 2)])


def alibi_bias(slopes: Tensor, t: int, u: int, offset: int | Tensor = 0) -> Tensor:
    """(1, h, t, u) bias -slope * |distance| between query offset + i and key j: attention fades linearly with
    distance, so no position has to be learned, and lengths beyond training need nothing new."""
    query = (torch.arange(t, device=slopes.device) + offset)[:, None]  # (t, 1)
    distance = (query - torch.arange(u, device=slopes.device)).abs()  # (t, u)
    return -slopes[None, :, None, None] * distance  # (1, h, t, u)


RELATIVE = ("rope", "alibi")
"""Position kinds applied inside self-attention instead of added to the embeddings."""

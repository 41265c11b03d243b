"""The key/value cache: keys and values of the positions decoded so far, one per attention layer."""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of the positions seen so far, for one attention layer, preallocated. Used by generation: each new
    token computes its own key and value once, and attends over the cache instead of recomputing the whole window."""

    def __init__(self, batch: int, heads: int, length: int, head_width: int, dtype: torch.dtype, device) -> None:
        self.k = torch.zeros(batch, heads, length, head_width, dtype=dtype, device=device)  # (b, h, max u, s)
        self.v = torch.zeros_like(self.k)
        self.len = 0
        # Static mode, for a step replayed as a CUDA graph: the next position lives in this 0-d tensor on the
        # device, and attention reads the whole buffer through ``seen`` (capacity,), True for the keys written
        # up to it, so every step has the same shapes.
        self.at: Tensor | None = None
        self.seen: Tensor | None = None

    @property
    def capacity(self) -> int:
        return self.k.size(2)

    @property
    def offset(self) -> int | Tensor:
        """The position of the next key: a number, or in static mode the device tensor."""
        return self.len if self.at is None else self.at

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append k, v of shape (b, h, t, s); return all keys and values so far, (b, h, len, s). In static
        mode: write them at the device position and return the whole buffers, (b, h, capacity, s)."""
        if self.at is not None:
            if k.size(2) != 1:
                raise ValueError(f"a static KV cache takes one position a step, not {k.size(2)}")
            self.k.index_copy_(2, self.at[None], k)
            self.v.index_copy_(2, self.at[None], v)
            return self.k, self.v
        end = self.len + k.size(2)
        if end > self.capacity:
            raise ValueError(f"KV cache holds {self.capacity} positions, {end} requested; reset or crop first")
        self.k[:, :, self.len : end] = k
        self.v[:, :, self.len : end] = v
        self.len = end
        return self.k[:, :, :end], self.v[:, :, :end]


def empty_caches(cfg, blocks: int, batch: int, length: int, like: Tensor) -> list[KVCache]:
    """One empty key/value cache per block, of ``length`` positions, in the dtype and device of ``like``."""
    width, heads = cfg.emb // cfg.heads, cfg.kv_heads or cfg.heads  # grouped-query attention: the kv heads only
    return [KVCache(batch, heads, length, width, like.dtype, like.device) for _ in range(blocks)]

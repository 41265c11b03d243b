"""The pieces a transformer is stacked from: embeddings with positions, feed-forward, the block.

Shapes: b batch, t sequence length, k width (see attention.py for the full legend).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .attention import MultiHeadAttention
from .cache import KVCache
from .config import TransformerConfig
from .positions import POSITIONS, RELATIVE, LearnedPositions

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU}


class FeedForward(nn.Sequential):
    """Position-wise MLP applied to every vector alone: k -> mult * k -> k."""

    def __init__(self, emb: int, mult: int = 4, activation: str = "relu") -> None:
        super().__init__(nn.Linear(emb, mult * emb), ACTIVATIONS[activation](), nn.Linear(mult * emb, emb))


class Embedding(nn.Module):
    """Token embedding plus position embedding or encoding: ids (b, t) -> vectors (b, t, k). With rope or
    alibi positions, the tokens alone: attention places them."""

    def __init__(self, vocab_size: int, context: int, emb: int, positions: str = "learned", dropout: float = 0.0):
        super().__init__()
        self.context = context
        self.tokens = nn.Embedding(vocab_size, emb)
        self.positions = None if positions in RELATIVE else POSITIONS[positions](context, emb)
        self.drop = nn.Dropout(dropout)

    def forward(self, ids: Tensor, offset: int | Tensor = 0, prefix: Tensor | None = None) -> Tensor:
        """``offset``: position of ids[:, 0] (for cached generation). ``prefix``: (b, p, k) vectors put in
        front of the tokens (a [CLS] vector) that take the first positions."""
        x = self.tokens(ids)  # (b, t, k)
        if prefix is not None:
            x = torch.cat([prefix, x], dim=1)  # (b, p + t, k)
        t = x.size(1)
        beyond = not torch.is_tensor(offset) and offset + t > self.context  # a device position: checked before
        if isinstance(self.positions, LearnedPositions) and beyond:
            raise ValueError(
                f"sequence of {offset + t} positions > model context {self.context}: learned position embeddings "
                "have no vector past the context; feed shorter sequences, raise model.context and train again, "
                "or train with model.positions sinusoidal, rope or alibi, which go past it"
            )
        return self.drop(x if self.positions is None else x + self.positions(t, offset))  # (b, t, k)


class TransformerBlock(nn.Module):
    """Self-attention, optional cross-attention and a feed-forward layer, each inside a residual.

    ``pre_norm=False`` is the tutorial's (and the paper's) order, x = norm(x + f(x)); ``pre_norm=True`` is
    GPT-2's, x = x + f(norm(x)), which trains deep stacks without warm-up tricks. One class serves encoder
    (bidirectional), decoder-only (causal) and encoder-decoder decoder (causal + cross) layers.
    """

    def __init__(self, cfg: TransformerConfig, causal: bool = False, cross: bool = False) -> None:
        super().__init__()
        self.pre_norm = cfg.pre_norm
        relative = cfg.positions if cfg.positions in RELATIVE else None
        self.attn = MultiHeadAttention(cfg.emb, cfg.heads, causal, cfg.dropout, cfg.attention, positions=relative)
        self.norm1 = nn.LayerNorm(cfg.emb)
        self.cross = MultiHeadAttention(cfg.emb, cfg.heads, dropout=cfg.dropout, impl=cfg.attention) if cross else None
        self.norm_cross = nn.LayerNorm(cfg.emb) if cross else None
        self.ff = FeedForward(cfg.emb, cfg.ff_mult, cfg.activation)
        self.norm2 = nn.LayerNorm(cfg.emb)
        self.drop = nn.Dropout(cfg.dropout)

    def residual(self, x: Tensor, norm: nn.Module, f: Callable[[Tensor], Tensor]) -> Tensor:
        """One sublayer f with its residual connection and layer norm, in this block's order."""
        return x + self.drop(f(norm(x))) if self.pre_norm else norm(x + self.drop(f(x)))

    def forward(
        self,
        x: Tensor,
        key_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: KVCache | None = None,
        memory_kv: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """x: (b, t, k); key_mask: (b, t) True = real token; memory: (b, u, k) encoder output for
        cross-attention, memory_mask: (b, u); cache: this layer's key/value cache; memory_kv: this layer's
        cross-attention keys and values of the memory, computed once (then memory is not read)."""
        x = self.residual(x, self.norm1, lambda h: self.attn(h, key_mask=key_mask, cache=cache))
        if self.cross is not None:
            cross = lambda h: self.cross(h, memory, key_mask=memory_mask, memory_kv=memory_kv)  # noqa: E731
            x = self.residual(x, self.norm_cross, cross)
        return self.residual(x, self.norm2, self.ff)  # (b, t, k)


class Stack(nn.Module):
    """``depth`` blocks applied in turn, then a final layer norm when the blocks are pre-norm (their
    residual stream is otherwise never normalised)."""

    def __init__(self, cfg: TransformerConfig, depth: int, causal: bool = False, cross: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(TransformerBlock(cfg, causal=causal, cross=cross) for _ in range(depth))
        self.norm = nn.LayerNorm(cfg.emb) if cfg.pre_norm else nn.Identity()
        self.checkpointing = cfg.activation_checkpointing

    def forward(
        self, x: Tensor, caches: list[KVCache] | None = None, memory_kvs: list | None = None, **kwargs
    ) -> Tensor:
        """x: (b, t, k); kwargs go to every block (masks, memory); caches and memory_kvs: one per block."""
        for i, block in enumerate(self.blocks):
            if caches is not None or memory_kvs is not None:
                x = block(x, cache=caches and caches[i], memory_kv=memory_kvs and memory_kvs[i], **kwargs)
            elif self.checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=False, **kwargs)  # keep only x; recompute inside
            else:
                x = block(x, **kwargs)
        return self.norm(x)  # (b, t, k)

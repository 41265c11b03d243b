"""The pieces a transformer is stacked from: embeddings with positions, feed-forward, the block.

Shapes: b batch, t sequence length, k width (see attention.py for the full legend).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .attention import Attend, MultiHeadAttention
from .cache import KVCache
from .config import TransformerConfig
from .positions import POSITIONS, RELATIVE, LearnedPositions


class ReLUSquared(nn.Module):
    """relu(x)^2 (So et al. 2021, Primer; the GPU speedruns' feed-forward): as cheap as ReLU, and better."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x).square()


ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # GPT-2's
    "relu2": ReLUSquared,
}


class FeedForward(nn.Sequential):
    """Position-wise MLP applied to every vector alone: k -> hidden -> k (hidden: 4k in the tutorial)."""

    def __init__(self, emb: int, hidden: int, activation: str = "relu", bias: bool = True) -> None:
        act = ACTIVATIONS[activation]()
        super().__init__(nn.Linear(emb, hidden, bias=bias), act, nn.Linear(hidden, emb, bias=bias))


class GatedFeedForward(nn.Module):
    """SwiGLU (Shazeer 2020; Llama): down(silu(gate(x)) * up(x)), k -> hidden -> k. The gate, a second
    projection through SiLU, decides per hidden unit how much of ``up`` passes."""

    def __init__(self, emb: int, hidden: int, bias: bool = True) -> None:
        super().__init__()
        self.gate = nn.Linear(emb, hidden, bias=bias)
        self.up = nn.Linear(emb, hidden, bias=bias)
        self.down = nn.Linear(hidden, emb, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))  # (b, t, k)


def feed_forward(cfg: TransformerConfig) -> nn.Module:
    if cfg.activation == "swiglu":
        return GatedFeedForward(cfg.emb, cfg.hidden, cfg.bias)
    return FeedForward(cfg.emb, cfg.hidden, cfg.activation, cfg.bias)


def make_norm(cfg: TransformerConfig) -> nn.Module:
    """LayerNorm (mean and variance, a gain and a bias), or RMSNorm (root mean square, a gain only)."""
    return nn.RMSNorm(cfg.emb, eps=cfg.norm_eps) if cfg.norm == "rms" else nn.LayerNorm(cfg.emb, eps=cfg.norm_eps)


class Embedding(nn.Module):
    """Token embedding plus position embedding or encoding: ids (b, t) -> vectors (b, t, k), for ``vocab_size``
    ids and ``context`` positions. With rope or alibi positions, the tokens alone: attention places them."""

    def __init__(self, cfg: TransformerConfig, vocab_size: int, context: int) -> None:
        super().__init__()
        self.context = context
        self.tokens = nn.Embedding(vocab_size, cfg.emb)
        self.types = nn.Embedding(cfg.token_types, cfg.emb) if cfg.token_types else None  # BERT's segments
        self.positions = None if cfg.positions in RELATIVE else POSITIONS[cfg.positions](context, cfg.emb)
        self.norm = make_norm(cfg) if cfg.embed_norm else None  # BERT's norm of the summed embeddings
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self, ids: Tensor, offset: int | Tensor = 0, prefix: Tensor | None = None, types: Tensor | None = None
    ) -> Tensor:
        """``offset``: position of ids[:, 0] (for cached generation). ``prefix``: (b, p, k) vectors put in
        front of the tokens (a [CLS] vector) that take the first positions. ``types``: (b, t) segments, or 0."""
        x = self.tokens(ids)  # (b, t, k)
        if self.types is not None:
            x = x + self.types(torch.zeros_like(ids) if types is None else types)
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
        x = x if self.positions is None else x + self.positions(t, offset)
        return self.drop(x if self.norm is None else self.norm(x))  # (b, t, k)


class TransformerBlock(nn.Module):
    """Self-attention, optional cross-attention and a feed-forward layer, each inside a residual.

    ``pre_norm=False`` is the tutorial's (and the paper's) order, x = norm(x + f(x)); ``pre_norm=True`` is
    GPT-2's, x = x + f(norm(x)), which trains deep stacks without warm-up tricks. One class serves encoder
    (bidirectional), decoder-only (causal) and encoder-decoder decoder (causal + cross) layers.
    """

    def __init__(self, cfg: TransformerConfig, causal: bool = False, cross: bool = False,
                 attend: Attend | None = None) -> None:  # fmt: skip
        super().__init__()
        self.pre_norm = cfg.pre_norm
        relative = cfg.positions if cfg.positions in RELATIVE else None
        self.attn = MultiHeadAttention.of(cfg, causal, positions=relative, attend=attend)  # attend: a sparse layer's
        self.norm1 = make_norm(cfg)
        self.cross = MultiHeadAttention.of(cfg) if cross else None  # dense: the source has no pattern
        self.norm_cross = make_norm(cfg) if cross else None
        self.ff = feed_forward(cfg)
        self.norm2 = make_norm(cfg)
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
        if self.cross is not None and self.norm_cross is not None:
            attend = self.cross
            cross = lambda h: attend(h, memory, key_mask=memory_mask, memory_kv=memory_kv)  # noqa: E731
            x = self.residual(x, self.norm_cross, cross)
        return self.residual(x, self.norm2, self.ff)  # (b, t, k)


class Stack(nn.Module):
    """``depth`` blocks applied in turn, then a final layer norm when the blocks are pre-norm (their
    residual stream is otherwise never normalised). ``kernels`` gives layer i's self-attention kernel (a sparse
    model's pattern, layer by layer); None: ``cfg.attention``'s."""

    def __init__(self, cfg: TransformerConfig, depth: int, causal: bool = False, cross: bool = False,
                 kernels: Callable[[int], Attend] | None = None) -> None:  # fmt: skip
        super().__init__()
        self.blocks = nn.ModuleList(TransformerBlock(cfg, causal, cross, kernels and kernels(layer))
                                    for layer in range(depth))  # fmt: skip
        self.norm = make_norm(cfg) if cfg.pre_norm else nn.Identity()
        self.checkpointing = cfg.activation_checkpointing

    def forward(self, x: Tensor, caches: list[KVCache] | None = None, memory_kvs: list | None = None,
                **kwargs) -> Tensor:  # fmt: skip
        """x: (b, t, k); kwargs go to every block (masks, memory); caches and memory_kvs: one per block."""
        for i, block in enumerate(self.blocks):
            if caches is not None or memory_kvs is not None:
                x = block(x, cache=caches and caches[i], memory_kv=memory_kvs and memory_kvs[i], **kwargs)
            elif self.checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=False, **kwargs)  # keep only x; recompute inside
            else:
                x = block(x, **kwargs)
        return self.norm(x)  # (b, t, k)

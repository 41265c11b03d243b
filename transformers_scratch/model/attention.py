"""Self-attention from scratch, then fast.

Dimension letters used in every shape comment below:
    b  batch size
    t  query length (positions that ask)
    u  key/value length (positions that answer; u == t for self-attention)
    k  model width, the embedding size ("k" as in the tutorial)
    h  number of heads
    s  head width, k // h (the tutorial's "s")

Masks are boolean and mean "may attend": True where a query may look at a key, as in
``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cache import KVCache
from .positions import alibi_bias, alibi_slopes, rotate


def basic_self_attention(x: Tensor) -> Tensor:
    """The tutorial's parameter-free self-attention: y_i = sum_j softmax_j(x_i . x_j) x_j.

    Every vector is query, key and value at once; there is nothing to learn.
    """
    raw = x @ x.transpose(-2, -1)  # (b, t, t): all dot products x_i . x_j
    weights = raw.softmax(dim=-1)  # (b, t, t): each row sums to one
    return weights @ x  # (b, t, k)


def causal_mask(t: int, u: int, device: torch.device | None = None) -> Tensor:
    """(t, u) mask letting query i see keys up to its own position, aligned bottom-right: the lower triangle,
    or with t < u, the *last* t positions (new tokens over a key/value cache), query i at position u - t + i."""
    return torch.ones(t, u, dtype=torch.bool, device=device).tril(diagonal=u - t)


def _merge_masks(mask: Tensor | None, causal: bool, t: int, u: int, device: torch.device) -> Tensor | None:
    """One boolean mask broadcastable to (b, h, t, u), or None when nothing is masked."""
    if causal:
        tri = causal_mask(t, u, device)  # (t, u)
        mask = tri if mask is None else mask & tri
    return mask


def _guard_empty_rows(mask: Tensor) -> tuple[Tensor, Tensor]:
    """Let rows with no visible key attend everywhere, and say which rows those were. A softmax over no keys is
    0/0 = NaN, in gradients too; a query that reads nothing outputs zero: computed over all keys, then zeroed."""
    has_key = mask.any(dim=-1, keepdim=True)  # (b|1, h|1, t|1, 1)
    return mask | ~has_key, has_key


def reference_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False,
                        dropout_p: float = 0.0, bias: Tensor | None = None,
                        keep: list[Tensor] | None = None) -> Tensor:  # fmt: skip
    """Scaled dot-product attention written out: scores, scale, bias, mask, softmax, weighted sum.

    q: (b, h, t, s); k, v: (b, h, u, s); mask: bool, broadcastable to (b, h, t, u), True = may attend;
    bias: added to the scaled scores (ALiBi), broadcastable to (b, h, t, u); keep: a list that the attention
    weights (b, h, t, u) are appended to, before dropout (attention pictures).
    Returns (b, h, t, s). Rows whose keys are all masked return zeros (and have zero weights).
    """
    t, u = q.size(-2), k.size(-2)
    scores = q @ k.transpose(-2, -1)  # (b, h, t, u)
    scores = scores / math.sqrt(q.size(-1))  # 1/sqrt(head width) keeps the softmax out of saturation
    if bias is not None:
        scores = scores + bias
    mask = _merge_masks(mask, causal, t, u, q.device)
    if mask is not None:
        mask, has_key = _guard_empty_rows(mask)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)  # (b, h, t, u)
    if keep is not None:
        keep.append(weights if mask is None else weights.masked_fill(~has_key, 0.0))
    weights = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    out = weights @ v  # (b, h, t, s)
    return out if mask is None else out.masked_fill(~has_key, 0.0)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False,
                    dropout_p: float = 0.0, bias: Tensor | None = None) -> Tensor:  # fmt: skip
    """:func:`reference_attention` through PyTorch's fused kernels (flash, memory-efficient, C++ math). A causal
    square problem with no padding or bias goes in as ``is_causal`` (no mask tensor), and one query over a cache
    needs no mask; a bias goes in as a float mask, -inf where the boolean mask forbids."""
    t, u = q.size(-2), k.size(-2)
    if bias is None and mask is None and (not causal or t == 1 or t == u):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal and t > 1)
    mask = _merge_masks(mask, causal, t, u, q.device)
    if mask is None:  # a bias alone (no bias and no mask returned above)
        assert bias is not None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), dropout_p=dropout_p)
    mask, has_key = _guard_empty_rows(mask)
    if bias is not None:
        mask = bias.to(q.dtype).masked_fill(~mask, float("-inf"))  # (b|1, h, t, u)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)  # (b, h, t, s)
    return out.masked_fill(~has_key, 0.0)


def decode_attention(q: Tensor, k: Tensor, v: Tensor, seen: Tensor, bias: Tensor | None = None) -> Tensor:
    """One new query per sequence, q (b, h, 1, s), over a whole cache buffer k, v (b, h, u, s) of which the keys
    ``seen`` (u,) are written: the written-out product. For a single query it beats the fused kernels, which
    work on tiles of 64 queries; no row can be empty, since the query's own key is always written."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (b, h, 1, u)
    if bias is not None:
        scores = scores + bias
    return scores.masked_fill(~seen, float("-inf")).softmax(dim=-1) @ v  # (b, h, 1, s)


AttentionFn = Callable[..., Tensor]
ATTENTION: dict[str, AttentionFn] = {"reference": reference_attention, "sdpa": fused_attention}
"""Attention kernels by name; ``MultiHeadAttention(impl=...)`` picks one."""


class Attend:
    """A layer's attention kernel, chosen once when the layer is built: ``attend(q, k, v, mask, causal, dropout_p, bias,
    offset)`` -> (b, h, t, s), for queries at positions offset.. over keys from 0. This one is dense, through ``fn``
    (the written-out reference or the fused kernel); a sparse layer's kernel, a subclass, computes a pattern."""

    def __init__(self, fn: AttentionFn = fused_attention) -> None:
        self.fn = fn

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout_p: float = 0.0,
                 bias: Tensor | None = None, offset: int | Tensor = 0) -> Tensor:  # fmt: skip
        return self.fn(q, k, v, mask, causal, dropout_p, bias=bias)

    def step_keys(self, seen: Tensor, at: Tensor, heads: int) -> tuple[Tensor, Tensor | None]:
        """The keys a static decoding step at position ``at`` may see, of the cache's ``seen`` (u,) written
        ones, and which of its rows have any (None: all do, as here: the query's own key is always written)."""
        return seen, None

    def recording(self, keep: list[Tensor]) -> Attend:
        """The same attention through the reference kernel, appending its weights (b, h, t, u) to ``keep``."""
        return Attend(partial(reference_attention, keep=keep))

    def __repr__(self) -> str:
        return getattr(self.fn, "__name__", type(self.fn).__name__)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, self or cross, with k x k projections cut into h heads.

    The query, key and value projections are three k x k matrices stored as one (3k, k) matrix, so
    self-attention projects with one matmul; cross-attention applies the query rows to ``x`` and the
    key/value rows to ``memory`` (the encoder's output). With the output projection and its bias there are
    4k^2 + k parameters whatever the number of heads: more heads cut the same projections into narrower pieces.
    With ``kv_heads`` g < h (grouped-query attention) keys and values have g heads, each serving h / g query
    heads, and the key and value rows shrink to g * s each. The kernel is ``attend``, or the dense ``impl``.
    """

    slopes: Tensor  # ALiBi's per-head slopes, a buffer (positions alibi only)

    def __init__(self, emb: int, heads: int, *, causal: bool = False, dropout: float = 0.0, impl: str = "sdpa",
                 attend: Attend | None = None, positions: str | None = None, kv_heads: int | None = None,
                 qkv_bias: bool = False, bias: bool = True, rope_base: float = 10000.0) -> None:  # fmt: skip
        super().__init__()  # the sizes are checked once, by the config (TransformerConfig.__post_init__)
        self.emb, self.heads, self.causal, self.dropout = emb, heads, causal, dropout
        self.attend = attend or Attend(ATTENTION[impl])
        self.kv_heads, self.rope_base = kv_heads or heads, rope_base
        self.positions = positions  # rope or alibi: where the positions enter (self-attention only)
        if positions == "alibi":
            self.register_buffer("slopes", alibi_slopes(heads), persistent=False)  # derived: not in checkpoints
        kv = self.kv_heads * (emb // heads)  # g * s: with grouped-query attention, narrower keys and values
        self.qkv = nn.Linear(emb, emb + 2 * kv, bias=qkv_bias)  # rows: W_q (k, k), W_k and W_v (g * s, k)
        self.out = nn.Linear(emb, emb, bias=bias)  # the tutorial's "unifyheads"

    @classmethod
    def of(cls, cfg, causal: bool = False, positions: str | None = None,
           attend: Attend | None = None) -> MultiHeadAttention:  # fmt: skip
        """The attention a model config asks for, through ``attend`` (a sparse layer's) or ``cfg.attention``."""
        return cls(cfg.emb, cfg.heads, causal=causal, dropout=cfg.dropout, impl=cfg.attention, attend=attend,
                   positions=positions, kv_heads=cfg.kv_heads, qkv_bias=cfg.qkv_bias, bias=cfg.bias,
                   rope_base=cfg.rope_base)  # fmt: skip

    def _rows(self, start: int, end: int | None, x: Tensor) -> Tensor:
        """x through the rows start:end of the fused projection (and of its bias)."""
        bias = None if self.qkv.bias is None else self.qkv.bias[start:end]
        return F.linear(x, self.qkv.weight[start:end], bias)

    def _split_kv(self, kv: Tensor) -> tuple[Tensor, Tensor]:
        """(b, u, 2 g s) keys and values side by side -> each (b, g, u, s)."""
        b, u, _ = kv.shape
        s = self.emb // self.heads
        key, val = (z.view(b, u, self.kv_heads, s).transpose(1, 2) for z in kv.chunk(2, dim=-1))
        return key, val

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values of memory (b, u, k), each (b, g, u, s). They depend on the source
        alone, so decoding computes them once per source and passes them to every step as ``memory_kv``."""
        return self._split_kv(self._rows(self.emb, None, memory))  # W_k, W_v rows

    def project(self, x: Tensor, memory: Tensor | None = None,
                memory_kv: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        """Queries (b, h, t, s) of x; keys and values (b, g, u, s) of x itself, of ``memory``, or ``memory_kv``."""
        b, t, k = x.shape
        if memory is None and memory_kv is None:
            q, kv = self.qkv(x).split([k, k // self.heads * 2 * self.kv_heads], dim=-1)  # (b, t, k), (b, t, 2 g s)
            key, val = self._split_kv(kv)  # 2 x (b, g, t, s)
        else:
            q = self._rows(0, k, x)  # W_q rows: (b, t, k)
            key, val = memory_kv if memory_kv is not None else self.memory_kv(cast(Tensor, memory))
        return q.view(b, t, self.heads, k // self.heads).transpose(1, 2), key, val

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        key_mask: Tensor | None = None,
        cache: KVCache | None = None,
        memory_kv: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """x: (b, t, k) queries; memory: (b, u, k) keys/values (None: self-attention), or memory_kv, their projections
        from :meth:`memory_kv`; key_mask: (b, u) bool, True for real tokens, False for padding; cache: append and attend
        over it."""
        b, t, k = x.shape
        q, key, val = self.project(x, memory, memory_kv)  # (b, h, t, s), 2 x (b, g, u, s)
        offset = 0 if cache is None else cache.offset  # the position of x[:, 0]
        if self.positions == "rope":  # cached keys stay rotated by their own position
            q, key = rotate(q, offset, self.rope_base), rotate(key, offset, self.rope_base)
        if cache is not None:
            key, val = cache.update(key, val)  # (b, g, cached u, s)
        if self.kv_heads < self.heads:  # each key/value head serves h / g query heads, side by side
            key, val = (z.repeat_interleave(self.heads // self.kv_heads, 1) for z in (key, val))
        bias = alibi_bias(self.slopes, t, key.size(2), offset) if self.positions == "alibi" else None
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (b, 1, 1, u)
        if cache is not None and cache.at is not None:  # a static decoding step (CUDA graphs)
            y = self.static_step(q, key, val, cache, mask, bias)
        else:
            y = self.attend(q, key, val, mask, self.causal, self.dropout if self.training else 0.0, bias, offset)
        return self.out(y.transpose(1, 2).reshape(b, t, k))  # (b, t, k): heads side by side again

    def static_step(self, q: Tensor, key: Tensor, val: Tensor, cache: KVCache, mask: Tensor | None,
                    bias: Tensor | None) -> Tensor:  # fmt: skip
        """One query over the whole cache buffer, the same shapes every step (a CUDA graph replays it): the cache
        says which keys are written, the kernel which of them this query may see; a row with none gives 0."""
        if mask is not None:
            raise ValueError("a static decoding step reads the whole cache through its own mask: no key_mask")
        assert cache.seen is not None and cache.at is not None  # written with cache.at
        seen, has_key = self.attend.step_keys(cache.seen, cache.at, self.heads)
        y = decode_attention(q, key, val, seen, bias)  # (b, h, 1, s)
        return y if has_key is None else y.masked_fill(~has_key, 0.0)

    def extra_repr(self) -> str:
        extra = f", positions={self.positions!r}" if self.positions else ""
        extra += f", kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        return f"emb={self.emb}, heads={self.heads}, causal={self.causal}, attend={self.attend!r}{extra}"


@contextmanager
def recording(layers: Iterable[MultiHeadAttention]) -> Iterator[list[list[Tensor]]]:
    """Within it, each of ``layers`` runs the reference kernel and keeps the attention weights (b, h, t, u) of
    every forward call: yields one list per layer, filled in call order. The weights are the ones the layer
    computes its output from, so a picture of them shows the model's own attention."""
    layers = list(layers)
    kept: list[list[Tensor]] = [[] for _ in layers]
    kernels = [layer.attend for layer in layers]
    for layer, weights in zip(layers, kept, strict=True):
        layer.attend = layer.attend.recording(weights)
    try:
        yield kept
    finally:
        for layer, kernel in zip(layers, kernels, strict=True):
            layer.attend = kernel

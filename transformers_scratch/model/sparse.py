"""Sparse attention (Child et al. 2019, "Generating Long Sequences with Sparse Transformers").

Dense attention lets each of t queries look at every key: t^2 pairs. A sparse pattern lets query i look at a
set of about sqrt(t) keys, chosen so that two steps of attention still connect every position to every
earlier one. The paper's patterns each have two parts, A and B, with a block length l (~ sqrt(t)):

    strided  A: the previous l positions, i - j < l          B: every l-th position before it, (i - j) % l == 0
    fixed    A: its own block of l, i // l == j // l        B: the last c positions of every block, the "summary"

Strided suits data with a period (images, audio); fixed suits text, where a position's neighbours in the
sequence matter more than those l apart. A path from j to i in two layers: under strided, A then B (i reaches
j + (i - j) % l by B, which reaches j by A); under fixed, i reaches the summary at the end of j's block by B,
which sees j by A.

How parts meet heads (the paper's section 4.2): ``alternate`` gives the whole layer part A in even layers and
part B in odd ones; ``split`` gives half the heads each; ``union`` lets every head attend to A or B.

The reference path builds the (h, t, u) mask from :meth:`SparsePattern.allowed` and runs the dense masked
kernel: t^2 time and memory, exact, for tests, pictures and one-token decoding. The fast path,
:func:`sparse_attention`, never builds the t^2 matrix: it cuts the sequence into blocks of l and runs the fused
kernel on blocks (A), on columns of the (t / l, l) grid (strided B), or on the t / l * c summary keys (fixed B).
Its time grows as t * sqrt(t) when l ~ sqrt(t), and its memory as t. FlexAttention
(:func:`flex_sparse_attention`) computes the same from a block mask on a GPU.

Shapes: b batch, h heads, t positions, s head width, n blocks (t / l rounded up), l block length, c summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

PATTERNS = ("strided", "fixed")
LAYOUTS = ("split", "alternate", "union")
KERNELS = ("auto", "blocked", "flex", "dense")
"""Sparse kernels: auto picks flex on a GPU and blocked elsewhere; dense is the masked t^2 reference."""


@dataclass(frozen=True)
class SparsePattern:
    """Which keys each head of each layer may attend to. ``block`` is l; ``summary`` is c (fixed only)."""

    pattern: str = "strided"
    layout: str = "split"
    block: int = 64
    summary: int = 8

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"model sparse_pattern {self.pattern!r} unknown; choose one of {'|'.join(PATTERNS)}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"model sparse_layout {self.layout!r} unknown; choose one of {'|'.join(LAYOUTS)}")
        if not isinstance(self.block, int) or self.block < 1:
            raise ValueError(f"model sparse_block={self.block!r} must be a positive block length (about sqrt(context))")
        if self.pattern == "fixed" and not (isinstance(self.summary, int) and 1 <= self.summary < self.block):
            raise ValueError(
                f"model sparse_summary={self.summary!r} must lie in [1, sparse_block={self.block}): the summary is "
                "the last c positions of each block; pass a smaller sparse_summary"
            )

    def parts(self, i: Tensor, j: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
        """Parts A and B of the pattern at query positions i and key positions j (broadcast), causal or not."""
        ell = self.block
        if self.pattern == "strided":
            a, b = (i - j).abs() < ell, (i - j) % ell == 0
        else:
            a, b = i // ell == j // ell, j % ell >= ell - self.summary
        if causal:
            a, b = a & (j <= i), b & (j <= i)
        return a, b

    def part_of(self, layer: int, heads: int) -> list[int]:
        """Each head's part in ``layer``: 0 for A, 1 for B, 2 for their union."""
        if self.layout == "union":
            return [2] * heads
        if self.layout == "alternate":
            return [layer % 2] * heads
        return [0] * (heads // 2) + [1] * (heads - heads // 2)

    def allowed(self, layer: int, heads: int, i: Tensor, j: Tensor, causal: bool) -> Tensor:
        """(h, *broadcast(i, j)) bool: may head h of ``layer`` at position i attend to position j."""
        a, b = self.parts(i, j, causal)
        part = torch.tensor(self.part_of(layer, heads), device=a.device).view(-1, *[1] * a.dim())
        return torch.where(part == 0, a, torch.where(part == 1, b, a | b))

    def mask(self, layer: int, heads: int, t: int, u: int | None = None, offset: int = 0, causal: bool = True,
             device: torch.device | None = None) -> Tensor:  # fmt: skip
        """(h, t, u) bool mask of queries at positions offset..offset + t - 1 over keys at 0..u - 1."""
        u = t if u is None else u
        i = torch.arange(offset, offset + t, device=device)[:, None]  # (t, 1)
        j = torch.arange(u, device=device)[None, :]  # (1, u)
        return self.allowed(layer, heads, i, j, causal)

    def check(self, context: int) -> None:
        """Refuse a block longer than the context the model sees."""
        if self.block > context:
            raise ValueError(
                f"model sparse_block={self.block} is longer than the context {context}: every query would see "
                f"everything before it; pass a sparse_block near sqrt(context), such as {max(1, math.isqrt(context))}"
            )


def _blocks(x: Tensor, ell: int) -> Tensor:
    """(b, h, t, s) -> (b, h, n, l, s), zero-padded at the end to whole blocks."""
    b, h, t, s = x.shape
    n = -(-t // ell)
    return F.pad(x, (0, 0, 0, n * ell - t)).view(b, h, n, ell, s)


def _valid(t: int, n: int, ell: int, key_mask: Tensor | None, device: torch.device) -> Tensor:
    """(b|1, n, l) bool: True for real keys (inside the sequence and not padding)."""
    valid = (torch.arange(n * ell, device=device) < t).view(1, n, ell)
    if key_mask is not None:
        valid = valid & F.pad(key_mask, (0, n * ell - t)).view(-1, n, ell)
    return valid


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, p: float, gqa: bool = False):
    """The fused kernel on 4-d (batch, heads, queries, width) pieces; a boolean mask may leave a query no key,
    and then its output is zero (as in :func:`~.attention.reference_attention`)."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal, enable_gqa=gqa)
    has_key = mask.any(dim=-1, keepdim=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key, dropout_p=p, enable_gqa=gqa)
    return out.masked_fill(~has_key, 0.0)


def _neighbours(x: Tensor, causal: bool) -> Tensor:
    """(b, h, n, l, s) -> (b, h, n, m, s): each block with the block before it (and after it, if not causal)
    side by side, zeros past the ends; m = 2l or 3l."""
    pad = (0, 0, 0, 0, 1, 0 if causal else 1)
    x = F.pad(x, pad)  # (b, h, n + 1 or 2, l, s)
    n = x.size(2) - (1 if causal else 2)
    return torch.cat([x[:, :, i : i + n] for i in range(3 - causal)], dim=3)


def _local(q: Tensor, k: Tensor, v: Tensor, sp: SparsePattern, causal: bool, key_mask: Tensor | None, p: float):
    """Part A of strided: the l positions up to each query (causal), or within l of it. Each block of queries
    reads its own block and its neighbours, through one (l, m) band mask."""
    b, h, t, s = q.shape
    ell = sp.block
    qb, kb, vb = (_blocks(x, ell) for x in (q, k, v))  # (b, h, n, l, s)
    n = qb.size(2)
    r = torch.arange(ell, device=q.device)[:, None]
    c = torch.arange((3 - causal) * ell, device=q.device)[None, :]
    band = (ell + r - c).abs() < ell  # (l, m): query r of a block and key c of its neighbourhood (from block - 1)
    if causal:
        band = band & (c <= ell + r)
    if causal and key_mask is None:  # block 0 alone has no block before it; the padded tail lies in the future
        first = _attend(qb[:, :, 0], kb[:, :, 0], vb[:, :, 0], None, True, p)[:, :, None]  # (b, h, 1, l, s)
        if n == 1:
            return first.flatten(2, 3)[:, :, :t]
        kn, vn = _neighbours(kb, True)[:, :, 1:], _neighbours(vb, True)[:, :, 1:]  # (b, h, n - 1, 2l, s)
        rest = _attend(qb[:, :, 1:].flatten(1, 2), kn.flatten(1, 2), vn.flatten(1, 2), band, False, p)
        return torch.cat([first, rest.view(b, h, n - 1, ell, s)], dim=2).flatten(2, 3)[:, :, :t]
    valid = _neighbours(_valid(t, n, ell, key_mask, q.device)[:, None, :, :, None], causal)[:, 0, :, :, 0]
    mask = (band & valid[:, :, None, :]).repeat(1, h, 1, 1)  # (b|1, h n, l, m)
    kn, vn = _neighbours(kb, causal).flatten(1, 2), _neighbours(vb, causal).flatten(1, 2)
    return _attend(qb.flatten(1, 2), kn, vn, mask, False, p).view(b, h, n, ell, s).flatten(2, 3)[:, :, :t]


def _stride(q: Tensor, k: Tensor, v: Tensor, sp: SparsePattern, causal: bool, key_mask: Tensor | None, p: float):
    """Part B of strided: every l-th position. Written as an (n, l) grid, those are the columns: each column is
    an ordinary (causal) attention over n positions."""
    b, h, t, s = q.shape
    ell = sp.block
    qc, kc, vc = (_blocks(x, ell).transpose(2, 3).reshape(b, h * ell, -1, s) for x in (q, k, v))  # (b, h l, n, s)
    n = qc.size(2)
    mask = None
    if not causal or key_mask is not None:
        valid = _valid(t, n, ell, key_mask, q.device).transpose(1, 2)[:, :, None, :]  # (b|1, l, 1, n)
        mask = valid & torch.ones(n, n, dtype=torch.bool, device=q.device).tril() if causal else valid
        mask = mask.repeat(1, h, 1, 1)  # (b|1, h l, n|1, n)
    out = _attend(qc, kc, vc, mask, causal and mask is None, p)  # (b, h l, n, s)
    return out.view(b, h, ell, n, s).transpose(2, 3).flatten(2, 3)[:, :, :t]


def _own_block(q: Tensor, k: Tensor, v: Tensor, sp: SparsePattern, causal: bool, key_mask: Tensor | None, p: float):
    """Part A of fixed: the query's own block, an ordinary (causal) attention within each block."""
    b, h, t, s = q.shape
    ell = sp.block
    qb, kb, vb = (_blocks(x, ell).flatten(1, 2) for x in (q, k, v))  # (b, h n, l, s)
    n = qb.size(1) // h
    mask = None
    if not causal or key_mask is not None:
        valid = _valid(t, n, ell, key_mask, q.device)[:, :, None, :]  # (b|1, n, 1, l)
        mask = valid & torch.ones(ell, ell, dtype=torch.bool, device=q.device).tril() if causal else valid
        mask = mask.repeat(1, h, 1, 1)  # (b|1, h n, l|1, l)
    out = _attend(qb, kb, vb, mask, causal and mask is None, p)
    return out.view(b, h, n * ell, s)[:, :, :t]


def _summary(q: Tensor, k: Tensor, v: Tensor, sp: SparsePattern, causal: bool, key_mask: Tensor | None, p: float):
    """Part B of fixed: the last c positions of every block, n c keys shared by all queries.

    Causal, query (block qb, offset r) sees summary (block kb, offset o) when kb < qb, or kb == qb and o <= r.
    Queries are taken by column r (one per block): the l - c columns before the summary offsets all see the
    same staircase, so one call serves them, every column of a head sharing that head's keys (grouped-query
    attention: the keys are not copied). The c summary columns take a call each.
    """
    b, h, t, s = q.shape
    ell, c = sp.block, sp.summary
    n = -(-t // ell)
    ks, vs = (_blocks(x, ell)[:, :, :, ell - c :].reshape(b, h, n * c, s) for x in (k, v))  # (b, h, n c, s)
    valid = _valid(t, n, ell, key_mask, q.device)[:, :, ell - c :].reshape(-1, 1, 1, n * c)  # (b|1, 1, 1, n c)
    if not causal:
        return _attend(q, ks, vs, valid, False, p)
    qc = _blocks(q, ell).transpose(2, 3)  # (b, h, l, n, s): column r holds offset r of every block
    kb = torch.arange(n * c, device=q.device)[None, :] // c  # (1, n c) the key's block
    o = torch.arange(n * c, device=q.device)[None, :] % c + ell - c  # (1, n c) the key's offset in its block
    groups = []
    for lo, hi in _spans(n, SUMMARY_GROUPS):  # queries of blocks lo..hi - 1 read the summaries of blocks < hi
        qb = torch.arange(lo, hi, device=q.device)[:, None]  # (g, 1) the query's block
        keys, values, seen, before = ks[:, :, : hi * c], vs[:, :, : hi * c], valid[..., : hi * c], kb[:, : hi * c]
        main = qc[:, :, : ell - c, lo:hi].reshape(b, h * (ell - c), hi - lo, s)
        outs = [_attend(main, keys, values, (before < qb) & seen, False, p, gqa=True).view(b, h, ell - c, -1, s)]
        for r in range(ell - c, ell):
            mask = ((before < qb) | ((before == qb) & (o[:, : hi * c] <= r))) & seen  # (b|1, 1, g, hi c)
            outs.append(_attend(qc[:, :, r, lo:hi], keys, values, mask, False, p)[:, :, None])  # (b, h, 1, g, s)
        groups.append(torch.cat(outs, dim=2))  # (b, h, l, g, s)
    return torch.cat(groups, dim=3).transpose(2, 3).flatten(2, 3)[:, :, :t]


SUMMARY_GROUPS = 4
"""Causal summary attention runs in this many groups of query blocks, each reading only the summaries up to its
last block: (groups + 1) / (2 groups) of the work of letting every query read all n c summaries."""


def _spans(n: int, groups: int) -> list[tuple[int, int]]:
    """n blocks cut into at most ``groups`` consecutive spans (lo, hi) of near-equal length."""
    edges = sorted({round(g * n / groups) for g in range(groups + 1)})
    return list(zip(edges[:-1], edges[1:], strict=False))


PARTS = {"strided": (_local, _stride), "fixed": (_own_block, _summary)}
"""The fast path of each pattern's parts A and B."""


def sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    sp: SparsePattern,
    layer: int = 0,
    causal: bool = True,
    key_mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Self-attention of q, k, v (b, h, t, s) at positions 0..t - 1 under pattern ``sp`` in ``layer``, blocked:
    the same result as the dense masked kernel under :meth:`SparsePattern.mask`, in t sqrt(t) time and linear
    memory. key_mask: (b, t) True for real tokens. Returns (b, h, t, s)."""
    parts = sp.part_of(layer, q.size(1))
    if parts[0] == 2:  # the union: one softmax over both parts, which the blocked pieces cannot share
        mask = sp.mask(layer, q.size(1), q.size(2), causal=causal, device=q.device)  # (h, t, t)
        mask = mask if key_mask is None else mask & key_mask[:, None, None, :]
        return _attend(q, k, v, mask, False, dropout_p)
    a, b = PARTS[sp.pattern]
    half = parts.count(0)
    out = []
    if half:
        out.append(a(q[:, :half], k[:, :half], v[:, :half], sp, causal, key_mask, dropout_p))
    if half < len(parts):
        out.append(b(q[:, half:], k[:, half:], v[:, half:], sp, causal, key_mask, dropout_p))
    return out[0] if len(out) == 1 else torch.cat(out, dim=1)


_FLEX: dict[str, object] = {}
"""FlexAttention, compiled once per process (its eager form computes the dense t^2 scores)."""


def flex_sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, sp: SparsePattern, layer: int = 0, causal: bool = True,
    key_mask: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """The same as :func:`sparse_attention` through PyTorch's FlexAttention: the pattern becomes a ``mask_mod``,
    and the block mask built from it skips every 128 x 128 tile that no pair in it may attend. On a GPU it
    trains; on a CPU, PyTorch runs it forward only (no gradients), so CPU training takes the blocked path.
    No attention dropout: FlexAttention has none."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if q.device.type == "cpu" and torch.is_grad_enabled() and q.requires_grad:
        raise ValueError("model sparse_kernel flex: FlexAttention has no backward pass on a CPU; train with "
                         "sparse_kernel blocked (or auto), or run flex under torch.no_grad()")  # fmt: skip
    heads, parts = q.size(1), sp.part_of(layer, q.size(1))

    def may_attend(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        a, bb = sp.parts(i, j, causal)
        allowed = a | bb if parts[0] == 2 else (a if parts[0] == 0 else bb) if sp.layout == "alternate" else (
            torch.where(h < heads // 2, a, bb))  # fmt: skip
        return allowed if key_mask is None else allowed & key_mask[b, j]

    t = q.size(2)
    batch = None if key_mask is None else q.size(0)
    block_mask = create_block_mask(may_attend, batch, heads, t, t, device=q.device)
    if "fn" not in _FLEX:
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX["fn"](q, k, v, block_mask=block_mask)  # type: ignore[operator]

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
part B in odd ones; ``split`` gives the first half of the heads A and the rest B; ``union`` lets every head
attend to A or B.

The reference path builds the (h, t, u) mask from :meth:`SparsePattern.allowed` and runs the dense masked
kernel: t^2 time and memory, exact, for tests, pictures and one-token decoding. The fast path,
:func:`sparse_attention`, never builds the t^2 matrix: it cuts the sequence into blocks of l and runs the fused
kernel on blocks (A), on columns of the (t / l, l) grid (strided B), or on the t / l * c summary keys (fixed B).
Its time grows as t * sqrt(t) when l ~ sqrt(t), and its memory as t. The union needs one softmax over both
parts: each part's kernel also returns its log-sum-exp, and the two merge exactly (:class:`_Union`).
FlexAttention (:func:`flex_sparse_attention`) computes the same from a block mask on a GPU.

Shapes: b batch, h heads, t positions, s head width, n blocks (t / l rounded up), l block length, c summary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention import ATTENTION, Attend, AttentionFn, _guard_empty_rows, fused_attention, reference_attention
from .config import SparseConfig, TransformerConfig


class SparsePattern(SparseConfig):
    """Which keys each head of each layer may attend to: the settings (``block`` is l, ``summary`` is c, fixed
    only) made into masks."""

    @classmethod
    def of(cls, settings: SparseConfig) -> SparsePattern:
        return cls(**dataclasses.asdict(settings))

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

    def of_head(self, a: Tensor, b: Tensor, layer: int, heads: int, head: Tensor) -> Tensor:
        """The part that head ``head`` (a tensor broadcasting with a and b) of ``layer`` attends through: both
        (union), A in even layers and B in odd ones (alternate), A in the first half of the heads (split)."""
        if self.layout == "union":
            return a | b
        if self.layout == "alternate":
            return a if layer % 2 == 0 else b
        return torch.where(head < heads // 2, a, b)

    def allowed(self, layer: int, heads: int, i: Tensor, j: Tensor, causal: bool) -> Tensor:
        """(h, *broadcast(i, j)) bool: may head h of ``layer`` at position i attend to position j."""
        a, b = self.parts(i, j, causal)
        head = torch.arange(heads, device=a.device).view(-1, *[1] * a.dim())
        return self.of_head(a, b, layer, heads, head).expand(heads, *a.shape)

    def mask(self, layer: int, heads: int, t: int, u: int | None = None, offset: int = 0, causal: bool = True,
             device: torch.device | None = None) -> Tensor:  # fmt: skip
        """(h, t, u) bool mask of queries at positions offset..offset + t - 1 over keys at 0..u - 1."""
        u = t if u is None else u
        i = torch.arange(offset, offset + t, device=device)[:, None]  # (t, 1)
        j = torch.arange(u, device=device)[None, :]  # (1, u)
        return self.allowed(layer, heads, i, j, causal)


def _grid(x: Tensor, ell: int) -> Tensor:
    """(b, h, t, s) -> (b h, n, l, s): the blocks of every head of every sequence, zero-padded at the end to whole
    blocks, a view where it can be. The kernel then sees the rows b h as its batch and the blocks (or, transposed,
    the columns) as its heads."""
    t = x.size(2)
    n = -(-t // ell)
    return (x if n * ell == t else F.pad(x, (0, 0, 0, n * ell - t))).unflatten(2, (n, ell)).flatten(0, 1)


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


def _per_row(mask: Tensor, heads: int) -> Tensor:
    """A mask (b|1, ...) made per sequence, for the b h rows of :func:`_grid` (each sequence's rows together)."""
    return mask if mask.size(0) == 1 else mask.repeat_interleave(heads, dim=0)


def _neighbours(x: Tensor, causal: bool) -> Tensor:
    """(B, n, l, ...) -> (B, n, m, ...): each block with the block before it (and after it, if not causal)
    side by side, zeros past the ends; m = 2l or 3l."""
    x = F.pad(x, (0, 0) * (x.dim() - 2) + (1, 0 if causal else 1))  # (B, n + 1 or 2, l, ...)
    n = x.size(1) - (1 if causal else 2)
    return torch.cat([x[:, i : i + n] for i in range(3 - causal)], dim=2)


def _local(q: Tensor, k: Tensor, v: Tensor, sp: SparsePattern, causal: bool, key_mask: Tensor | None, p: float):
    """Part A of strided: the l positions up to each query (causal), or within l of it. Each block of queries
    reads its own block and its neighbours, through one (l, m) band mask."""
    b, h, t, s = q.shape
    ell = sp.block
    qg, kg, vg = (_grid(x, ell) for x in (q, k, v))  # (b h, n, l, s)
    n = qg.size(1)
    r = torch.arange(ell, device=q.device)[:, None]
    c = torch.arange((3 - causal) * ell, device=q.device)[None, :]
    band = (ell + r - c).abs() < ell  # (l, m): query r of a block and key c of its neighbourhood (from block - 1)
    if causal:
        band = band & (c <= ell + r)
    if causal and key_mask is None:  # block 0 alone has no block before it; the padded tail lies in the future
        out = [_attend(qg[:, :1], kg[:, :1], vg[:, :1], None, True, p)]  # (b h, 1, l, s)
        if n > 1:
            kn, vn = (torch.cat([x[:, :-1], x[:, 1:]], dim=2) for x in (kg, vg))  # (b h, n - 1, 2l, s)
            out.append(_attend(qg[:, 1:], kn, vn, band, False, p))
        return torch.cat(out, dim=1).reshape(b, h, n * ell, s)[:, :, :t]
    valid = _neighbours(_valid(t, n, ell, key_mask, q.device)[..., None], causal)[..., 0]  # (b|1, n, m)
    mask = _per_row(band & valid[:, :, None, :], h)  # (b h|1, n, l, m)
    out = _attend(qg, _neighbours(kg, causal), _neighbours(vg, causal), mask, False, p)
    return out.reshape(b, h, n * ell, s)[:, :, :t]


def _pieces(q: Tensor, k: Tensor, v: Tensor, sp: SparsePattern, causal: bool, key_mask: Tensor | None, p: float,
            columns: bool = False) -> Tensor:  # fmt: skip
    """Part A of fixed, the query's own block; or with ``columns`` part B of strided, every l-th position, which in
    the (n, l) grid are the columns. Either is an ordinary (causal) attention within each piece."""
    b, h, t, s = q.shape
    ell, n = sp.block, -(-t // sp.block)
    turn = (lambda x: x.transpose(1, 2)) if columns else (lambda x: x)  # columns: (b h, l, n, s), offset r each
    qg, kg, vg = (turn(_grid(x, ell)) for x in (q, k, v))  # (b h, g, m, s): g pieces of m positions
    if causal and key_mask is None:  # every key real: the mask is only causal
        out = _attend(qg, kg, vg, None, causal, p)
    else:
        mask = turn(_valid(t, n, ell, key_mask, q.device))[:, :, None, :]  # (b|1, g, 1, m): the real keys
        if causal:
            mask = mask & torch.ones(qg.size(2), qg.size(2), dtype=torch.bool, device=q.device).tril()
        out = _attend(qg, kg, vg, _per_row(mask, h), False, p)
    return turn(out).reshape(b, h, n * ell, s)[:, :, :t]


def _summary(q: Tensor, k: Tensor, v: Tensor, sp: SparsePattern, causal: bool, key_mask: Tensor | None, p: float):
    """Part B of fixed: the last c positions of every block, n c keys shared by all queries.

    Causal, query (block qb, offset r) sees summary (block kb, offset o) when kb < qb, or kb == qb and o <= r.
    Queries are taken by column r (one per block): the l - c columns before the summary offsets all see the
    same staircase, so one call serves them, every column sharing its row's keys (grouped-query attention with
    one key head: the keys are not copied). The c summary columns take a call each.
    """
    b, h, t, s = q.shape
    ell, c = sp.block, sp.summary
    n = -(-t // ell)
    ks, vs = (_grid(x, ell)[:, :, ell - c :].reshape(b * h, 1, n * c, s) for x in (k, v))  # (b h, 1, n c, s)
    valid = _per_row(_valid(t, n, ell, key_mask, q.device)[:, :, ell - c :].reshape(-1, 1, 1, n * c), h)
    if not causal:  # (b h|1, 1, 1, n c)
        return _attend(q.reshape(b * h, 1, t, s), ks, vs, valid, False, p).view(b, h, t, s)
    qc = _grid(q, ell).transpose(1, 2)  # (b h, l, n, s): column r holds offset r of every block
    kb = torch.arange(n * c, device=q.device)[None, :] // c  # (1, n c) the key's block
    o = torch.arange(n * c, device=q.device)[None, :] % c + ell - c  # (1, n c) the key's offset in its block
    groups, spans = [], _spans(n, SUMMARY_GROUPS)
    # queries of blocks lo..hi - 1 read the summaries of blocks < hi; the queries are split, not sliced, so that
    # their gradient is put together once
    for (lo, hi), queries in zip(spans, qc.split([hi - lo for lo, hi in spans], dim=2), strict=True):
        qb = torch.arange(lo, hi, device=q.device)[:, None]  # (g, 1) the query's block
        keys, values, seen, before = ks[..., : hi * c, :], vs[..., : hi * c, :], valid[..., : hi * c], kb[:, : hi * c]
        main, *summaries = queries.split([ell - c] + [1] * c, dim=1)  # (b h, l - c, g, s), c x (b h, 1, g, s)
        outs = [_attend(main, keys, values, (before < qb) & seen, False, p, gqa=True)]
        for r, column in zip(range(ell - c, ell), summaries, strict=True):
            mask = ((before < qb) | ((before == qb) & (o[:, : hi * c] <= r))) & seen  # (b h|1, 1, g, hi c)
            outs.append(_attend(column, keys, values, mask, False, p))  # (b h, 1, g, s)
        groups.append(torch.cat(outs, dim=1))  # (b h, l, g, s)
    return torch.cat(groups, dim=2).transpose(1, 2).reshape(b, h, n * ell, s)[:, :, :t]


SUMMARY_GROUPS = 4
"""Causal summary attention runs in this many groups of query blocks, each reading only the summaries up to its
last block: (groups + 1) / (2 groups) of the work of letting every query read all n c summaries."""


def _spans(n: int, groups: int) -> list[tuple[int, int]]:
    """n blocks cut into at most ``groups`` consecutive spans (lo, hi) of near-equal length."""
    edges = sorted({round(g * n / groups) for g in range(groups + 1)})
    return list(zip(edges[:-1], edges[1:], strict=False))


PARTS: dict[str, tuple[Callable[..., Tensor], ...]] = {
    "strided": (_local, partial(_pieces, columns=True)), "fixed": (_pieces, _summary)}  # fmt: skip
"""The fast path of each pattern's parts A and B."""


@dataclass
class _Call:
    """One call of the fused kernel inside a union: how the natural (b, h, t, d) tensors become its queries and
    its keys/values, and its mask (float, broadcast; None with ``causal``) with the rows that see no key."""

    queries: object  # (b, h, t, d) -> the call's (B, H, L, d)
    keys: object  # (b, h, t, d) -> the call's (B, H_kv, S, d)
    mask: Tensor | None = None
    causal: bool = False
    empty: Tensor | None = None  # (1, 1, L, 1) bool: rows with no key in this part (their mask lets them see all)


def _float_mask(allowed: Tensor) -> tuple[Tensor, Tensor | None]:
    """A boolean "may attend" mask as the fused kernel's additive one (0 or -inf); rows with no key attend
    everywhere and are returned (1, 1, L, 1) to be zeroed."""
    has_key = allowed.any(-1, keepdim=True)
    additive = torch.zeros(allowed.shape).masked_fill(~(allowed | ~has_key), float("-inf"))
    return additive[None, None], None if bool(has_key.all()) else ~has_key[None, None]


def _union_parts(sp: SparsePattern, b: int, h: int, t: int) -> list[tuple[list[_Call], object]]:
    """The union of a causal pattern's parts (on a CPU, where its kernel runs) as two disjoint parts, each a list
    of kernel calls with a function putting their outputs back in (b, h, t, d) order. Part B leaves out the keys
    part A has (strided: the query itself; fixed: the summaries of the query's own block): no key counts twice."""
    ell, c = sp.block, sp.summary
    n = -(-t // ell)

    def grid(x: Tensor) -> Tensor:  # (b h, n, l, d)
        return _grid(x, ell)

    def columns(x: Tensor) -> Tensor:  # (b h, l, n, d): offset r of every block
        return grid(x).transpose(1, 2)

    def from_grid(ys: list[Tensor]) -> Tensor:
        return torch.cat(ys, dim=1).reshape(b, h, n * ell, -1)[:, :, :t]

    def from_columns(ys: list[Tensor]) -> Tensor:
        return ys[0].transpose(1, 2).reshape(b, h, n * ell, -1)[:, :, :t]

    strictly_earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)  # (n, n) kb < qb
    if sp.pattern == "strided":
        r = torch.arange(ell)[:, None]
        col = torch.arange(2 * ell)[None, :]
        band, _ = _float_mask(((ell + r - col) < ell) & (col <= ell + r))  # (1, 1, l, 2l)
        calls = [_Call(lambda x: grid(x)[:, :1], lambda x: grid(x)[:, :1], causal=True)]
        if n > 1:
            calls.append(_Call(lambda x: grid(x)[:, 1:], lambda x: torch.cat([grid(x)[:, :-1], grid(x)[:, 1:]], 2),
                               band))  # fmt: skip
        mask, empty = _float_mask(strictly_earlier)  # the column's earlier positions: l, 2l, ... back
        return [(calls, from_grid), ([_Call(columns, columns, mask, empty=empty)], from_columns)]
    own = _Call(grid, grid, causal=True)
    earlier = strictly_earlier.repeat_interleave(c, dim=1)  # (n, n c): the summaries of earlier blocks
    mask, empty = _float_mask(earlier)
    summaries = _Call(columns, lambda x: grid(x)[:, :, ell - c :].reshape(b * h, 1, n * c, x.size(-1)),
                      mask, empty=empty)  # fmt: skip
    return [([own], from_grid), ([summaries], from_columns)]


FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
"""PyTorch's CPU flash attention, whose forward also returns each row's log-sum-exp, which merging two parts'
softmaxes needs (the public function does not return it); and its backward."""
FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


class _Union(torch.autograd.Function):
    """One softmax over the keys of two disjoint parts, each computed blocked: the parts' outputs o_A, o_B and
    log-sum-exps L_A, L_B merge as o = o_A exp(L_A - L) + o_B exp(L_B - L), with L = logaddexp(L_A, L_B). The
    backward pass gives each part's kernel the merged o and L, from which it recomputes the union's weights of
    its own keys: the gradient of the one softmax, part by part (as ring attention does across devices)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, parts) -> Tensor:
        outs, lses = [], []
        for calls, assemble in parts:
            o_parts, l_parts = [], []
            for call in calls:
                mask = None if call.mask is None else call.mask.to(q.dtype)  # the kernel reads it as q's dtype
                o, lse = FLASH(call.queries(q), call.keys(k), call.keys(v), 0.0, call.causal, attn_mask=mask)
                if call.empty is not None:
                    o, lse = o.masked_fill(call.empty, 0.0), lse.masked_fill(call.empty[..., 0], float("-inf"))
                o_parts.append(o)
                l_parts.append(lse[..., None])
            outs.append(assemble(o_parts))
            lses.append(assemble(l_parts)[..., 0])
        lse = torch.logaddexp(lses[0], lses[1])  # (b, h, t)
        out = outs[0] * (lses[0] - lse).exp()[..., None] + outs[1] * (lses[1] - lse).exp()[..., None]
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.parts = parts
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        grads = [torch.zeros_like(x) for x in (q, k, v)]
        for calls, _ in ctx.parts:
            for call in calls:
                with torch.enable_grad():
                    inputs = [x.detach().requires_grad_() for x in (q, k, v)]
                    laid = call.queries(inputs[0]), call.keys(inputs[1]), call.keys(inputs[2])
                g = call.queries(grad)
                g = g if call.empty is None else g.masked_fill(call.empty, 0.0)  # rows with no key: no gradient
                o, m = call.queries(out), call.queries(lse[..., None])[..., 0].contiguous()
                mask = None if call.mask is None else call.mask.to(q.dtype)
                d = FLASH_BACKWARD(g.contiguous(), *laid, o.contiguous(), m, 0.0, call.causal, attn_mask=mask)
                for total, part in zip(grads, torch.autograd.grad(laid, inputs, d), strict=True):
                    total += part
        return *grads, None


def sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, sp: SparsePattern, layer: int = 0, causal: bool = True,
    key_mask: Tensor | None = None, dropout_p: float = 0.0,
) -> Tensor:  # fmt: skip
    """Self-attention of q, k, v (b, h, t, s) at positions 0..t - 1 under pattern ``sp`` in ``layer``, blocked:
    the same result as the dense masked kernel under :meth:`SparsePattern.mask`, in t sqrt(t) time and linear
    memory. key_mask: (b, t) True for real tokens. Returns (b, h, t, s).

    Padding or a bidirectional pattern build each block's mask whole ((b, n, l, m): t sqrt(t) booleans), and
    the union layout merges its parts only when causal, unpadded and without dropout on a CPU; elsewhere it runs
    the dense masked kernel."""
    heads, fns = q.size(1), PARTS[sp.pattern]
    if sp.layout == "union" and causal and key_mask is None and not dropout_p and q.device.type == "cpu":
        return _Union.apply(q, k, v, _union_parts(sp, *q.shape[:3]))
    if sp.layout == "union":  # elsewhere: one softmax under the pattern's whole mask
        mask = sp.mask(layer, heads, q.size(2), causal=causal, device=q.device)  # (h, t, t)
        mask = mask if key_mask is None else mask & key_mask[:, None, None, :]
        return _attend(q, k, v, mask, False, dropout_p)
    if sp.layout == "alternate":  # the whole layer takes one part
        return fns[layer % 2](q, k, v, sp, causal, key_mask, dropout_p)
    # split: one split per tensor, whose gradient is one concatenation (two slices would each build a full one)
    pieces = zip(*(x.split([heads // 2, heads - heads // 2], dim=1) for x in (q, k, v)), strict=True)
    outs = [fn(qq, kk, vv, sp, causal, key_mask, dropout_p) for fn, (qq, kk, vv) in zip(fns, pieces, strict=True)]
    return torch.cat(outs, dim=1)


FLEX_MASKS_KEPT = 16
_FLEX: dict[object, object] = {}
"""FlexAttention compiled once per process (its eager form computes the dense t^2 scores), and the block masks
of patterns without padding, which depend only on the pattern, the layer, the heads and the length."""


def flex_sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, sp: SparsePattern, layer: int = 0, causal: bool = True,
    key_mask: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """The same as :func:`sparse_attention` through PyTorch's FlexAttention: the pattern becomes a ``mask_mod``,
    and the block mask built from it (compiled, so that the t^2 mask is never materialized; kept for the next
    call when there is no padding) skips every 128 x 128 tile that no pair in it may attend. On a GPU it trains;
    on a CPU, PyTorch runs it forward only (no gradients), so CPU training takes the blocked path. No attention
    dropout: FlexAttention has none."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if q.device.type == "cpu" and torch.is_grad_enabled() and q.requires_grad:
        raise ValueError("model sparse.kernel flex: FlexAttention has no backward pass on a CPU; train with "
                         "sparse.kernel blocked (or auto), or run flex under torch.no_grad()")  # fmt: skip
    heads, t = q.size(1), q.size(2)

    def may_attend(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        allowed = sp.of_head(*sp.parts(i, j, causal), layer, heads, h)
        return allowed if key_mask is None else allowed & key_mask[b, j]

    key = (sp, layer % 2 if sp.layout == "alternate" else 0, causal, heads, t, str(q.device))
    block_mask = _FLEX.get(key) if key_mask is None else None
    if block_mask is None:
        batch = None if key_mask is None else q.size(0)
        block_mask = create_block_mask(may_attend, batch, heads, t, t, device=q.device, _compile=True)
        if key_mask is None:
            masks = [k for k in _FLEX if k != "fn"]
            if len(masks) >= FLEX_MASKS_KEPT:  # the oldest goes: lengths vary (prompts), the cache must not grow
                del _FLEX[masks[0]]
            _FLEX[key] = block_mask
    if "fn" not in _FLEX:
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX["fn"](q, k, v, block_mask=block_mask)  # type: ignore[operator]


class SparseAttend(Attend):
    """A sparse layer's kernel: the blocked or FlexAttention fast path over a whole sequence from position 0, else the
    dense kernel ``fn`` under the pattern's (h, t, u) mask (decoding steps after the first, pictures, kernel dense)."""

    def __init__(self, pattern: SparsePattern, layer: int, fn: AttentionFn = fused_attention) -> None:
        super().__init__(fn)
        self.pattern, self.layer = pattern, layer

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout_p: float = 0.0,
                 bias: Tensor | None = None, offset: int | Tensor = 0) -> Tensor:  # fmt: skip
        sp, t, u = self.pattern, q.size(2), k.size(2)
        kernel = sp.kernel
        if kernel == "auto":  # FlexAttention on a GPU, unless attention dropout asks for the blocked kernel
            kernel = "flex" if q.is_cuda and not dropout_p else "blocked"
        key_mask = None if mask is None else mask[:, 0, 0, :]  # (b, u)
        if offset == 0 and t == u and kernel != "dense":
            if kernel == "flex":
                if dropout_p:
                    raise ValueError(f"model sparse.kernel flex has no attention dropout (dropout={dropout_p}): "
                                     "set model dropout 0, or use sparse.kernel blocked or auto")  # fmt: skip
                return flex_sparse_attention(q, k, v, sp, self.layer, causal, key_mask)
            return sparse_attention(q, k, v, sp, self.layer, causal, key_mask, dropout_p)
        allowed = sp.mask(self.layer, q.size(1), t, u, int(offset), causal, q.device)  # (h, t, u)
        allowed = allowed if mask is None else allowed & mask  # (b|1, h, t, u)
        return self.fn(q, k, v, allowed, False, dropout_p)  # (b, h, t, s)

    def step_keys(self, seen: Tensor, at: Tensor, heads: int) -> tuple[Tensor, Tensor | None]:
        """(h, 1, u): the pattern's row at the step's position, of the keys written; a row may be empty."""
        j = torch.arange(seen.numel(), device=seen.device)[None, :]
        return _guard_empty_rows(seen & self.pattern.allowed(self.layer, heads, at.view(1, 1), j, causal=True))

    def recording(self, keep: list[Tensor]) -> Attend:
        dense = dataclasses.replace(self.pattern, kernel="dense")  # the pattern's mask, whole
        return SparseAttend(dense, self.layer, partial(reference_attention, keep=keep))

    def __repr__(self) -> str:
        return f"SparseAttend({self.pattern}, layer={self.layer})"


def layer_kernels(cfg: TransformerConfig) -> Callable[[int], Attend] | None:
    """Each self-attention layer's kernel for a sparse config (by the layer's index: ``alternate`` switches
    parts between layers); None for a dense one."""
    if cfg.sparse is None:
        return None
    pattern, fn = SparsePattern.of(cfg.sparse), ATTENTION[cfg.attention]
    return lambda layer: SparseAttend(pattern, layer, fn)

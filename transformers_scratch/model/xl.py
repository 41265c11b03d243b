"""Transformer-XL (Dai et al. 2019): a memory of the segments before, and relative positions.

A long text is read in segments of ``context`` tokens. Each layer attends over its own segment and over the
hidden states that its input held for the ``mem_len`` positions before (the memory: cached, detached, no
gradient through it). So a token sees up to ``depth x mem_len`` positions back, while each step still costs one
segment. Absolute positions would repeat in every segment, so the positions are relative: the score of query i
against key j is, with q_i, k_j, the query and key, R the sinusoid of their distance i - j projected by W_r, and
u, v two learned vectors per head,

    a_ij = (q_i + u) . k_j      content: what the key says, and how much any key matters
         + (q_i + v) . W_r R    position: how far back the key sits

scaled by 1/sqrt(head width). The parameterization is the authors' PyTorch code (kimiyoung/transformer-xl,
``pytorch/mem_transformer.py``), so their weights map one to one (:func:`from_authors`).

Shapes: b batch, t segment length (queries), m memory length, n = m + t keys, k width, h heads, s head width,
v vocabulary (see attention.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .attention import ATTENTION, Attend, causal_mask
from .blocks import ACTIVATIONS, make_norm
from .config import XLConfig
from .generation import generate

Memory = list[Tensor]
"""One (b, m, k) tensor per layer: the input hidden states of the m positions before the segment."""


def xl_sinusoids(distances: Tensor, emb: int) -> Tensor:
    """Position vectors of distances (n,) -> (n, k): [sin(d f_0..f_{k/2-1}) | cos(...)], f_i = 10000^(-2i/k), the
    two halves side by side (the authors' layout; the paper's absolute encodings interleave them)."""
    freq = 1 / (10000 ** (torch.arange(0.0, emb, 2.0, device=distances.device) / emb))  # (k/2,)
    angle = distances.float()[:, None] * freq  # (n, k/2)
    return torch.cat([angle.sin(), angle.cos()], dim=-1)  # (n, k)


def relative_shift(scores: Tensor) -> Tensor:
    """Query-by-distance scores -> query-by-key scores, with no gather.

    ``scores`` (..., t, n): column c of row i scores query i against the distance n - 1 - c (distances run from
    the farthest key down to 0). The queries are the last t of the n keys, so query i sits at m + i (m = n - t)
    and its key j lies m + i - j back: column n - 1 - (m + i - j) = t - 1 - i + j. Row i must move left by
    t - 1 - i. Put a zero column in front, read the (t, n + 1) block as (n + 1, t), drop the first row, and read
    it back as (t, n): each row has slid by one more than the row below it. Returns (..., t, n); entries of keys
    after the query (j > m + i) are left-overs of the next row, which the causal mask removes.
    """
    *lead, t, n = scores.shape
    padded = F.pad(scores, (1, 0))  # (..., t, n + 1): a zero column in front
    return padded.view(*lead, n + 1, t)[..., 1:, :].reshape(*lead, t, n)  # (..., t, n)


def window_mask(t: int, n: int, window: int | None, device=None) -> Tensor:
    """(t, n) "may attend" mask of the last t of n positions: the causal mask, and with a ``window``, only the
    ``window`` newest keys, the query's own included (the authors' ``same_length``)."""
    mask = causal_mask(t, n, device)  # key j <= m + i
    if window is not None:
        mask &= ~torch.ones(t, n, dtype=torch.bool, device=device).tril(n - t - window)  # and j > m + i - window
    return mask


class RelativeAttention(nn.Module):
    """Multi-head attention over memory and segment with relative positions: the fused (3k, k) projection of
    queries, keys and values, the (k, k) projection W_r of the position vectors, the output projection; none has
    a bias. ``u`` and ``v`` are this layer's own with ``untie_r``, else the model's, passed in."""

    def __init__(self, cfg: XLConfig) -> None:
        super().__init__()
        self.heads, self.attend, self.dropout = cfg.heads, Attend(ATTENTION[cfg.attention]), cfg.dropatt
        s = cfg.emb // cfg.heads
        self.qkv = nn.Linear(cfg.emb, 3 * cfg.emb, bias=False)  # rows: W_q, W_k, W_v
        self.pos = nn.Linear(cfg.emb, cfg.emb, bias=False)  # W_r: sinusoids to per-head position keys
        self.out = nn.Linear(cfg.emb, cfg.emb, bias=False)
        self.u = nn.Parameter(torch.zeros(cfg.heads, s)) if cfg.untie_r else None
        self.v = nn.Parameter(torch.zeros(cfg.heads, s)) if cfg.untie_r else None

    def forward(self, x: Tensor, t: int, r: Tensor, u: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """x: (b, n, k) memory then segment; t: the segment's length; r: (n, k) position vectors of distances
        n - 1 .. 0; u, v: (h, s); mask: (t, n) bool, True = may attend. Returns (b, t, k)."""
        b, n, k = x.shape
        h, s = self.heads, k // self.heads
        q, key, val = self.qkv(x).split(k, dim=-1)  # 3 x (b, n, k)
        q = q[:, n - t :].reshape(b, t, h, s).transpose(1, 2)  # (b, h, t, s): the segment asks
        key, val = (z.view(b, n, h, s).transpose(1, 2) for z in (key, val))  # (b, h, n, s): memory and segment
        rk = self.pos(r).view(n, h, s).transpose(0, 1)  # (h, n, s): one key per distance
        if self.u is not None and self.v is not None:  # this layer's own (untied); else the model's, passed in
            u, v = self.u, self.v
        position = relative_shift((q + v[:, None]) @ rk.transpose(-2, -1))  # (b, h, t, n): (q_i + v) . W_r R_{i-j}
        bias = position / math.sqrt(s)  # the kernels scale (q_i + u) . k_j themselves
        dropout_p = self.dropout if self.training else 0.0
        y = self.attend(q + u[:, None], key, val, mask, False, dropout_p, bias)  # (b, h, t, s)
        return self.out(y.transpose(1, 2).reshape(b, t, k))  # (b, t, k)


class XLBlock(nn.Module):
    """Relative attention over memory and segment, then a feed-forward layer (Linear, ReLU, dropout, Linear,
    with biases), each inside a residual: post-norm ``norm(x + f(x))``, or pre-norm ``x + f(norm(x))``, where
    the memory is normed with the segment before attention reads it."""

    def __init__(self, cfg: XLConfig) -> None:
        super().__init__()
        self.pre_norm = cfg.pre_norm
        self.attn = RelativeAttention(cfg)
        self.norm1 = make_norm(cfg)
        act = ACTIVATIONS[cfg.activation]()
        self.ff = nn.Sequential(
            nn.Linear(cfg.emb, cfg.hidden), act, nn.Dropout(cfg.dropout), nn.Linear(cfg.hidden, cfg.emb)
        )
        self.norm2 = make_norm(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, memory: Tensor | None, r: Tensor, u: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """x: (b, t, k) the segment; memory: (b, m, k) this layer's memory, or None. Returns (b, t, k)."""
        t = x.size(1)
        both = x if memory is None else torch.cat([memory, x], dim=1)  # (b, n, k)
        if self.pre_norm:
            x = x + self.drop(self.attn(self.norm1(both), t, r, u, v, mask))
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop(self.attn(both, t, r, u, v, mask)))
        return self.norm2(x + self.drop(self.ff(x)))  # (b, t, k)


class TransformerXL(nn.Module):
    """A causal character (or token) model with a memory: embedding scaled by sqrt(k), ``depth`` XL blocks, an
    output layer tied to the embedding with its own bias. :meth:`forward` takes a segment and the memory the
    segment before left, and returns the logits and the memory for the segment after."""

    def __init__(self, cfg: XLConfig) -> None:
        super().__init__()
        self.cfg = cfg
        s = cfg.emb // cfg.heads
        self.embed = nn.Embedding(cfg.vocab_size, cfg.emb)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(XLBlock(cfg) for _ in range(cfg.depth))
        self.u = None if cfg.untie_r else nn.Parameter(torch.zeros(cfg.heads, s))  # shared by every layer
        self.v = None if cfg.untie_r else nn.Parameter(torch.zeros(cfg.heads, s))
        self.head = nn.Linear(cfg.emb, cfg.vocab_size)
        self.reset_parameters()
        self.head.weight = self.embed.weight  # (v, k): one matrix reads and writes tokens; the bias is the head's

    def reset_parameters(self) -> None:
        """The authors' initialisation: N(0, 0.02) for every matrix, embedding and u, v; zero biases; unit norms."""
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "norm" in name:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, std=0.02)

    def forward(
        self,
        ids: Tensor,
        memory: Memory | None = None,
        mem_len: int | None = None,
        same_length: bool | None = None,
        clamp_len: int | None = -1,
    ) -> tuple[Tensor, Memory | None]:
        """ids: (b, t) a segment; memory: what the segment before returned (None: nothing before). ``mem_len``,
        ``same_length`` and ``clamp_len`` default to the config's (evaluation may differ: a longer memory).
        Returns logits (b, t, v) and the new memory: per layer, the newest ``mem_len`` input hidden states of
        memory and segment, detached (None when ``mem_len`` is 0)."""
        cfg = self.cfg
        mem_len = cfg.mem_len if mem_len is None else mem_len
        same_length = cfg.same_length if same_length is None else same_length
        clamp_len = cfg.clamp_len if clamp_len == -1 else clamp_len
        t = ids.size(1)
        m = 0 if memory is None else memory[0].size(1)
        n = m + t
        x = self.drop(self.embed(ids) * math.sqrt(cfg.emb))  # (b, t, k)
        distances = torch.arange(n - 1, -1, -1.0, device=ids.device)  # (n,): the farthest key first
        if clamp_len is not None:
            distances = distances.clamp(max=clamp_len)
        r = self.drop(xl_sinusoids(distances, cfg.emb).to(x.dtype))  # (n, k)
        mask = window_mask(t, n, mem_len if same_length else None, ids.device)  # (t, n)
        hidden = []
        for i, block in enumerate(self.blocks):
            hidden.append(x)
            args = (x, None if memory is None else memory[i], r, self.u, self.v, mask)
            if cfg.activation_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, *args, use_reentrant=False)
            else:
                x = block(*args)
        return self.head(self.drop(x)), remember(memory, hidden, mem_len)

    def empty_memory(self, batch: int, like: Tensor) -> Memory:
        """A memory of no positions, one per layer: what a stream starts from."""
        return [like.new_zeros(batch, 0, self.cfg.emb) for _ in self.blocks]

    def generate(self, prompt: Tensor, max_new_tokens: int, *, window: int | None = None, **options) -> Tensor:
        """Continue prompt (b, t) by max_new_tokens past any window: :func:`~.generation.generate`, whose keyword
        options (temperature, top_k, top_p, use_cache, generator) it takes.

        Every position sees the ``window`` newest positions at every layer, itself included (default: mem_len +
        context, the most keys a training query sees): ``same_length`` with a memory of ``window``. Then a
        position's output does not depend on how the text is cut into segments, so the cached way and the
        recomputed way give the same tokens. With ``use_cache`` the prompt is read in segments of ``context``
        and every new token is a segment of one, carrying the memory. Without it, each new token recomputes
        the ``depth x (window - 1)`` positions before it, all that reaches it through the layers."""
        if options.get("cuda_graph"):
            raise ValueError("cuda_graph replays a fixed-shape step; a Transformer-XL's memory grows: leave it off")
        cfg = self.cfg
        window = window or cfg.mem_len + cfg.context
        if window < 1:  # a memory grows with the text, up to the window: no window is too long
            raise ValueError(f"a sampling window of {window:,} positions must be at least 1")
        reach = cfg.depth * (window - 1) + 1  # positions that reach the newest one through every layer
        windowed = dict(mem_len=window, same_length=True)

        def steps(model, tokens: Tensor, t: int, use_cache: bool, cuda_graph: bool):
            memory: Memory | None = None

            def next_logits(end: int) -> Tensor:
                nonlocal memory
                if not use_cache:
                    return self(tokens[:, max(0, end - reach) : end], **windowed)[0][:, -1].float()
                if end > t:
                    logits, memory = self(tokens[:, end - 1 : end], memory, **windowed)  # one new position
                    return logits[:, -1].float()
                for start in range(max(0, t - reach), t, cfg.context):  # the prompt, segment by segment
                    logits, memory = self(tokens[:, start : min(t, start + cfg.context)], memory, **windowed)
                return logits[:, -1].float()

            return next_logits

        return generate(self, prompt, max_new_tokens, steps=steps, **options)


def remember(memory: Memory | None, hidden: list[Tensor], mem_len: int) -> Memory | None:
    """The next segment's memory: per layer, the newest ``mem_len`` of memory and segment, without gradient."""
    if mem_len == 0:
        return None
    with torch.no_grad():
        both = hidden if memory is None else [torch.cat([m, h], dim=1) for m, h in zip(memory, hidden, strict=True)]
        # contiguous: a view would keep the whole concatenation alive, and change strides from the first segment to
        # the next (a recompilation under torch.compile)
        return [z[:, -mem_len:].detach().contiguous() for z in both]  # (b, <= mem_len, k) each


AUTHORS_FIX = "pass the state_dict() of the authors' MemTransformerLM (attn_type 0, no adaptive embedding or softmax)"


AUTHORS_BLOCK = {"attn.qkv.weight": "dec_attn.qkv_net.weight", "attn.pos.weight": "dec_attn.r_net.weight",
                 "attn.out.weight": "dec_attn.o_net.weight", "norm1": "dec_attn.layer_norm", "ff.0": "pos_ff.CoreNet.0",
                 "ff.3": "pos_ff.CoreNet.3", "norm2": "pos_ff.layer_norm"}  # fmt: skip
"""A block's names here -> the authors' (``layers.i.``); a module without ``.weight`` has a weight and a bias."""


def authors_names(depth: int, untie_r: bool) -> dict[str, str]:
    """This project's parameter names -> the authors' (``MemTransformerLM.state_dict()``), one to one. Their
    output layer's weight is the embedding's (tied), so only its bias maps; u and v are shared, or with
    ``untie_r`` each layer's (where Hugging Face's port keeps them)."""
    names = {"embed.weight": "word_emb.emb_layers.0.weight", "head.bias": "crit.out_layers.0.bias"}
    block = {ours + p: theirs + p for ours, theirs in AUTHORS_BLOCK.items()
             for p in ([""] if ours.endswith(".weight") else [".weight", ".bias"])}  # fmt: skip
    if untie_r:
        block |= {"attn.u": "dec_attn.r_w_bias", "attn.v": "dec_attn.r_r_bias"}
    else:
        names |= {"u": "r_w_bias", "v": "r_r_bias"}
    return names | {f"blocks.{i}.{k}": f"layers.{i}.{v}" for i in range(depth) for k, v in block.items()}


def from_authors(state: dict, source: str = "the state dict", **settings) -> TransformerXL:
    """A :class:`TransformerXL` holding the weights of the authors' ``MemTransformerLM`` (its ``state_dict()``).

    The sizes come from the tensors: vocabulary and width from the embedding, depth from the layers, heads and
    head width from the biases u, v, the feed-forward width from its first layer. What the weights do not say
    is given in ``settings``, as :class:`~.config.XLConfig` fields: ``pre_norm`` (their ``pre_lnorm``),
    ``context`` (``tgt_len``), ``mem_len``, ``clamp_len``, ``same_length``, ``dropout``. Every tensor must be
    there with its shape, and nothing else: a missing, extra or misshapen one is refused, naming it."""
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise ValueError(f"{source} is not a state dict of named tensors; {AUTHORS_FIX}")
    need = ("word_emb.emb_layers.0.weight", "layers.0.pos_ff.CoreNet.0.weight")
    if missing := [k for k in need if k not in state or state[k].dim() != 2]:  # the sizes are read from them
        raise ValueError(f"{source} lacks {missing[0]!r} as a matrix; {AUTHORS_FIX}")
    vocab, emb = state["word_emb.emb_layers.0.weight"].shape
    untie_r = "r_w_bias" not in state  # each layer's, then
    bias = state.get("layers.0.dec_attn.r_w_bias" if untie_r else "r_w_bias")
    if bias is None or bias.dim() != 2:
        raise ValueError(f"{source} lacks the biases r_w_bias (heads, head width); {AUTHORS_FIX}")
    heads, head_width = bias.shape
    if heads * head_width != emb:
        raise ValueError(
            f"{source} has {heads} heads of {head_width} in a width of {emb}: here heads x head width is the width; "
            "train with d_head = d_model / n_head"
        )
    depth = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers.") and k.split(".")[1].isdecimal())
    try:
        cfg = XLConfig(vocab_size=vocab, emb=emb, heads=heads, depth=depth, untie_r=untie_r,
                       ff_hidden=state["layers.0.pos_ff.CoreNet.0.weight"].size(0), **settings)  # fmt: skip
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source}: {e}") from None
    model = TransformerXL(cfg)
    names = authors_names(depth, untie_r)
    expected = {name: p for name, p in model.state_dict().items() if name != "head.weight"}
    derived = {"pos_emb.inv_freq", "crit.out_layers.0.weight"}  # recomputed here, or the tied embedding
    if extra := sorted(set(state) - set(names.values()) - derived):
        raise ValueError(f"{source} holds {extra[0]!r}, which this model has no place for ({len(extra)} such); "
                         f"{AUTHORS_FIX}")  # fmt: skip
    out = state.get("crit.out_layers.0.weight")
    if out is not None and (out.shape != (vocab, emb) or not torch.equal(out, state["word_emb.emb_layers.0.weight"])):
        raise ValueError(f"{source} has an output layer that is not the embedding: train with tie_weight")
    converted = {}
    for ours, theirs in names.items():
        got = state.get(theirs)
        if got is None or got.shape != expected[ours].shape or not got.is_floating_point():
            held = "lacks it" if got is None else f"holds {got.dtype} of shape {tuple(got.shape)}"
            raise ValueError(f"{source}: a model of these sizes needs {theirs!r} as floats of shape "
                             f"{tuple(expected[ours].shape)}, and it {held}; {AUTHORS_FIX}")  # fmt: skip
        converted[ours] = got.float()
    model.load_state_dict(converted, strict=False)  # head.weight is the embedding
    return model.eval()

"""Typed model configurations. Attribute docstrings become ``--help`` text in the CLI."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Literal, get_type_hints

from ..bounds import Base, Classes, Count, Depth, Memory, NonNegative, Positive, PositiveFloat, Rate, check_fields


@dataclass(frozen=True)
class SparseConfig:
    """Sparse attention (Child et al. 2019): each head sees a pattern of about sqrt(t) keys a query. These are its
    settings; the pattern and its kernels come later, beside the attention they replace."""

    pattern: Literal["strided", "fixed"] = "strided"
    """strided (the previous ``block`` positions, and every ``block``-th one before) or fixed (the query's own
    block, and the last ``summary`` positions of every block)."""
    layout: Literal["split", "alternate", "union"] = "split"
    """Half the heads take each part of the pattern (split), whole layers take them in turn (alternate), or every
    head takes both (union)."""
    block: Count = 64
    """The block length l, about sqrt(context)."""
    summary: Count = 4
    """With the fixed pattern: c, the summary positions at the end of each block (< l)."""
    kernel: Literal["auto", "blocked", "flex", "dense"] = "auto"
    """blocked (fused kernels on blocks, t sqrt(t) time, any device), flex (FlexAttention with a block mask; trains
    on a GPU, forward only on a CPU), dense (the masked t^2 reference), or auto: flex on a GPU, blocked elsewhere."""

    def __post_init__(self) -> None:
        check_fields(self, "model sparse.")
        if self.pattern == "fixed" and self.summary >= self.block:
            raise ValueError(
                f"model sparse.summary={self.summary!r} must lie in [1, sparse.block={self.block}): the summary is "
                "the last c positions of each block; pass a smaller summary"
            )


OLD_SPARSE = {"sparse_pattern": "pattern", "sparse_layout": "layout", "sparse_block": "block",
              "sparse_summary": "summary", "sparse_kernel": "kernel"}  # fmt: skip
"""The flat settings of earlier versions, and their names inside ``sparse``."""


def nested_sparse(settings: dict) -> dict:
    """Settings written with the earlier flat names (``attention: sparse``, ``sparse_block: 128``) in the nested
    spelling (``sparse: {block: 128}``); others as they are."""
    flat = {new: settings[old] for old, new in OLD_SPARSE.items() if old in settings}
    out = {k: v for k, v in settings.items() if k not in OLD_SPARSE}
    if out.get("attention") == "sparse":
        out["attention"], out["sparse"] = "sdpa", flat
    return out


@dataclass
class TransformerConfig:
    """Sizes and choices shared by every model here. Defaults: the tutorial's enwik8 model."""

    vocab_size: Count = 256
    """Number of token ids (256 for raw bytes). Linked from the data module in the CLI."""
    context: Count = 256
    """Longest token sequence the model accepts: size of the position table. Linked from the data in the CLI
    (data.context for text, data.max_length for reviews)."""
    emb: Count = 256
    """Model width k (embedding size)."""
    heads: Count = 8
    """Attention heads; each sees emb // heads dimensions."""
    depth: Depth = 12
    """Number of transformer blocks."""
    ff_mult: Count = 4
    """Feed-forward hidden width as a multiple of emb (4 in the tutorial and the paper)."""
    activation: Literal["relu", "gelu", "gelu_tanh", "relu2", "swiglu"] = "relu"
    """Feed-forward non-linearity: relu (tutorial, paper), gelu (BERT, nanoGPT), gelu_tanh (GPT-2's approximation),
    relu2, relu(x)^2 (Primer), or swiglu, a gated feed-forward, down(silu(gate(x)) * up(x)) (Llama)."""
    dropout: Rate = 0.0
    """Dropout on attention weights, sublayer outputs and embeddings."""
    pre_norm: bool = True
    """Layer norm before each sublayer (GPT-2, modern). False: after the residual sum, as the tutorial."""
    positions: Literal["learned", "sinusoidal", "rope", "alibi"] = "learned"
    """Learned position embeddings (tutorial), fixed sinusoidal encodings (Vaswani et al. 2017), rotary
    embeddings of queries and keys (RoPE, Su et al. 2021) or linear attention biases (ALiBi, Press et al.
    2022). All but learned accept sequences longer than the context."""
    attention: Literal["sdpa", "reference"] = "sdpa"
    """Attention kernel: fused scaled_dot_product_attention, or the explicit matmul-softmax-matmul."""
    sparse: SparseConfig | None = None
    """Sparse attention, as ``{pattern: fixed, layout: split, block: 64, summary: 4, kernel: auto}`` (each key
    optional); None: dense. Self-attention only; ``attention`` computes what the pattern's kernel leaves to a
    dense one."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in the backward pass: less memory, about a third more compute."""
    ff_hidden: Count | None = None
    """Feed-forward hidden width outright (Llama's and BERT's configs give it); None: ff_mult x emb."""
    kv_heads: Count | None = None
    """Key/value heads (grouped-query attention, Llama): each serves heads // kv_heads query heads, and the
    key/value cache keeps only them. None: as many as heads."""
    qkv_bias: bool = False
    """A bias on the query, key and value projections (GPT-2, BERT, Qwen2)."""
    bias: bool = True
    """Biases of the attention's output projection and of the feed-forward layers (False: Llama)."""
    norm: Literal["layer", "rms"] = "layer"
    """LayerNorm, or RMSNorm (Llama): a scale by the root mean square, with no mean and no bias."""
    norm_eps: PositiveFloat = 1e-5
    """The norms' epsilon (BERT: 1e-12; Llama: 1e-6 or 1e-5)."""
    rope_base: Base = 10000.0
    """RoPE's base, above 1, which sets its longest wavelength (Llama 3: 500000)."""
    embed_norm: bool = False
    """A norm over the summed embeddings, before the first block (BERT)."""
    zero_out: bool = False
    """Start the projections that write into the residual stream (attention output, feed-forward down) at zero,
    so that every block begins as the identity (the GPU speedruns); False: GPT-2's N(0, 0.02 / sqrt(2 depth))."""
    token_types: NonNegative = 0
    """Token-type (segment) embeddings added to the tokens (BERT: 2, for sentences A and B); 0: none. Without
    a token-type input every token is type 0."""

    def __post_init__(self) -> None:
        if isinstance(self.sparse, dict):  # settings read back from a checkpoint or an export
            self.sparse = SparseConfig(**self.sparse)
        if not isinstance(self.sparse, SparseConfig | None):
            raise ValueError(f"model sparse={str(self.sparse)[:40]} is no mapping of sparse settings (or null)")
        check_fields(self)
        # before any check that reads the sizes digit by digit: a width may have 40 digits
        table = 3 * self.context * self.emb if self.positions == "sinusoidal" else 0  # a buffer: 3 copies to build
        if (weights := 4 * self.parameters_at_least()) + 4 * table > memory_bytes():
            needed = (weights + 4 * table) / 1e9
            raise ValueError(
                f"model of at least {_count(weights // 4)} parameters needs {_count(needed)} GB for its float32 "
                f"weights{' and sinusoidal table' if table else ''} alone, more than this machine's "
                f"{memory_bytes() / 1e9:,.1f} GB of memory; make it smaller (emb, depth, vocab_size, context)"
            )
        if self.emb % self.heads:
            raise ValueError(
                f"model emb={self.emb} is not divisible by heads={self.heads}; "
                f"pick heads that divide the width (e.g. heads={_divisor_near(self.emb, self.heads)})"
            )
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"model kv_heads={self.kv_heads} must divide heads={self.heads}")
        if self.positions == "rope" and (self.emb // self.heads) % 2:
            raise ValueError(f"model positions rope turns pairs of dimensions: head width {self.emb // self.heads} "
                             "must be even; pick emb and heads to give one")  # fmt: skip
        if self.sparse is not None:
            if self.sparse.block > self.context:
                raise ValueError(f"model sparse.block={self.sparse.block} is longer than the context {self.context}: "
                                 "every query would see everything before it; pass a block near sqrt(context), "
                                 f"such as {max(1, math.isqrt(self.context))}")  # fmt: skip
            if self.positions == "alibi":
                raise ValueError("model positions alibi adds a bias to every score; sparse attention takes none: "
                                 "use learned, sinusoidal or rope positions with sparse attention")  # fmt: skip
            if self.sparse.layout == "split" and self.heads < 2:
                raise ValueError(f"model sparse.layout split gives half the heads each part: heads={self.heads} "
                                 "is too few; use 2 heads or more, or layout alternate")  # fmt: skip

    @property
    def hidden(self) -> int:
        """The feed-forward hidden width."""
        return self.ff_hidden or self.ff_mult * self.emb

    def parameters_at_least(self) -> int:
        """The parameters this config declares, at least: embeddings, a learned position table, the output layer
        when untied, and every block's projections. What memory must hold, and a file of its weights."""
        table = self.context * self.emb if self.positions == "learned" else 0
        head = 0 if getattr(self, "tie_weights", True) else self.vocab_size * self.emb
        return self.vocab_size * self.emb + table + head + self.depth * self.block_parameters()

    def refuse_past(self, held: int, where: str, fix: str, error: type[ValueError] = ValueError) -> None:
        """Settings that declare more parameters than a file's weights ``held`` are refused before anything is built
        (a damaged or hostile file would have memory allocated for a model its weights cannot fill)."""
        if (needed := self.parameters_at_least()) > held:
            raise error(f"{where} declares {needed:,} parameters or more (depth {self.depth}, emb {self.emb}, vocab "
                        f"{self.vocab_size}), and its weights hold {held:,}: {fix}")  # fmt: skip

    def block_parameters(self) -> int:
        """A block's projections, at least (biases and norms left out): what a file of weights must hold."""
        kv = (self.kv_heads or self.heads) * (self.emb // self.heads)  # g * s: a key's or value's rows
        ff = (3 if self.activation == "swiglu" else 2) * self.emb * self.hidden
        return 2 * self.emb * (self.emb + kv) + ff


MAX_HEADS_HINT = 4_096  # the most heads an error message suggests


def memory_bytes() -> int:
    """This machine's physical memory (a model's weights must fit in it before anything else)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # no sysconf: no limit known
        return 2**62


@dataclass
class ClassifierConfig(TransformerConfig):
    """Sequence classifier (experiment 1). Defaults: the tutorial's IMDb model, less its depth."""

    num_classes: Classes = 2
    """Number of classes. Linked from the data module in the CLI."""
    pool: Literal["mean", "max", "cls"] = "mean"
    """Sequence summary: mean or max over real tokens, or the output at a prepended [CLS] token (which
    takes a position of its own, in front of ``context`` tokens)."""


@dataclass
class MaskedLMConfig(TransformerConfig):
    """Masked-token pretraining (BERT): the encoder of the classifier it will start, with the same sizes; its
    vocabulary is the classifier's plus [MASK] (linked from the data module in the CLI)."""

    head_transform: bool = False
    """A dense layer, the activation and a norm between the encoder and the output layer (BERT's MLM head)."""


@dataclass
class LMConfig(TransformerConfig):
    """Causal language model (experiment 2)."""

    tie_weights: bool = False
    """Share the token embedding matrix with the output layer (GPT-2, nanoGPT)."""


@dataclass
class XLConfig(TransformerConfig):
    """Transformer-XL (Dai et al. 2019): a causal LM whose layers also attend over the cached hidden states of
    the segments before (the memory), with relative positions. ``context`` is the segment length. Defaults: the
    authors' parameterization (post-norm, ReLU, tied output layer with its own bias)."""

    positions: Literal["relative"] = "relative"  # type: ignore[assignment]  # its own kind: no other applies
    """Relative positions inside attention: sinusoids of the query-key distance, projected per layer, and two
    learned biases (the paper's u and v). The only choice: absolute positions would repeat in every segment."""
    pre_norm: bool = False
    """Layer norm after each residual sum (the authors' default); True: before each sublayer, with no final
    norm, as their ``pre_lnorm``."""
    mem_len: Memory = 64
    """Positions of memory per layer during training: the hidden states of the segments before, no gradient."""
    clamp_len: Positive | None = None
    """Distances past this use its sinusoid (the authors evaluate enwik8 with 820); None: no clamp."""
    same_length: bool = False
    """Every query sees exactly ``mem_len`` keys, itself included (the authors' enwik8 evaluation)."""
    untie_r: bool = False
    """One pair of biases u, v per layer instead of one pair shared by all layers."""
    dropatt: Rate = 0.0
    """Dropout on the attention weights (``dropout`` acts on embeddings, positions and sublayer outputs)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.activation == "swiglu":
            raise ValueError(
                "model activation swiglu: Transformer-XL's feed-forward is one hidden layer; use relu or gelu"
            )
        if self.sparse is not None:
            raise ValueError("model sparse: Transformer-XL's relative attention is dense over its memory; "
                             "leave sparse null")  # fmt: skip
        if self.same_length and self.mem_len < 1:
            raise ValueError("model same_length shows every query mem_len keys: give it a memory (mem_len >= 1)")
        unused = [f"{name} {getattr(self, name)}" for name, default in XL_FIXED.items()
                  if getattr(self, name) != default]  # fmt: skip
        if unused:
            raise ValueError(
                f"model {', '.join(unused)}: Transformer-XL has no such option here (its attention has no biases "
                "and one key/value head per head, its output layer is tied); leave them at their defaults"
            )


XL_FIXED = {"kv_heads": None, "qkv_bias": False, "embed_norm": False, "token_types": 0, "zero_out": False}
"""Settings of :class:`TransformerConfig` that Transformer-XL does not take: they must keep these values."""


@dataclass
class EncoderDecoderConfig(TransformerConfig):
    """Encoder-decoder transformer (Vaswani et al. 2017). ``vocab_size`` is the source vocabulary."""

    tgt_vocab_size: Count | None = None
    """Target vocabulary; None means the same as the source, and then one embedding serves source,
    target and output layer."""
    decoder_depth: Depth | None = None
    """Decoder blocks; None means the same as ``depth`` (the encoder's)."""

    def __post_init__(self) -> None:
        if self.tgt_vocab_size is None:
            self.tgt_vocab_size = self.vocab_size
        if self.decoder_depth is None:
            self.decoder_depth = self.depth
        super().__post_init__()

    @property
    def shared_vocab(self) -> bool:
        return self.tgt_vocab_size == self.vocab_size

    def parameters_at_least(self) -> int:
        """The encoder's, the decoder's blocks and a target vocabulary of its own."""
        assert self.tgt_vocab_size is not None and self.decoder_depth is not None  # filled in first
        target = 0 if self.shared_vocab else self.tgt_vocab_size * self.emb
        return super().parameters_at_least() + target + self.decoder_depth * self.block_parameters()


def read_settings(cls: type, settings, source: str, fix: str = ""):
    """A config of class ``cls`` from settings read from disk (a checkpoint's), named ``source`` in the error. A
    setting this version does not know, or a choice it does not offer, comes from a newer (or another) version,
    and is refused before anything is built; a setting missing is an older layout's, and takes its default
    (which keeps the older behaviour). ``fix`` ends each refusal; by default it points to the version that wrote
    the settings."""
    if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
        settings = dict(vars(settings))  # as pickled: an earlier version's object keeps its own fields
    fix = (
        fix or "use the version of transformers-scratch that wrote it (or a newer one), or train it again with this one"
    )
    if not isinstance(settings, dict):
        raise ValueError(f"{source} holds model settings of type {type(settings).__name__}; {fix}")
    settings = nested_sparse(settings)  # an earlier version's flat sparse settings
    unknown = [key for key in settings if key not in get_type_hints(cls)]
    if unknown:
        raise ValueError(f"{source} has a model setting {str(unknown[0])[:40]!r} that this version's {cls.__name__} "
                         f"lacks; {fix}")  # fmt: skip
    try:
        return cls(**settings)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source} has model settings this version refuses ({str(e)[:200]}); {fix}") from None


def _count(n: float) -> str:
    """n with thousands separators, or in scientific notation past 10^15 (a size may have 40 digits)."""
    return f"{n:.1e}" if n >= 1e15 else f"{n:,.1f}" if isinstance(n, float) else f"{n:,}"


def _divisor_near(n: int, target: int) -> int:
    """The divisor of n closest to target (for error messages). A divisor above 2 x target lies farther from it than 1
    does, and no one runs more heads than MAX_HEADS_HINT, so the search stops there: the width may have 40 digits."""
    top = min(n, 2 * target, MAX_HEADS_HINT)
    return min((d for d in range(1, top + 1) if n % d == 0), key=lambda d: (abs(d - target), d))

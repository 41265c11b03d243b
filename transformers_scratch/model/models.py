"""The three models of the tutorial and the paper, as plain ``nn.Module``s (no Lightning here).

Shapes: b batch, t sequence length, u source length, k width, v vocabulary, c classes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, cast

import torch
from torch import Tensor, nn

from . import generation
from .blocks import ACTIVATIONS, Embedding, Stack, make_norm
from .cache import KVCache, empty_caches
from .config import ClassifierConfig, EncoderDecoderConfig, LMConfig, MaskedLMConfig, TransformerConfig
from .sparse import layer_kernels


def init_weights(model: nn.Module, depth: int, zero_out: bool = False) -> None:
    """GPT-2 initialisation: N(0, 0.02) weights, zero biases, and the projections that write into the
    residual stream scaled by 1/sqrt(2 * depth) so the stream's variance does not grow with depth (with
    ``zero_out``, at zero: every block starts as the identity)."""
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif p.dim() >= 2:
            residual_out = name.endswith(("attn.out.weight", "cross.out.weight", "ff.2.weight", "ff.down.weight"))
            nn.init.normal_(p, std=0.02 / math.sqrt(2 * depth) if residual_out else 0.02)
            if residual_out and zero_out:
                nn.init.zeros_(p)


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    m = mask[..., None].to(x.dtype)  # (b, t, 1)
    return (x * m).sum(1) / m.sum(1).clamp(min=1.0)  # (b, k); a row of padding only pools to zeros


def _masked_max(x: Tensor, mask: Tensor) -> Tensor:
    m = mask[..., None]  # (b, t, 1)
    pooled = x.masked_fill(~m, float("-inf")).amax(1)  # (b, k)
    return torch.where(m.any(1), pooled, torch.zeros_like(pooled))


POOLS = {"mean": _masked_mean, "max": _masked_max, "cls": lambda x, mask: x[:, 0]}  # cls: the output at [CLS]


class SequenceClassifier(nn.Module):
    """Token ids -> class logits: embeddings and positions, a stack of blocks, pooling over the sequence,
    a linear layer (experiment 1 of the tutorial)."""

    def __init__(self, cfg: ClassifierConfig) -> None:
        super().__init__()
        self.cfg = cfg
        prefix = int(cfg.pool == "cls")  # a [CLS] vector takes one position in front of the context's tokens
        self.embed = Embedding(cfg, cfg.vocab_size, cfg.context + prefix)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.emb)) if cfg.pool == "cls" else None
        self.stack = Stack(cfg, cfg.depth, kernels=layer_kernels(cfg))
        self.head = nn.Linear(cfg.emb, cfg.num_classes)
        init_weights(self, cfg.depth, cfg.zero_out)

    def forward(self, ids: Tensor, mask: Tensor | None = None, types: Tensor | None = None) -> Tensor:
        """ids: (b, t); mask: (b, t) bool, True for real tokens (None: no padding); types: (b, t) token types
        (model.token_types). Returns (b, c)."""
        b, t = ids.shape
        prefix = None if self.cls is None else self.cls.expand(b, -1, -1)  # (b, 1, k)
        if mask is not None and prefix is not None:
            mask = torch.cat([mask.new_ones(b, 1), mask], dim=1)  # (b, 1 + t): [CLS] is always real
        x = self.stack(self.embed(ids, prefix=prefix, types=types), key_mask=mask)  # (b, t', k)
        pool_mask = mask if mask is not None else torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        return self.head(POOLS[self.cfg.pool](x, pool_mask))  # (b, c)


class MaskedLM(nn.Module):
    """BERT's pretraining model (Devlin et al. 2019): the classifier's embeddings and blocks, every token seeing
    every other, and a head that predicts each position's original token; the head reads with the token
    embedding matrix (tied) plus a bias per token. Its ``embed`` and ``stack`` then start a
    :class:`SequenceClassifier` of the same sizes (see :func:`encoder_state`)."""

    def __init__(self, cfg: MaskedLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = Embedding(cfg, cfg.vocab_size, cfg.context)
        self.stack = Stack(cfg, cfg.depth, kernels=layer_kernels(cfg))
        # BERT's head transform: dense, activation, norm, before the output layer
        act = ACTIVATIONS.get(cfg.activation, nn.GELU)()
        self.transform = nn.Sequential(nn.Linear(cfg.emb, cfg.emb), act, make_norm(cfg)) if cfg.head_transform else None
        self.head = nn.Linear(cfg.emb, cfg.vocab_size)
        init_weights(self, cfg.depth, cfg.zero_out)
        self.head.weight = self.embed.tokens.weight  # (v, k): one matrix reads and writes tokens

    def forward(self, ids: Tensor, mask: Tensor | None = None, chosen: Tensor | None = None,
                types: Tensor | None = None) -> Tensor:  # fmt: skip
        """ids: (b, t), masked; mask: (b, t) bool, True for real tokens; types: (b, t) token types. Returns token
        logits (b, t, v), or with ``chosen`` (b, t) bool, those of the chosen positions only, (n, v): the output
        layer is the largest matmul, and pretraining scores 15 % of the positions."""
        x = self.stack(self.embed(ids, types=types), key_mask=mask)  # (b, t, k)
        x = x if chosen is None else x[chosen]
        return self.head(x if self.transform is None else self.transform(x))  # (b, t, v) or (n, v)


FREE = ("vocab_size", "dropout", "attention", "sparse", "activation_checkpointing", "zero_out")
ENCODER_SIZES = tuple(f.name for f in dataclasses.fields(TransformerConfig) if f.name not in FREE)
"""What a pretrained encoder and the classifier it starts must share: every setting but the vocabulary (theirs
differs by [MASK]) and those of training and of the kernel, ``FREE``."""


def encoder_state(pretrained: MaskedLMConfig, state: dict[str, Tensor], cfg: ClassifierConfig) -> dict[str, Tensor]:
    """The embeddings and blocks (``embed.*``, ``stack.*``) of a :class:`MaskedLM` state dict, to load into a
    :class:`SequenceClassifier` with config ``cfg``. The pretraining vocabulary is the classifier's plus a
    [MASK] id at its end, whose row is dropped. Refuses, naming each difference, an encoder of other sizes."""
    differ = [f"{name} {getattr(cfg, name)} (pretrained {getattr(pretrained, name)})" for name in ENCODER_SIZES
              if getattr(cfg, name) != getattr(pretrained, name)]  # fmt: skip
    if pretrained.vocab_size != cfg.vocab_size + 1:
        differ.append(f"vocab_size {cfg.vocab_size} (pretrained {pretrained.vocab_size - 1} + [MASK])")
    if cfg.pool == "cls" and cfg.positions == "learned":
        differ.append("pool cls (its [CLS] position shifts every learned position by one; use mean or max)")
    if differ:
        raise ValueError(
            f"the pretrained encoder does not fit this classifier: model {', '.join(differ)}; fine-tune with the "
            "sizes and data settings (data.vocab_words, data.max_length) it was pretrained with"
        )
    encoder = {k: v for k, v in state.items() if k.startswith(("embed.", "stack."))}
    encoder["embed.tokens.weight"] = encoder["embed.tokens.weight"][: cfg.vocab_size]  # (v, k): [MASK] dropped
    return encoder


class CausalLM(nn.Module):
    """Autoregressive model: each position predicts the next token from itself and earlier ones only
    (experiment 2 of the tutorial; a GPT)."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = Embedding(cfg, cfg.vocab_size, cfg.context)
        self.stack = Stack(cfg, cfg.depth, causal=True, kernels=layer_kernels(cfg))
        self.head = nn.Linear(cfg.emb, cfg.vocab_size, bias=False)
        init_weights(self, cfg.depth, cfg.zero_out)
        if cfg.tie_weights:
            self.head.weight = self.embed.tokens.weight  # one (v, k) matrix reads and writes tokens

    def forward(self, ids: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        """ids: (b, t) -> next-token logits (b, t, v). With caches, ids continue the cached sequence."""
        offset = caches[0].offset if caches else 0
        return self.head(self.stack(self.embed(ids, offset), caches=caches))  # (b, t, v)

    def new_caches(self, batch: int) -> list[KVCache]:
        """Empty key/value caches, one per block, for ``batch`` sequences of up to the context."""
        return empty_caches(self.cfg, self.cfg.depth, batch, self.cfg.context, self.head.weight)

    def generate(self, prompt: Tensor, max_new_tokens: int, **options) -> Tensor:
        """Continue prompt (b, t) by max_new_tokens: :func:`~.generation.generate`, whose keyword options
        (temperature, top_k, top_p, use_cache, generator, cuda_graph) it takes."""
        return generation.generate(self, prompt, max_new_tokens, **options)


class EncoderDecoder(nn.Module):
    """Encoder-decoder transformer (Vaswani et al. 2017): a bidirectional encoder reads the source; a
    causal decoder reads the target so far and attends to the encoder output through cross-attention.

    ``PAD``, ``BOS`` and ``EOS`` are the ids that training data and decoding agree on: padding, the begin id
    every target starts from, and the end id that closes it."""

    PAD, BOS, EOS = 0, 1, 2

    def __init__(self, cfg: EncoderDecoderConfig) -> None:
        super().__init__()
        assert cfg.tgt_vocab_size is not None and cfg.decoder_depth is not None  # the config fills both in
        self.cfg = cfg
        self.src_embed = Embedding(cfg, cfg.vocab_size, cfg.context)
        self.tgt_embed = self.src_embed if cfg.shared_vocab else Embedding(cfg, cfg.tgt_vocab_size, cfg.context)
        self.encoder = Stack(cfg, cfg.depth, kernels=layer_kernels(cfg))
        self.decoder = Stack(cfg, cfg.decoder_depth, causal=True, cross=True, kernels=layer_kernels(cfg))
        self.head = nn.Linear(cfg.emb, cfg.tgt_vocab_size, bias=False)
        init_weights(self, cfg.depth + cfg.decoder_depth, cfg.zero_out)
        self.head.weight = self.tgt_embed.tokens.weight  # with a shared vocabulary: one matrix for all three

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src: (b, u) ids, src_mask: (b, u) True = real token -> memory (b, u, k)."""
        return self.encoder(self.src_embed(src), key_mask=src_mask)

    def decode(self, tgt: Tensor, memory: Tensor | None, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None,
               caches: list[KVCache] | None = None, memory_kvs: list | None = None) -> Tensor:  # fmt: skip
        """tgt: (b, t) target so far -> logits (b, t, v) for the token after each position. With caches, tgt
        continues the cached target; memory_kvs (from :meth:`memory_kvs`) stand in for the memory."""
        x = self.tgt_embed(tgt, caches[0].offset if caches else 0)  # (b, t, k)
        h = self.decoder(x, caches, memory_kvs, key_mask=tgt_mask, memory=memory, memory_mask=src_mask)
        return self.head(h)

    def memory_kvs(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Every decoder block's cross-attention keys and values of the encoder output: once per source."""
        return [cast(Any, block).cross.memory_kv(memory) for block in self.decoder.blocks]

    def new_caches(self, batch: int, length: int) -> list[KVCache]:
        """Empty self-attention caches, one per decoder block, for ``batch`` targets of up to ``length``."""
        return empty_caches(self.cfg, self.cfg.decoder_depth or self.cfg.depth, batch, length, self.head.weight)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None):
        """Teacher forcing: tgt is the target shifted right (starting with BOS); returns (b, t, v)."""
        return self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask)

    def generate(self, src: Tensor, **options) -> Tensor:
        """Decode from BOS for a source (b, u): :func:`~.generation.generate_seq2seq`, whose keyword options
        (bos_id, max_new_tokens, src_mask, eos_id, temperature, top_k, top_p, use_cache) it takes."""
        return generation.generate_seq2seq(self, src, **options)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

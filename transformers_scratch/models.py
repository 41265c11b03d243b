"""The three models of the tutorial and the paper, as plain ``nn.Module``s (no Lightning here).

Shapes: b batch, t sequence length, u source length, k width, v vocabulary, c classes.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from .attention import KVCache
from .blocks import Embedding, Stack
from .config import ClassifierConfig, EncoderDecoderConfig, LMConfig, MaskedLMConfig


def init_weights(model: nn.Module, depth: int) -> None:
    """GPT-2 initialisation: N(0, 0.02) weights, zero biases, and the projections that write into the
    residual stream scaled by 1/sqrt(2 * depth) so the stream's variance does not grow with depth."""
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif p.dim() >= 2:
            residual_out = name.endswith(("attn.out.weight", "cross.out.weight", "ff.2.weight"))
            nn.init.normal_(p, std=0.02 / math.sqrt(2 * depth) if residual_out else 0.02)


def sample_next(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    top_p: float | None = None,
) -> Tensor:
    """Draw one token per row from logits (b, v): temperature 0 is greedy, top_k keeps the k likeliest, top_p
    the nucleus (see :func:`nucleus`); ``generator``: draw from it instead of the global random stream."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)  # (b, 1)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]  # (b, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        logits = logits.masked_fill(~nucleus(logits, top_p), float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), num_samples=1, generator=generator)  # (b, 1)


def nucleus(logits: Tensor, p: float) -> Tensor:
    """Nucleus (top-p) sampling's set, Holtzman et al. 2020: per row of logits (b, v), the fewest likeliest
    tokens whose probabilities sum to at least p; returned as a mask (b, v). The likeliest token is always in."""
    probs, order = logits.softmax(dim=-1).sort(dim=-1, descending=True)
    keep = probs.cumsum(dim=-1) - probs < p  # the mass of the likelier tokens has not reached p yet
    return torch.zeros_like(keep).scatter(-1, order, keep)


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None = None) -> None:
    if temperature < 0:
        raise ValueError(f"temperature {temperature} < 0; use 0 for greedy decoding or a positive value")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k {top_k} < 1; use a positive count or None for no cut-off")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p {top_p} must lie in (0, 1]; 0.9 keeps the likeliest tokens that make up 90 %")


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    m = mask[..., None].to(x.dtype)  # (b, t, 1)
    return (x * m).sum(1) / m.sum(1).clamp(min=1.0)  # (b, k); a row of padding only pools to zeros


def _masked_max(x: Tensor, mask: Tensor) -> Tensor:
    m = mask[..., None]  # (b, t, 1)
    pooled = x.masked_fill(~m, float("-inf")).amax(1)  # (b, k)
    return torch.where(m.any(1), pooled, torch.zeros_like(pooled))


def _first(x: Tensor, mask: Tensor) -> Tensor:
    return x[:, 0]  # (b, k): the output at the [CLS] position


POOLS = {"mean": _masked_mean, "max": _masked_max, "cls": _first}


class SequenceClassifier(nn.Module):
    """Token ids -> class logits: embeddings and positions, a stack of blocks, pooling over the sequence,
    a linear layer (experiment 1 of the tutorial)."""

    def __init__(self, cfg: ClassifierConfig) -> None:
        super().__init__()
        self.cfg = cfg
        prefix = int(cfg.pool == "cls")  # a [CLS] vector takes one position in front of the context's tokens
        self.embed = Embedding(cfg.vocab_size, cfg.context + prefix, cfg.emb, cfg.positions, cfg.dropout)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.emb)) if cfg.pool == "cls" else None
        self.stack = Stack(cfg, cfg.depth)
        self.head = nn.Linear(cfg.emb, cfg.num_classes)
        init_weights(self, cfg.depth)

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """ids: (b, t); mask: (b, t) bool, True for real tokens (None: no padding). Returns (b, c)."""
        b, t = ids.shape
        prefix = None if self.cls is None else self.cls.expand(b, -1, -1)  # (b, 1, k)
        if mask is not None and prefix is not None:
            mask = torch.cat([mask.new_ones(b, 1), mask], dim=1)  # (b, 1 + t): [CLS] is always real
        x = self.stack(self.embed(ids, prefix=prefix), key_mask=mask)  # (b, t', k)
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
        self.embed = Embedding(cfg.vocab_size, cfg.context, cfg.emb, cfg.positions, cfg.dropout)
        self.stack = Stack(cfg, cfg.depth)
        self.head = nn.Linear(cfg.emb, cfg.vocab_size)
        init_weights(self, cfg.depth)
        self.head.weight = self.embed.tokens.weight  # (v, k): one matrix reads and writes tokens

    def forward(self, ids: Tensor, mask: Tensor | None = None, chosen: Tensor | None = None) -> Tensor:
        """ids: (b, t), masked; mask: (b, t) bool, True for real tokens. Returns token logits (b, t, v), or with
        ``chosen`` (b, t) bool, those of the chosen positions only, (n, v): the output layer is the largest
        matmul, and pretraining scores 15 % of the positions."""
        x = self.stack(self.embed(ids), key_mask=mask)  # (b, t, k)
        return self.head(x if chosen is None else x[chosen])  # (b, t, v) or (n, v)


ENCODER_SIZES = ("context", "emb", "heads", "depth", "ff_mult", "activation", "pre_norm", "positions")
"""What a pretrained encoder and the classifier it starts must share (besides the vocabulary)."""


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
        self.embed = Embedding(cfg.vocab_size, cfg.context, cfg.emb, cfg.positions, cfg.dropout)
        self.stack = Stack(cfg, cfg.depth, causal=True)
        self.head = nn.Linear(cfg.emb, cfg.vocab_size, bias=False)
        init_weights(self, cfg.depth)
        if cfg.tie_weights:
            self.head.weight = self.embed.tokens.weight  # one (v, k) matrix reads and writes tokens

    def forward(self, ids: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        """ids: (b, t) -> next-token logits (b, t, v). With caches, ids continue the cached sequence."""
        offset = caches[0].offset if caches else 0
        return self.head(self.stack(self.embed(ids, offset), caches=caches))  # (b, t, v)

    def new_caches(self, batch: int) -> list[KVCache]:
        """Empty key/value caches, one per block, for ``batch`` sequences of up to the context."""
        return empty_caches(self.cfg, self.cfg.depth, batch, self.cfg.context, self.head.weight)

    @torch.inference_mode()
    def generate(
        self,
        prompt: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        top_p: float | None = None,
        cuda_graph: bool = False,
    ) -> Tensor:
        """Continue prompt (b, t) by max_new_tokens; returns (b, t + max_new_tokens). Sampling as in
        :func:`sample_next`. ``cuda_graph`` (GPU, with the cache): each one-token step is one CUDA graph
        replay (:class:`GraphedStep`).

        The model sees at most ``context`` tokens: the newest window. With ``use_cache`` each step feeds only
        the newest token and attends over cached keys and values, which gives exactly the tokens of
        recomputing the window while the sequence fits the context. Once the cache is full, the newest half
        context is re-encoded and caching goes on from there (positions are absolute, so a cache cannot
        slide); the model then sees between half and all of the context, where recomputation would always
        see all of it.
        """
        _check_sampling(temperature, top_k, top_p)
        if prompt.numel() == 0:
            raise ValueError("empty prompt; give at least one token to condition on")
        if cuda_graph and (prompt.device.type != "cuda" or not use_cache):
            raise ValueError(
                f"cuda_graph replays the cached one-token step on a GPU; this call has the model on "
                f"{prompt.device.type} and use_cache {use_cache}: move it to a GPU with the cache on, or leave "
                "cuda_graph off"
            )
        context, was_training = self.cfg.context, self.training
        self.eval()
        b, t = prompt.shape
        tokens = prompt.new_empty(b, t + max_new_tokens)  # written in place: no growing concatenation
        tokens[:, :t] = prompt
        caches, step = None, None
        with decoding_threads(prompt.device, use_cache):
            for end in range(t, t + max_new_tokens):  # tokens[:, :end] are known
                if not use_cache:
                    logits = self(tokens[:, max(0, end - context) : end])
                elif caches is None or caches[0].len == context:
                    keep = min(end, context if caches is None else max(1, context // 2))
                    caches = caches or self.new_caches(b)
                    for cache in caches:
                        cache.len = 0  # the same buffers, refilled
                    logits = self(tokens[:, end - keep : end], caches)  # the newest window
                elif cuda_graph:
                    step = step or GraphedStep(self, caches)
                    logits = step(tokens[:, end - 1 : end])  # one new position, one replay
                else:
                    logits = self(tokens[:, end - 1 : end], caches)  # one new position
                tokens[:, end] = sample_next(logits[:, -1], temperature, top_k, generator, top_p)[:, 0]
        self.train(was_training)
        return tokens


class GraphedStep:
    """A causal model's one-token decoding step over its caches, captured once as a CUDA graph and then
    replayed: a step costs the host a few launches instead of one per operation (hundreds), and those
    launches are what a batch-1 step on a GPU waits on.

    A graph replays fixed kernels on fixed memory, so the step runs with the caches in static mode: the
    position is a tensor on the device (:attr:`KVCache.at`) and attention reads the whole cache buffer
    through a mask of the keys written so far. The same buffers stay in use when the model re-encodes its
    window. ``graph=False`` runs the same static step without capturing it (the tests compare it on a CPU).
    """

    def __init__(self, model: CausalLM, caches: list[KVCache], graph: bool = True) -> None:
        self.model, self.caches = model, caches
        device = caches[0].k.device
        self.ids = torch.zeros(caches[0].k.size(0), 1, dtype=torch.long, device=device)  # (b, 1) the input
        self.at = torch.full((), caches[0].len, dtype=torch.long, device=device)  # its position
        self.graph, self.logits = None, None
        if graph:  # warm up on a side stream (lazy initialisations must not be captured), then capture
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._forward()  # writes at the next position, which the first real step overwrites
            torch.cuda.current_stream(device).wait_stream(stream)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.logits = self._forward()  # (b, 1, v), rewritten by every replay

    def _forward(self) -> Tensor:
        seen = torch.arange(self.caches[0].capacity, device=self.at.device) <= self.at  # (u,) keys written
        for cache in self.caches:
            cache.at, cache.seen = self.at, seen
        try:
            return self.model(self.ids, self.caches)
        finally:
            for cache in self.caches:
                cache.at = cache.seen = None

    def __call__(self, ids: Tensor) -> Tensor:
        """ids (b, 1) at the caches' next position -> logits (b, 1, v); the caches grow by one position."""
        if self.caches[0].len >= self.caches[0].capacity:
            raise ValueError(f"the KV cache is full ({self.caches[0].capacity} positions); re-encode the window")
        self.ids.copy_(ids)
        self.at.fill_(self.caches[0].len)
        if self.graph is None:
            logits = self._forward()
        else:
            self.graph.replay()
            logits = self.logits
        for cache in self.caches:
            cache.len += 1
        return logits


@contextmanager
def decoding_threads(device: torch.device, cached: bool):
    """Cached decoding on a CPU runs on one thread. A one-token step is a chain of tiny operations: sharing
    each between threads costs more in synchronisation than it saves, and when the machine is busy every
    step waits for the slowest thread. Training and recomputation keep all threads."""
    if device.type != "cpu" or not cached or torch.get_num_threads() == 1:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class EncoderDecoder(nn.Module):
    """Encoder-decoder transformer (Vaswani et al. 2017): a bidirectional encoder reads the source; a
    causal decoder reads the target so far and attends to the encoder output through cross-attention.

    ``PAD``, ``BOS`` and ``EOS`` are the ids that training data and decoding agree on: padding, the begin id
    every target starts from, and the end id that closes it."""

    PAD, BOS, EOS = 0, 1, 2

    def __init__(self, cfg: EncoderDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.src_embed = Embedding(cfg.vocab_size, cfg.context, cfg.emb, cfg.positions, cfg.dropout)
        self.tgt_embed = (
            self.src_embed
            if cfg.shared_vocab
            else Embedding(cfg.tgt_vocab_size, cfg.context, cfg.emb, cfg.positions, cfg.dropout)
        )
        self.encoder = Stack(cfg, cfg.depth)
        self.decoder = Stack(cfg, cfg.decoder_depth, causal=True, cross=True)
        self.head = nn.Linear(cfg.emb, cfg.tgt_vocab_size, bias=False)
        init_weights(self, cfg.depth + cfg.decoder_depth)
        self.head.weight = self.tgt_embed.tokens.weight  # with a shared vocabulary: one matrix for all three

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src: (b, u) ids, src_mask: (b, u) True = real token -> memory (b, u, k)."""
        return self.encoder(self.src_embed(src), key_mask=src_mask)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor | None,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        caches: list[KVCache] | None = None,
        memory_kvs: list | None = None,
    ) -> Tensor:
        """tgt: (b, t) target so far -> logits (b, t, v) for the token after each position. With caches, tgt
        continues the cached target; memory_kvs (from :meth:`memory_kvs`) stand in for the memory."""
        x = self.tgt_embed(tgt, caches[0].offset if caches else 0)  # (b, t, k)
        h = self.decoder(x, caches, memory_kvs, key_mask=tgt_mask, memory=memory, memory_mask=src_mask)
        return self.head(h)

    def memory_kvs(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Every decoder block's cross-attention keys and values of the encoder output: once per source."""
        return [block.cross.memory_kv(memory) for block in self.decoder.blocks]

    def new_caches(self, batch: int, length: int) -> list[KVCache]:
        """Empty self-attention caches, one per decoder block, for ``batch`` targets of up to ``length``."""
        return empty_caches(self.cfg, self.cfg.decoder_depth, batch, length, self.head.weight)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None):
        """Teacher forcing: tgt is the target shifted right (starting with BOS); returns (b, t, v)."""
        return self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask)

    @torch.inference_mode()
    def generate(
        self,
        src: Tensor,
        bos_id: int,
        max_new_tokens: int,
        src_mask: Tensor | None = None,
        eos_id: int | None = None,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        use_cache: bool = True,
    ) -> Tensor:
        """Decode token by token from BOS: greedy by default, sampled with temperature > 0 (top_k, top_p as in
        :func:`sample_next`).

        The source is encoded once. With ``use_cache`` each step feeds only the newest token: the decoder's
        self-attention reads its keys and values from a cache, and cross-attention reads keys and values of
        the memory projected once per source; without it, every step decodes the whole target so far.

        Returns (b, n) generated ids without BOS; n < max_new_tokens when every row has emitted eos_id.
        """
        _check_sampling(temperature, top_k, top_p)
        was_training = self.training
        self.eval()
        memory = self.encode(src, src_mask)  # (b, u, k): encoded once, read at every step
        out = torch.full((src.size(0), 1 + max_new_tokens), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        caches = self.new_caches(src.size(0), max_new_tokens) if use_cache else None
        kvs = self.memory_kvs(memory) if use_cache else None
        end = 1  # out[:, :end] is decoded (BOS first); written in place
        while end <= max_new_tokens:
            if use_cache:
                logits = self.decode(out[:, end - 1 : end], None, src_mask, caches=caches, memory_kvs=kvs)[:, -1]
            else:
                logits = self.decode(out[:, :end], memory, src_mask)[:, -1]  # (b, v)
            nxt = sample_next(logits, temperature, top_k, top_p=top_p)[:, 0]  # (b,)
            out[:, end] = nxt
            end += 1
            if eos_id is not None:
                done |= nxt == eos_id
                if done.all():
                    break
        self.train(was_training)
        return out[:, 1:end]


def empty_caches(cfg, blocks: int, batch: int, length: int, like: Tensor) -> list[KVCache]:
    """One empty key/value cache per block, of ``length`` positions, in the dtype and device of ``like``."""
    width = cfg.emb // cfg.heads
    return [KVCache(batch, cfg.heads, length, width, like.dtype, like.device) for _ in range(blocks)]


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

"""Generation: sampling a token (temperature, top-k, top-p), decoding loops with and without the key/value cache, and
the CUDA-graph decoding step, which the models' ``generate`` methods call. Shapes: b batch, t length, v vocabulary."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from ..bounds import NonNegative, NonNegativeFloat, Positive, Share, check_args
from .cache import KVCache

OVERFLOW = "the model's scores are not finite (NaN or inf): its weights are so large that they overflow"


def sample_next(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
                generator: torch.Generator | None = None, top_p: float | None = None,
                best: Tensor | None = None) -> Tensor:  # fmt: skip
    """One token per row of logits (b, v): temperature 0 is greedy (its scores written to ``best`` (b,): NaN where
    any score is), top_k keeps the k likeliest, top_p the nucleus (:func:`nucleus`); ``generator``: draw from it."""
    if temperature == 0:
        scores, tokens = logits.max(dim=-1, keepdim=True)  # (b, 1)
        if best is not None:
            best.copy_(scores[:, 0])
        return tokens
    # less the row's largest, over a temperature of at least the dtype's smallest: the same softmax, and a
    # temperature as small as 1e-320 is greedy, where logits / temperature would give inf - inf or 0 / 0 = NaN
    temperature = max(temperature, torch.finfo(logits.dtype).tiny)
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]  # (b, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        logits = logits.masked_fill(~nucleus(logits, top_p), float("-inf"))
    probs = logits.softmax(dim=-1)
    try:  # torch checks the probabilities (one wait on a GPU): NaN where the scores overflowed, a traceback
        return torch.multinomial(probs, num_samples=1, generator=generator)  # (b, 1)
    except RuntimeError:
        if probs.isfinite().all():
            raise
        raise FloatingPointError(OVERFLOW) from None


def nucleus(logits: Tensor, p: float) -> Tensor:
    """Nucleus (top-p) sampling's set, Holtzman et al. 2020: per row of logits (b, v), the fewest likeliest
    tokens whose probabilities sum to at least p; returned as a mask (b, v). The likeliest token is always in."""
    probs, order = logits.softmax(dim=-1).sort(dim=-1, descending=True)
    keep = probs.cumsum(dim=-1) - probs < p  # the mass of the likelier tokens has not reached p yet
    keep[..., 0] = True  # even for a p of 1e-320, which is 0 in float32
    return torch.zeros_like(keep).scatter(-1, order, keep)


@torch.inference_mode()
def generate(model, prompt: Tensor, max_new_tokens: NonNegative, *, temperature: NonNegativeFloat = 1.0,
             top_k: Positive | None = None, use_cache: bool = True, generator: torch.Generator | None = None,
             top_p: Share | None = None, cuda_graph: bool = False,
             steps: Callable | None = None) -> Tensor:  # fmt: skip
    """A causal model continues prompt (b, t) by max_new_tokens: (b, t + max_new_tokens), sampled as in
    :func:`sample_next`. ``steps(model, tokens, t, use_cache, cuda_graph)`` makes the function from ``end`` to
    the logits (b, v) after ``tokens[:, :end]``: :func:`causal_steps`, or Transformer-XL's through its memory."""
    check_args(generate, locals(), "generate")  # the bounds on the parameters' types
    if prompt.numel() == 0:
        raise ValueError("empty prompt; give at least one token to condition on")
    was_training = model.training
    model.eval()
    b, t = prompt.shape
    tokens = prompt.new_empty(b, t + max_new_tokens)  # written in place: no growing concatenation
    tokens[:, :t] = prompt
    next_logits = (steps or causal_steps)(model, tokens, t, use_cache, cuda_graph)
    best = tokens.new_empty(b, max_new_tokens, dtype=torch.float)  # greedy's chosen scores, checked at the end
    with decoding_threads(prompt.device, use_cache):
        for end in range(t, t + max_new_tokens):  # tokens[:, :end] are known; sampling checks its probabilities
            tokens[:, end] = sample_next(next_logits(end), temperature, top_k, generator, top_p, best[:, end - t])[:, 0]
    model.train(was_training)
    if temperature == 0 and not best.isfinite().all():
        raise FloatingPointError(OVERFLOW)
    return tokens


def causal_steps(model, tokens: Tensor, t: int, use_cache: bool, cuda_graph: bool) -> Callable[[int], Tensor]:
    """How a causal language model gives the next token's logits from the newest ``context`` tokens. With
    ``use_cache`` each step feeds the newest token alone over the cached keys and values: exactly recomputation's
    tokens while the sequence fits the context. A full cache re-encodes the newest half context and goes on
    (positions are absolute: a cache cannot slide), so the model then sees half to all of the context.
    ``cuda_graph`` (GPU, cached): each one-token step is one replay of a :class:`GraphedStep`."""
    if cuda_graph and (tokens.device.type != "cuda" or not use_cache):
        raise ValueError(f"cuda_graph replays the cached one-token step on a GPU, and here the model is on "
                         f"{tokens.device.type}{'' if use_cache else ' with no cache'}; leave cuda_graph off (or run "
                         "on a GPU with the cache on)")  # fmt: skip
    context, b = model.cfg.context, tokens.size(0)
    caches: list[KVCache] | None = None
    step: GraphedStep | None = None

    def next_logits(end: int) -> Tensor:
        nonlocal caches, step
        if not use_cache:
            return model(tokens[:, max(0, end - context) : end])[:, -1]
        if caches is None or caches[0].len == context:
            keep = min(end, context if caches is None else max(1, context // 2))
            caches = caches or model.new_caches(b)
            for cache in caches:
                cache.len = 0  # the same buffers, refilled
            return model(tokens[:, end - keep : end], caches)[:, -1]  # the newest window
        if cuda_graph:
            step = step or GraphedStep(model, caches)
            return step(tokens[:, end - 1 : end])[:, -1]  # one new position, one replay
        return model(tokens[:, end - 1 : end], caches)[:, -1]  # one new position

    return next_logits


class GraphedStep:
    """A causal model's one-token step over its caches, captured once as a CUDA graph and replayed: a few host
    launches instead of hundreds, which a batch-1 step on a GPU waits on. A graph replays fixed kernels on fixed
    memory, so the caches run in static mode: the position is a device tensor (:attr:`KVCache.at`), and attention
    reads the whole buffer through a mask of the keys written. ``graph=False``: the same step, not captured."""

    def __init__(self, model: nn.Module, caches: list[KVCache], graph: bool = True) -> None:
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
            assert self.logits is not None  # written by the captured forward
            logits = self.logits
        for cache in self.caches:
            cache.len += 1
        return logits


@contextmanager
def decoding_threads(device: torch.device, cached: bool):
    """Cached decoding on a CPU runs on one thread: a one-token step is a chain of tiny operations, which threads
    slow down (each waits for the slowest). Training and recomputation keep all threads."""
    if device.type != "cpu" or not cached or torch.get_num_threads() == 1:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@torch.inference_mode()
def generate_seq2seq(model, src: Tensor, *, bos_id: int, max_new_tokens: NonNegative, src_mask: Tensor | None = None,
                     eos_id: int | None = None, temperature: NonNegativeFloat = 0.0, top_k: Positive | None = None,
                     top_p: Share | None = None, use_cache: bool = True) -> Tensor:  # fmt: skip
    """An encoder-decoder model decodes from BOS, greedy or sampled as in :func:`sample_next`; the
    source is encoded once. With ``use_cache`` a step feeds the newest token alone: self-attention reads a cache,
    cross-attention the memory's keys and values projected once; without it, each step decodes the whole target.
    Returns (b, n) ids without BOS; n < max_new_tokens when every row has emitted eos_id."""
    check_args(generate_seq2seq, locals(), "generate")
    was_training = model.training
    model.eval()
    memory = model.encode(src, src_mask)  # (b, u, k): encoded once, read at every step
    out = torch.full((src.size(0), 1 + max_new_tokens), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    caches = model.new_caches(src.size(0), max_new_tokens) if use_cache else None
    kvs = model.memory_kvs(memory) if use_cache else None
    best = memory.new_zeros(src.size(0), max_new_tokens, dtype=torch.float)  # greedy's chosen scores, as generate's
    for end in range(1, 1 + max_new_tokens):  # out[:, :end] is decoded (BOS first); written in place
        fed = out[:, end - 1 : end] if use_cache else out[:, :end]  # the newest token over the caches, or all
        logits = model.decode(fed, None if use_cache else memory, src_mask, caches=caches, memory_kvs=kvs)[:, -1]
        out[:, end] = sample_next(logits, temperature, top_k, top_p=top_p, best=best[:, end - 1])[:, 0]
        if eos_id is not None and (done := done | (out[:, end] == eos_id)).all():
            out = out[:, : end + 1]  # every row has ended
            break
    model.train(was_training)
    if temperature == 0 and not best.isfinite().all():
        raise FloatingPointError(OVERFLOW)
    return out[:, 1:]

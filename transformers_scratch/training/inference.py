"""Using what ``fit`` trained: text continued by a character model, sources decoded by an encoder-decoder, and
the vocabulary an export carries. The command line parses, checks and prints; the work is here."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data import ByteVocab, WordVocab, transduction
from ..data.ids import IGNORE_INDEX
from ..data.vocab import TokenizerVocab
from .modules import LN2, BitsPerByte, LitCharLM, LitSeq2Seq, LitTransformer

SAMPLE_PIECE = 2_000  # longer samples are generated in pieces of this length, with progress on stderr


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def continue_text(module: LitCharLM, vocab: ByteVocab, prompt: str, length: int, num_samples: int = 1,
                  seed: int | None = None, **options) -> list[str]:  # fmt: skip
    """``num_samples`` continuations of ``prompt`` by ``length`` characters, drawn together; ``options`` go to
    :func:`~transformers_scratch.model.generation.generate` (temperature, top_k, top_p, use_cache, cuda_graph)."""
    model = module.model.to(device())
    out = vocab.encode_text(prompt).to(device()).expand(num_samples, -1)  # (n, t): one row a sample
    generator = None if seed is None else torch.Generator(device()).manual_seed(seed)
    left = length
    while left:
        n = min(left, SAMPLE_PIECE)
        out = model.generate(out, n, generator=generator, **options)
        left -= n
        if length > SAMPLE_PIECE:
            print(f"sampled {length - left:,} of {length:,} characters", file=sys.stderr, flush=True)
    return [vocab.decode(row.cpu()) for row in out]


def decode_sources(module: LitSeq2Seq, sources: list[str], batch_size: int):
    """Greedy outputs of an encoder-decoder for ``sources`` (known characters, none longer than the model's
    context: the decode command checks them), a batch at a time (yields lists of outputs)."""
    module = module.to(device())
    for i in range(0, len(sources), batch_size):
        src, mask, _, _ = transduction.collate([(s, "") for s in sources[i : i + batch_size]])
        out = module.greedy(src.to(device()), mask.to(device()), module.model.cfg.context)  # refuses an overflow
        yield [transduction.decode(row.tolist()) for row in out.cpu()]


@torch.no_grad()
def loss_by_position(module: BitsPerByte, loader, limit: int | None = None) -> tuple[Tensor, Tensor]:
    """Bits and bytes scored at each position of the window (or a Transformer-XL's segment), summed over the
    batches of ``loader`` (the first ``limit``): the very terms of ``test``'s bits per byte (its ``logits_of``,
    its targets, the same cross-entropy), kept apart by where the byte stands in its window. Position i (from 0)
    is predicted from the i + 1 bytes of the window up to it (and, for Transformer-XL, its memory)."""
    module = module.to(device()).eval()
    bits: Tensor | None = None
    counts: Tensor | None = None
    for n, batch in enumerate(loader):
        if limit is not None and n >= limit:
            break
        batch = [b.to(device()) if isinstance(b, Tensor) else b for b in batch]
        logits, y = module.logits_of(batch, training=False)  # (b, t, v), (b, t)
        nats = F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none", ignore_index=IGNORE_INDEX)
        scored = y != IGNORE_INDEX
        if bits is None or counts is None:
            bits, counts = torch.zeros(y.size(1), dtype=torch.float64), torch.zeros(y.size(1), dtype=torch.long)
        bits[: y.size(1)] += (nats / LN2).sum(0).double().cpu()
        counts[: y.size(1)] += scored.sum(0).cpu()
    if bits is None or counts is None or not counts.sum():
        raise ValueError("the split holds no window to score; pass a longer text or a shorter context")
    return LitTransformer.finite(bits), counts  # refused where the mean would print as NaN bits per byte


def log_bins(length: int, bins: int) -> list[tuple[int, int]]:
    """[first, last] positions (counted from 1) of up to ``bins`` bins spaced evenly on a log scale over
    1 .. length, none empty."""
    starts = sorted({round(length ** (k / bins)) for k in range(bins)})
    return [(lo, hi - 1) for lo, hi in zip(starts, starts[1:], strict=False)] + [(starts[-1], length)]


def export_vocab(module: LitTransformer, vocab) -> dict:
    """The ``vocab`` entry of an export's config.json: bytes (null: all 256), words after <pad> and <unk>, a
    tokenizer's file, or the transduction tasks' specials and alphabet."""
    if isinstance(module, LitSeq2Seq):
        return {"specials": ["<pad>", "<bos>", "<eos>"][: transduction.SPECIALS], "alphabet": transduction.ALPHABET}
    if isinstance(vocab, WordVocab):
        return {"words": vocab.itos[2:]}
    if isinstance(vocab, TokenizerVocab):
        return {"tokenizer": "tokenizer.json"}  # written beside it
    return {"bytes": None if vocab is None or vocab.symbols is None else list(vocab.symbols)}

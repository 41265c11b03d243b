"""Positions beyond the tutorial: rotary embeddings (RoPE) and linear biases (ALiBi) next to learned and
sinusoidal, with the KV cache and both kernels, and sequences longer than the training context."""

import pytest
import torch
from torch.testing import assert_close

from transformers_scratch import (
    CausalLM,
    ClassifierConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
    LMConfig,
    SequenceClassifier,
)
from transformers_scratch.model.attention import MultiHeadAttention
from transformers_scratch.model.positions import alibi_bias, alibi_slopes, rotate

KINDS = ["learned", "sinusoidal", "rope", "alibi"]
SMALL = dict(vocab_size=30, context=16, emb=32, heads=4, depth=2)


def test_rope_scores_depend_only_on_the_offset_between_query_and_key():
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 1, 1, 8)  # one query and one key vector, (b, h, t, s) each

    def score(m: int, n: int) -> torch.Tensor:
        return (rotate(q, offset=m) * rotate(k, offset=n)).sum()

    for gap in (0, 1, 5):
        same = [score(n + gap, n) for n in (0, 3, 40, 1000)]
        assert_close(torch.stack(same), same[0].expand(4), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(score(5, 0), score(6, 0))  # a different offset, a different score
    assert torch.equal(rotate(q, 0), q)  # position 0 does not turn
    assert_close(rotate(q, 7).norm(), q.norm())  # a rotation: lengths kept


def test_alibi_has_the_published_slopes():
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]  # 1/2, 1/4, ..., 1/256
    assert alibi_slopes(4).tolist() == [2.0**-i for i in (2, 4, 6, 8)]
    # not a power of two: 4 heads' slopes, then every other one of 8 heads'
    assert alibi_slopes(6).tolist() == [2.0**-i for i in (2, 4, 6, 8, 1, 3)]
    bias = alibi_bias(torch.tensor([0.5]), t=2, u=4, offset=2)  # one head; queries at positions 2 and 3
    assert bias[0, 0].tolist() == [[-1.0, -0.5, 0.0, -0.5], [-1.5, -1.0, -0.5, 0.0]]  # slope 1/2 x distance


@pytest.mark.parametrize("positions", KINDS)
def test_cached_generation_equals_recomputation_for_every_position_kind(positions):
    torch.manual_seed(0)
    model = CausalLM(LMConfig(**SMALL, positions=positions))
    prompt = torch.randint(0, 30, (2, 3))
    cached = model.generate(prompt, 12, temperature=0, use_cache=True)  # within the context
    assert torch.equal(cached, model.generate(prompt, 12, temperature=0, use_cache=False))


@pytest.mark.parametrize("positions", KINDS)
def test_feeding_a_cache_token_by_token_gives_the_logits_of_one_pass(positions):
    torch.manual_seed(0)
    model = CausalLM(LMConfig(**SMALL, positions=positions)).eval()
    ids, caches = torch.randint(0, 30, (2, 16)), model.new_caches(2)
    with torch.no_grad():
        stepped = torch.cat([model(ids[:, :5], caches)] + [model(ids[:, i : i + 1], caches) for i in range(5, 16)], 1)
        assert_close(stepped, model(ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", KINDS)
def test_both_kernels_agree_for_every_position_kind(positions):
    torch.manual_seed(0)
    ids, mask = torch.randint(0, 30, (2, 10)), torch.ones(2, 10, dtype=torch.bool)
    mask[1, 6:] = False  # padding
    outputs = []
    for attention in ("reference", "sdpa"):
        torch.manual_seed(1)
        lm = CausalLM(LMConfig(**SMALL, positions=positions, attention=attention))
        torch.manual_seed(1)
        classifier = SequenceClassifier(ClassifierConfig(**SMALL, positions=positions, attention=attention))
        torch.manual_seed(1)
        seq2seq = EncoderDecoder(EncoderDecoderConfig(**SMALL, positions=positions, attention=attention))
        outputs.append((lm(ids), classifier(ids, mask), classifier(ids), seq2seq(ids, ids[:, :7], mask)))
    for reference, fused in zip(*outputs, strict=True):
        assert_close(fused, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "rope", "alibi"])
def test_relative_and_fixed_positions_run_past_the_context(positions):
    torch.manual_seed(0)
    model = CausalLM(LMConfig(**SMALL, positions=positions)).eval()
    ids = torch.randint(0, 30, (1, 64))  # 4x the context of 16
    long = model(ids)
    assert long.shape == (1, 64, 30) and long.isfinite().all()
    assert_close(long[:, :16], model(ids[:, :16]), atol=1e-5, rtol=1e-5)  # causal: the first window unchanged


def test_rope_needs_an_even_head_width_and_relative_kinds_add_no_vectors():
    with pytest.raises(ValueError, match="head width 5 must be even"):
        CausalLM(LMConfig(vocab_size=30, context=8, emb=20, heads=4, depth=1, positions="rope"))
    for positions in ("rope", "alibi"):
        model = CausalLM(LMConfig(**SMALL, positions=positions))
        assert model.embed.positions is None
        assert not any("positions" in name for name in model.state_dict())  # nothing learned, nothing saved


@pytest.mark.parametrize("attention", ["sdpa", "reference"])
@pytest.mark.parametrize("positions", KINDS)
def test_encoder_decoder_cached_decoding_equals_recomputation(positions, attention):
    """Decoder self-attention from a cache and cross-attention keys/values projected once give the logits of
    decoding the whole target at every step, and so the same greedy output, with a padded source."""
    torch.manual_seed(0)
    model = EncoderDecoder(EncoderDecoderConfig(**SMALL, positions=positions, attention=attention)).eval()
    src = torch.randint(3, 30, (3, 9))
    src_mask = torch.ones(3, 9, dtype=torch.bool)
    src_mask[1, 6:] = src_mask[2, 2:] = False  # padded sources
    tgt = torch.randint(3, 30, (3, 12))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        whole = model.decode(tgt, memory, src_mask)  # (3, 12, v)
        caches, kvs = model.new_caches(3, 12), model.memory_kvs(memory)
        steps = [model.decode(tgt[:, i : i + 1], None, src_mask, caches=caches, memory_kvs=kvs) for i in range(12)]
    assert_close(torch.cat(steps, dim=1), whole, rtol=1e-4, atol=1e-5)
    cached = model.generate(src, bos_id=1, max_new_tokens=12, src_mask=src_mask)
    assert torch.equal(cached, model.generate(src, bos_id=1, max_new_tokens=12, src_mask=src_mask, use_cache=False))


def test_cross_attention_projects_the_memory_once_per_source(monkeypatch):
    model = EncoderDecoder(EncoderDecoderConfig(**SMALL)).eval()
    calls = []
    real = MultiHeadAttention.memory_kv
    monkeypatch.setattr(MultiHeadAttention, "memory_kv", lambda self, m: calls.append(1) or real(self, m))
    src = torch.randint(3, 30, (2, 9))
    model.generate(src, bos_id=1, max_new_tokens=10)
    assert len(calls) == SMALL["depth"]  # once per decoder block, not once per step
    calls.clear()
    model.generate(src, bos_id=1, max_new_tokens=10, use_cache=False)
    assert len(calls) == SMALL["depth"] * 10

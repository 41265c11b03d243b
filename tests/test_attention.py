"""Attention is exactly right: the fused path equals the reference, masks hold, symmetries hold."""

import pytest
import torch
from torch.testing import assert_close

from transformers_scratch import (
    KVCache,
    LMConfig,
    MultiHeadAttention,
    basic_self_attention,
    causal_mask,
    count_parameters,
    fused_attention,
    reference_attention,
)

B, H, S = 3, 4, 8  # batch, heads, head width


def qkv(t, u, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, t, S, generator=g, dtype=dtype)
    k = torch.randn(B, H, u, S, generator=g, dtype=dtype)
    v = torch.randn(B, H, u, S, generator=g, dtype=dtype)
    return q, k, v


def padding(u, lengths=(5, 2, 7)):
    """(B, 1, 1, u) key-padding mask with a different number of real keys per row."""
    return (torch.arange(u)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


CASES = {
    "no mask": dict(t=7, u=7, mask=None, causal=False),
    "causal": dict(t=7, u=7, mask=None, causal=True),
    "padding": dict(t=7, u=7, mask=padding(7), causal=False),
    "causal + padding": dict(t=7, u=7, mask=padding(7), causal=True),
    "cross, different lengths": dict(t=5, u=9, mask=None, causal=False),
    "cross + padding": dict(t=5, u=9, mask=padding(9, (9, 3, 6)), causal=False),
    "causal over a cache (t < u)": dict(t=3, u=9, mask=None, causal=True),
    "one query over a cache": dict(t=1, u=9, mask=None, causal=True),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_fused_equals_reference(case):
    q, k, v = qkv(case["t"], case["u"])
    ref = reference_attention(q, k, v, case["mask"], case["causal"])
    assert_close(fused_attention(q, k, v, case["mask"], case["causal"]), ref)


def test_reference_is_the_formula():
    """softmax(q k^T / sqrt(s)) v, computed independently, with masked keys given zero weight."""
    q, k, v = qkv(6, 6)
    mask = padding(6, (6, 4, 1))
    scores = torch.einsum("bhts,bhus->bhtu", q, k) / S**0.5
    weights = torch.exp(scores - scores.amax(-1, keepdim=True)) * mask
    expected = torch.einsum("bhtu,bhus->bhts", weights / weights.sum(-1, keepdim=True), v)
    assert_close(reference_attention(q, k, v, mask), expected)


def test_causal_mask_alignment():
    assert torch.equal(causal_mask(3, 3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    # Two new queries at positions 3 and 4 of a 5-long sequence.
    assert torch.equal(causal_mask(2, 5), torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool))


@pytest.mark.parametrize("fn", [reference_attention, fused_attention])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fully_masked_rows_are_zero_and_finite(fn, dtype):
    q, k, v = (x.requires_grad_() for x in qkv(4, 6, dtype))
    mask = padding(6, (3, 0, 6))  # row 1 has no key at all
    out = fn(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    out.float().square().sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))
    assert torch.equal(q.grad[1], torch.zeros_like(q.grad[1]))


@pytest.mark.gpu
@pytest.mark.parametrize("fn", [reference_attention, fused_attention])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fully_masked_rows_are_finite_on_gpu(fn, dtype):
    q, k, v = (x.cuda().requires_grad_() for x in qkv(4, 6, dtype))
    mask = padding(6, (3, 0, 6)).cuda()
    out = fn(q, k, v, mask)
    out.float().square().sum().backward()
    assert torch.isfinite(out).all() and torch.equal(out[1], torch.zeros_like(out[1]))
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))


def test_basic_self_attention_is_permutation_equivariant():
    x = torch.randn(2, 9, 16)
    perm = torch.randperm(9)
    assert_close(basic_self_attention(x[:, perm]), basic_self_attention(x)[:, perm])


def test_basic_self_attention_weights_rows_sum_to_one():
    """Each output is a convex combination of the inputs: it lies inside their per-coordinate range."""
    x = torch.randn(2, 9, 16)
    y = basic_self_attention(x)
    assert (y <= x.amax(1, keepdim=True) + 1e-6).all() and (y >= x.amin(1, keepdim=True) - 1e-6).all()


@pytest.mark.parametrize("impl", ["reference", "sdpa"])
def test_multi_head_attention_is_permutation_equivariant(impl):
    mha = MultiHeadAttention(32, 4, impl=impl)
    x = torch.randn(2, 9, 32)
    perm = torch.randperm(9)
    assert_close(mha(x[:, perm]), mha(x)[:, perm])


@pytest.mark.parametrize("heads", [1, 2, 4, 8, 16])
def test_parameter_count_does_not_depend_on_heads(heads):
    k = 64
    assert count_parameters(MultiHeadAttention(k, heads)) == 4 * k * k + k


def test_heads_need_to_divide_width():
    with pytest.raises(ValueError, match="emb=30 is not divisible by heads=4"):
        LMConfig(emb=30, heads=4)


@pytest.mark.parametrize("causal", [False, True])
def test_module_reference_and_fused_agree_self_and_cross(causal):
    torch.manual_seed(0)
    ref, fast = MultiHeadAttention(32, 4, causal=causal, impl="reference"), MultiHeadAttention(32, 4, causal=causal)
    fast.load_state_dict(ref.state_dict())
    x, ctx = torch.randn(3, 6, 32), torch.randn(3, 10, 32)
    key_mask = torch.arange(10)[None] < torch.tensor([10, 4, 7])[:, None]  # (b, u)
    assert_close(fast(x), ref(x))
    assert_close(fast(x, ctx, key_mask=key_mask), ref(x, ctx, key_mask=key_mask))


def test_cross_attention_uses_the_query_rows_on_x_and_key_value_rows_on_context():
    """Cross-attention of a sequence with itself is self-attention: the fused matrix is split correctly."""
    mha = MultiHeadAttention(32, 4)
    x = torch.randn(2, 7, 32)
    assert_close(mha(x, memory=x), mha(x))


@pytest.mark.parametrize("impl", ["reference", "sdpa"])
def test_cache_gives_the_same_outputs_as_the_full_sequence(impl):
    mha = MultiHeadAttention(32, 4, causal=True, impl=impl)
    x = torch.randn(2, 10, 32)
    cache = KVCache(2, 4, 16, 8, torch.float32, "cpu")
    steps = [mha(x[:, :6], cache=cache)] + [mha(x[:, i : i + 1], cache=cache) for i in range(6, 10)]
    assert cache.len == 10
    assert_close(torch.cat(steps, dim=1), mha(x))


def test_cache_overflow_is_an_error():
    cache = KVCache(1, 1, 4, 2, torch.float32, "cpu")
    cache.update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
    with pytest.raises(ValueError, match="holds 4 positions, 5 requested"):
        cache.update(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2))

"""The models: causality, padding invariance, positions, norms, caching, and that they learn."""

import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from transformers_scratch import (
    CausalLM,
    ClassifierConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
    LMConfig,
    SequenceClassifier,
    SinusoidalPositions,
    TransformerBlock,
    TransformerConfig,
    nucleus,
    sample_next,
)
from transformers_scratch.model.generation import GraphedStep

SMALL = dict(emb=32, heads=4, depth=2, context=24)


def test_library_does_not_import_lightning():
    code = "import sys, transformers_scratch; assert 'lightning' not in sys.modules, 'lightning was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("attention", ["reference", "sdpa"])
@pytest.mark.parametrize("pre_norm", [True, False])
def test_no_causal_leak(attention, pre_norm):
    """Changing tokens after position t changes no output at positions <= t, exactly."""
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=50, attention=attention, pre_norm=pre_norm, **SMALL)).eval()
    ids = torch.randint(0, 50, (2, 20))
    t = 11
    changed = ids.clone()
    changed[:, t + 1 :] = torch.randint(0, 50, (2, 20 - t - 1))
    assert not torch.equal(changed, ids)
    a, b = model(ids), model(changed)
    assert torch.equal(a[:, : t + 1], b[:, : t + 1])
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])


@pytest.mark.parametrize("pool", ["mean", "max", "cls"])
@pytest.mark.parametrize("pre_norm", [True, False])
def test_classifier_ignores_padding(pool, pre_norm):
    """The logits depend neither on what padded positions hold nor on how much padding is appended."""
    torch.manual_seed(0)
    model = SequenceClassifier(ClassifierConfig(vocab_size=40, pool=pool, pre_norm=pre_norm, **SMALL)).eval()
    lengths = torch.tensor([9, 4, 12])
    ids = torch.randint(1, 40, (3, 12))
    mask = torch.arange(12)[None] < lengths[:, None]  # (b, t)
    logits = model(ids, mask)

    junk = torch.where(mask, ids, torch.randint(1, 40, ids.shape))  # other contents at padded positions
    assert_close(model(junk, mask), logits)

    more = torch.cat([ids, torch.randint(1, 40, (3, 8))], dim=1)  # 8 more padded positions
    more_mask = torch.cat([mask, torch.zeros(3, 8, dtype=torch.bool)], dim=1)
    assert_close(model(more, more_mask), logits)

    alone = [model(ids[i : i + 1, : lengths[i]]) for i in range(3)]  # each row alone, unpadded
    assert_close(torch.cat(alone), logits)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fully_padded_row_is_finite_in_half_precision(dtype):
    torch.manual_seed(0)
    for pool in ("mean", "max", "cls"):
        model = SequenceClassifier(ClassifierConfig(vocab_size=40, pool=pool, **SMALL)).to(dtype)
        ids = torch.randint(1, 40, (2, 10))
        mask = torch.tensor([[True] * 10, [False] * 10])
        logits = model(ids, mask)
        logits.float().sum().backward()
        assert torch.isfinite(logits).all(), pool
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None), pool


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fully_padded_row_is_finite_on_gpu(dtype):
    model = SequenceClassifier(ClassifierConfig(vocab_size=40, **SMALL)).cuda().to(dtype)
    ids = torch.randint(1, 40, (2, 10), device="cuda")
    mask = torch.tensor([[True] * 10, [False] * 10], device="cuda")
    logits = model(ids, mask)
    logits.float().sum().backward()
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_sinusoidal_encoding_is_the_papers_formula():
    k = 16
    table = SinusoidalPositions(50, k)(50)
    p, i = 37, 3
    assert_close(table[p, 2 * i], torch.tensor(math.sin(p / 10000 ** (2 * i / k))))
    assert_close(table[p, 2 * i + 1], torch.tensor(math.cos(p / 10000 ** (2 * i / k))))
    assert_close(SinusoidalPositions(50, k)(5, offset=37)[0], table[37])


def test_position_choice_changes_parameters():
    learned = CausalLM(LMConfig(positions="learned", **SMALL))
    fixed = CausalLM(LMConfig(positions="sinusoidal", **SMALL))
    n_learned = sum(p.numel() for p in learned.parameters())
    assert n_learned - sum(p.numel() for p in fixed.parameters()) == SMALL["context"] * SMALL["emb"]
    assert "embed.positions.table" not in fixed.state_dict()  # derived, never saved


def test_post_norm_block_ends_in_layer_norm_and_pre_norm_does_not():
    x = torch.randn(2, 5, 32) * 3 + 1
    post = TransformerBlock(TransformerConfig(pre_norm=False, **SMALL))(x)
    assert_close(post.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    assert_close(post.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0)
    pre = TransformerBlock(TransformerConfig(pre_norm=True, **SMALL))(x)
    assert pre.mean(-1).abs().mean() > 0.3  # the residual stream keeps the input's offset


def test_too_long_sequence_says_what_to_do():
    model = CausalLM(LMConfig(**SMALL))
    with pytest.raises(ValueError, match="sequence of 30 positions > model context 24: learned .*; feed shorter"
                       ".* sinusoidal, rope or alibi, which go past it"):  # fmt: skip
        model(torch.zeros(1, 30, dtype=torch.long))


def test_bad_config_says_what_to_do():
    with pytest.raises(ValueError, match="emb=100 is not divisible by heads=8; .*heads=10"):
        LMConfig(emb=100, heads=8)
    with pytest.raises(ValueError, match=r"depth=0 is not an integer in \[1, 1,000\]"):
        LMConfig(depth=0)
    with pytest.raises(ValueError, match=r"emb=null is not an integer in \[1, "):
        LMConfig(emb=None)  # as a checkpoint's settings may hold
    with pytest.raises(ValueError, match=r"emb=9999999999999999999999999999999999999999 is not an integer in \["):
        LMConfig(emb=10**40 - 1, heads=4)  # refused by its type before anything reads its digits
    with pytest.raises(ValueError, match="at least 3.4e\\+18 parameters .* make it smaller"):
        LMConfig(emb=2**24, heads=2**10, depth=1000)  # the size is refused before a divisor is looked for
    with pytest.raises(ValueError, match="model kv_heads=3 must divide heads=4"):
        LMConfig(emb=16, heads=4, kv_heads=3)  # grouped queries: each key/value head serves heads / kv_heads


def test_a_sinusoidal_table_past_the_machines_memory_is_refused_before_it_is_built(monkeypatch):
    """The table is a buffer, not a parameter: a checkpoint's context of 2^24 had it built (24 GB here)."""
    monkeypatch.setattr("transformers_scratch.model.config.memory_bytes", lambda: 8 * 10**9)
    with pytest.raises(ValueError, match=r"needs 12.9 GB for its float32 weights and sinusoidal table alone"):
        LMConfig(vocab_size=256, context=2**24, emb=64, heads=4, depth=1, positions="sinusoidal")
    LMConfig(vocab_size=256, context=2**24, emb=64, heads=4, depth=1, positions="rope")  # computed as it is used


@pytest.mark.parametrize("attention", ["reference", "sdpa"])
@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_cached_greedy_generation_equals_recomputation(attention, positions):
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=30, attention=attention, positions=positions, **SMALL))
    prompt = torch.randint(0, 30, (3, 5))
    n = SMALL["context"] - 5  # the whole sequence fits the context
    cached = model.generate(prompt, n, temperature=0, use_cache=True)
    assert torch.equal(cached, model.generate(prompt, n, temperature=0, use_cache=False))
    assert torch.equal(cached[:, :5], prompt) and cached.shape == (3, SMALL["context"])


@pytest.mark.parametrize("attention", ["reference", "sdpa"])
@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rope", "alibi"])
def test_the_static_decoding_step_equals_the_cached_step(attention, positions):
    """The step a CUDA graph replays (position on the device, the whole cache read through a mask) gives the
    logits of the ordinary cached step, position after position, until the cache is full."""
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=30, attention=attention, positions=positions, **SMALL)).eval()
    prompt = torch.randint(0, 30, (2, 5))
    dynamic, static = model.new_caches(2), model.new_caches(2)
    with torch.inference_mode():
        model(prompt, dynamic), model(prompt, static)
        step = GraphedStep(model, static, graph=False)
        token = prompt[:, -1:]
        for _ in range(SMALL["context"] - 5):
            expected = model(token, dynamic)
            assert_close(step(token), expected)
            token = expected[:, -1].argmax(-1, keepdim=True)
        assert static[0].len == dynamic[0].len == SMALL["context"] and static[0].at is None
        with pytest.raises(ValueError, match="the KV cache is full"):
            step(token)


def test_a_kv_cache_refuses_a_write_past_its_end_or_of_several_positions_in_static_mode():
    """Caught in the cache, in words: torch's own failure was a shape mismatch naming neither (or, in static
    mode, a write of several positions where a replayed step writes one)."""
    from transformers_scratch.model.cache import KVCache

    cache, two = KVCache(1, 2, 3, 4, torch.float32, "cpu"), torch.ones(1, 2, 2, 4)
    cache.update(two, two)
    with pytest.raises(ValueError, match="KV cache holds 3 positions, 4 requested; reset or crop first"):
        cache.update(two, two)
    assert cache.len == 2
    cache.at = torch.tensor(2)  # static mode, at the last position
    with pytest.raises(ValueError, match="a static KV cache takes one position a step, not 2"):
        cache.update(two, two)
    keys, _ = cache.update(5 * two[:, :, :1], two[:, :, :1])
    assert keys.shape == (1, 2, 3, 4) and keys[0, 0, 2, 0] == 5


def test_cuda_graph_decoding_needs_a_gpu_and_the_cache():
    model = CausalLM(LMConfig(vocab_size=30, **SMALL))
    with pytest.raises(ValueError, match="on a GPU, and here the model is on cpu; leave cuda_graph off"):
        model.generate(torch.zeros(1, 3, dtype=torch.long), 4, cuda_graph=True)


@pytest.mark.gpu
@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rope", "alibi"])
def test_greedy_decoding_replayed_as_a_cuda_graph_equals_cached_decoding(positions):
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=30, positions=positions, **SMALL)).cuda()
    prompt = torch.randint(0, 30, (2, 5), device="cuda")
    n = 3 * SMALL["context"]  # past the context twice: the window is re-encoded into the same buffers
    graphed = model.generate(prompt, n, temperature=0, cuda_graph=True)
    assert torch.equal(graphed, model.generate(prompt, n, temperature=0))


def test_generation_past_the_context_crops_and_goes_on():
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=30, **SMALL))
    prompt = torch.randint(0, 30, (2, 40))  # longer than the context already
    for use_cache in (True, False):
        out = model.generate(prompt, 50, temperature=0.5, top_k=5, use_cache=use_cache)
        assert out.shape == (2, 90) and torch.equal(out[:, :40], prompt)


def test_cached_generation_grows_nothing_and_reuses_its_caches(monkeypatch):
    """Per token, cached sampling writes the new id in place (no concatenation of the whole sequence so far)
    and, when the cache is full, refills the same buffers instead of allocating new ones."""
    from torch.profiler import profile

    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=30, **SMALL))
    made = []
    new_caches = model.new_caches
    monkeypatch.setattr(model, "new_caches", lambda b: made.append(b) or new_caches(b))
    prompt = torch.randint(0, 30, (1, 5))
    with profile() as prof:
        out = model.generate(prompt, 3 * SMALL["context"], temperature=1.0)  # past the context twice
    assert out.shape == (1, 5 + 3 * SMALL["context"])
    assert made == [1]  # one set of caches, refilled each time it was full
    assert not [e.key for e in prof.key_averages() if e.key == "aten::cat"]


def test_cached_decoding_on_a_cpu_runs_on_one_thread_and_gives_the_threads_back(monkeypatch):
    """A one-token step is too small to share between threads; training's thread count is restored after
    sampling, also when sampling fails."""
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=30, **SMALL))
    threads = torch.get_num_threads()
    seen = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **k: seen.append(torch.get_num_threads()) or forward(*a, **k))
    torch.set_num_threads(2)
    try:
        model.generate(torch.randint(0, 30, (1, 5)), 4)
        assert seen == [1] * 4 and torch.get_num_threads() == 2
        seen.clear()
        model.generate(torch.randint(0, 30, (1, 5)), 2, use_cache=False)  # recomputation keeps every thread
        assert seen == [2, 2]
        monkeypatch.setattr(model, "forward", lambda *a, **k: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            model.generate(torch.randint(0, 30, (1, 5)), 2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_an_empty_prompt_is_refused():
    model = CausalLM(LMConfig(**SMALL))
    with pytest.raises(ValueError, match="empty prompt"):
        model.generate(torch.zeros(1, 0, dtype=torch.long), 2)


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
@pytest.mark.parametrize(
    "option",
    [{"temperature": -1.0}, {"temperature": math.nan}, {"top_k": 0}, {"top_p": 0.0}, {"top_p": 1.5},
     {"max_new_tokens": -1}],
)  # fmt: skip
def test_generation_refuses_a_sampling_setting_out_of_its_bounds(kind, option):
    """The bounds the command line declares for sample, on generate's own parameters: a negative temperature was
    greedy without a word, a NaN one blamed the weights, and top_k 0 failed deep inside torch."""
    sizes = dict(vocab_size=30, **SMALL)
    options = {"max_new_tokens": 3, **option}
    (name,) = option
    with pytest.raises(ValueError, match=f"generate.{name}="):
        if kind == "causal":
            CausalLM(LMConfig(**sizes)).generate(torch.zeros(1, 2, dtype=torch.long), **options)
        else:
            EncoderDecoder(EncoderDecoderConfig(**sizes)).generate(torch.ones(1, 2, dtype=torch.long), bos_id=1,
                                                                   **options)  # fmt: skip


@pytest.mark.parametrize("kind", ["causal", "xl"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generation_of_a_model_whose_scores_overflow_is_refused(kind, use_cache):
    """argmax reads NaN scores as a token: greedy decoding was garbage without a word (sampling's multinomial
    refuses NaN probabilities itself). Positions from the fifth on overflow, so the prompt's scores are finite."""
    from transformers_scratch import TransformerXL, XLConfig

    torch.manual_seed(0)
    sizes = dict(vocab_size=30, **SMALL)
    model = TransformerXL(XLConfig(mem_len=8, **sizes)) if kind == "xl" else CausalLM(LMConfig(**sizes))
    prompt = torch.randint(0, 30, (2, 4))
    model.generate(prompt, 6, temperature=0, use_cache=use_cache)  # finite: no refusal

    def past_the_prompt(module, args, out: torch.Tensor) -> torch.Tensor:  # a cached step's one position is new
        new = torch.arange(out.size(1)) >= 4 if out.size(1) > 1 else torch.ones(1, dtype=torch.bool)
        return out.masked_fill(new[:, None], float("inf"))

    hook = model.head.register_forward_hook(past_the_prompt)
    with pytest.raises(FloatingPointError, match="scores are not finite"):
        model.generate(prompt, 6, temperature=0, use_cache=use_cache)
    hook.remove()


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_decoding_of_an_encoder_decoder_whose_scores_overflow_is_refused(use_cache):
    """As a causal model's: the decode command read one output again to check it; the Python API did not."""
    torch.manual_seed(0)
    model = EncoderDecoder(EncoderDecoderConfig(vocab_size=30, **SMALL))
    src = torch.randint(0, 30, (2, 5))
    model.generate(src, bos_id=1, max_new_tokens=6, use_cache=use_cache)  # finite: no refusal
    hook = model.head.register_forward_hook(
        lambda module, args, out: out.masked_fill(out.new_ones((), dtype=bool), float("nan"))
    )
    with pytest.raises(FloatingPointError, match="scores are not finite"):
        model.generate(src, bos_id=1, max_new_tokens=6, use_cache=use_cache)
    hook.remove()


def test_top_k_one_is_greedy():
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=30, **SMALL))
    prompt = torch.randint(0, 30, (2, 4))
    assert torch.equal(model.generate(prompt, 10, temperature=2.0, top_k=1), model.generate(prompt, 10, temperature=0))


@pytest.mark.parametrize("temperature", [1e-320, 1e-30, 1e308])
def test_any_positive_temperature_samples(temperature):
    """A temperature near 0 is greedy (logits / 1e-320 alone overflow to NaN probabilities); a huge one uniform."""
    logits = torch.tensor([[1.0, 3.0, -2.0, 2.5], [40.0, -40.0, 0.0, 39.0]])
    drawn = sample_next(logits.repeat(2_000, 1), temperature, generator=torch.Generator().manual_seed(0))
    if temperature < 1:
        assert drawn.view(2_000, 2).eq(torch.tensor([1, 0])).all()
    else:
        assert torch.bincount(drawn.flatten(), minlength=4).min() > 800  # every token, about a quarter each


def test_top_p_keeps_the_fewest_likeliest_tokens_that_reach_p():
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3], [0.25, 0.25, 0.25, 0.25]])
    logits = probs.log()
    for p, first, second in ((0.4, [1], [0, 1]), (0.7, [1, 3], [0, 1, 2]), (0.9, [1, 2, 3], [0, 1, 2, 3])):
        kept = nucleus(logits, p)
        assert kept[0].nonzero().flatten().tolist() == first, p  # 0.5 | 0.5 + 0.3 | 0.5 + 0.3 + 0.15
        assert kept[1].sum() == len(second), p  # ties: the count is what the mass needs
    assert nucleus(logits, 1.0).all() and nucleus(logits, 1e-6).sum(-1).tolist() == [1, 1]
    assert nucleus(logits, 1e-320).sum(-1).tolist() == [1, 1]  # 0 in float32: the likeliest is kept all the same


def test_top_p_samples_only_from_the_nucleus_in_its_proportions():
    logits = torch.tensor([[0.05, 0.5, 0.15, 0.3]]).log().expand(20_000, -1)
    drawn = sample_next(logits, temperature=1.0, top_p=0.7, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(drawn.flatten(), minlength=4) / drawn.numel()
    assert counts[0] == 0 and counts[2] == 0  # outside the nucleus {1, 3}
    assert counts[1] == pytest.approx(0.5 / 0.8, abs=0.02) and counts[3] == pytest.approx(0.3 / 0.8, abs=0.02)


def test_top_p_one_is_no_cut_off():
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=30, **SMALL))
    prompt = torch.randint(0, 30, (2, 4))
    same = [model.generate(prompt, 10, generator=torch.Generator().manual_seed(3), top_p=p) for p in (None, 1.0)]
    assert torch.equal(*same)


def test_weight_tying_shares_one_matrix():
    tied = CausalLM(LMConfig(tie_weights=True, **SMALL))
    assert tied.head.weight is tied.embed.tokens.weight
    untied = CausalLM(LMConfig(**SMALL))
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert n(untied) - n(tied) == 256 * SMALL["emb"]


def test_encoder_decoder_shares_embeddings_only_for_one_vocabulary():
    shared = EncoderDecoder(EncoderDecoderConfig(vocab_size=20, **SMALL))
    assert shared.src_embed is shared.tgt_embed and shared.head.weight is shared.src_embed.tokens.weight
    apart = EncoderDecoder(EncoderDecoderConfig(vocab_size=20, tgt_vocab_size=30, **SMALL))
    assert apart.src_embed is not apart.tgt_embed and apart.head.weight is apart.tgt_embed.tokens.weight
    assert apart(torch.randint(0, 20, (2, 7)), torch.randint(0, 30, (2, 5))).shape == (2, 5, 30)


def test_decoder_is_causal_and_encoder_is_not():
    torch.manual_seed(0)
    model = EncoderDecoder(EncoderDecoderConfig(vocab_size=20, **SMALL)).eval()
    src, tgt = torch.randint(0, 20, (2, 8)), torch.randint(0, 20, (2, 8))
    out = model(src, tgt)
    tgt2 = tgt.clone()
    tgt2[:, 5:] = (tgt2[:, 5:] + 1) % 20
    assert torch.equal(model(src, tgt2)[:, :5], out[:, :5])
    src2 = src.clone()
    src2[:, -1] = (src2[:, -1] + 1) % 20  # the last source token is visible from every target position
    assert not torch.allclose(model(src2, tgt)[:, 0], out[:, 0])


def overfit(model, loss_fn, steps=200, lr=3e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    first = None
    for _ in range(steps):
        loss = loss_fn()
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    return first, loss.item()


def test_classifier_overfits_a_batch():
    torch.manual_seed(0)
    model = SequenceClassifier(ClassifierConfig(vocab_size=50, **SMALL))
    ids, labels = torch.randint(0, 50, (16, 20)), torch.randint(0, 2, (16,))
    first, last = overfit(model, lambda: F.cross_entropy(model(ids), labels), steps=100)
    assert last < 0.05 * first


def test_lm_overfits_a_batch():
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=50, **SMALL))
    ids = torch.randint(0, 50, (8, SMALL["context"] + 1))
    loss = lambda: F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())  # noqa: E731
    first, last = overfit(model, loss)
    assert last < 0.1 * first


@pytest.mark.slow
def test_encoder_decoder_overfits_a_batch():
    torch.manual_seed(0)
    model = EncoderDecoder(EncoderDecoderConfig(vocab_size=50, **SMALL))
    src, tgt = torch.randint(1, 50, (8, 12)), torch.randint(1, 50, (8, 10))
    tgt_in = torch.cat([torch.zeros(8, 1, dtype=torch.long), tgt[:, :-1]], dim=1)  # BOS = 0, shifted right
    first, last = overfit(model, lambda: F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt.flatten()))
    assert last < 0.1 * first


@pytest.mark.slow
def test_encoder_decoder_learns_to_reverse():
    """Teacher-forced training, then greedy token-by-token decoding on unseen sequences."""
    torch.manual_seed(0)
    n, symbols, bos = 8, 10, 0  # ids 1..10 are symbols, 0 is BOS
    model = EncoderDecoder(EncoderDecoderConfig(vocab_size=symbols + 1, emb=64, heads=4, depth=2, context=n + 1))
    steps = 800
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, 3e-3, total_steps=steps, pct_start=0.1)  # warm-up, anneal

    def batch(size):
        src = torch.randint(1, symbols + 1, (size, n))
        return src, src.flip(1)

    test_src, test_tgt = batch(500)
    seen = {tuple(s) for s in test_src.tolist()}
    for _ in range(steps):
        src, tgt = batch(64)
        keep = torch.tensor([tuple(s) not in seen for s in src.tolist()])  # held-out really held out
        src, tgt = src[keep], tgt[keep]
        tgt_in = torch.cat([torch.full((len(src), 1), bos), tgt[:, :-1]], dim=1)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
    pred = model.generate(test_src, bos_id=bos, max_new_tokens=n)
    exact = (pred == test_tgt).all(1).float().mean().item()
    assert exact >= 0.95, f"exact match {exact:.3f}"


def test_relu_squared_is_relu_times_itself_and_a_zero_out_model_starts_each_block_as_the_identity():
    """activation relu2 is relu(x)^2 (Primer). zero_out starts the projections that write into the residual stream
    at zero: every block passes its input through, so the model's first logits are the embeddings read by the
    head through the final norm; every other weight is the draw it would be without it."""
    from transformers_scratch.model.blocks import ACTIVATIONS

    x = torch.randn(5, 7)
    assert torch.equal(ACTIVATIONS["relu2"]()(x), F.relu(x) * F.relu(x))
    cfg = LMConfig(vocab_size=11, context=8, emb=16, heads=2, depth=3, activation="relu2", zero_out=True)
    model = CausalLM(cfg)
    outs = [n for n, p in model.named_parameters() if n.endswith(("attn.out.weight", "ff.2.weight"))]
    assert len(outs) == 2 * cfg.depth and all(not model.get_parameter(n).any() for n in outs)
    ids = torch.randint(11, (2, 8))
    assert_close(model(ids), model.head(model.stack.norm(model.embed(ids))))
    torch.manual_seed(0)
    plain = CausalLM(LMConfig(vocab_size=11, context=8, emb=16, heads=2, depth=3, activation="relu2"))
    torch.manual_seed(0)
    zeroed = CausalLM(cfg)
    same = [n for n, _ in plain.named_parameters() if n not in outs]
    assert all(torch.equal(plain.get_parameter(n), zeroed.get_parameter(n)) for n in same)  # the same draws

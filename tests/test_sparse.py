"""Sparse attention: the blocked fast path against the dense masked reference, the paper's two-step
connectivity, decoding, pictures, settings, and FlexAttention."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from transformers_scratch.model import CausalLM, LMConfig, SequenceClassifier
from transformers_scratch.model.attention import reference_attention
from transformers_scratch.model.config import ClassifierConfig, XLConfig
from transformers_scratch.model.generation import GraphedStep
from transformers_scratch.model.sparse import SparsePattern, flex_sparse_attention, sparse_attention

CASES = list(itertools.product(["strided", "fixed"], ["split", "alternate", "union"], [True, False]))


def qkv(t: int, b: int = 2, h: int = 4, s: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, t, s, generator=g).requires_grad_() for _ in range(3)]


def padding(b: int, t: int) -> torch.Tensor:
    """A key mask with a padded tail in one row and a hole in the other."""
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[1, t - 9 :] = False
    mask[0, 3] = False
    return mask


def reference(q, k, v, sp: SparsePattern, layer: int, causal: bool, key_mask=None):
    """The dense masked attention under the pattern's (h, t, t) mask: the definition the fast path must meet."""
    mask = sp.mask(layer, q.size(1), q.size(2), causal=causal, device=q.device)
    mask = mask if key_mask is None else mask & key_mask[:, None, None, :]
    return reference_attention(q, k, v, mask)


@pytest.mark.parametrize("pattern, layout, causal", CASES)
@pytest.mark.parametrize("padded", [False, True], ids=["no-padding", "padding"])
def test_the_blocked_path_equals_the_dense_masked_reference(pattern, layout, causal, padded):
    """Forward and gradients, float32, to 1e-5, at lengths that are and are not a multiple of the block."""
    for t, layer in [(50, 0), (50, 1), (48, 0), (7, 1)]:
        sp = SparsePattern(pattern, layout, block=8, summary=3)
        q, k, v = qkv(t)
        key_mask = padding(2, t) if padded else None
        out = sparse_attention(q, k, v, sp, layer, causal, key_mask)
        ref = reference(q, k, v, sp, layer, causal, key_mask)
        assert_close(out, ref, atol=1e-5, rtol=1e-5)
        grad = torch.randn_like(out)
        for ours, theirs in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(ref, (q, k, v), grad),
                               strict=True):  # fmt: skip
            assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_a_pattern_that_allows_everything_is_dense_attention(causal):
    """With one block as long as the sequence, fixed's part A (the own block) and strided's union (the last l
    positions or every l-th) see every key: sparse attention is then dense attention."""
    t = 40
    q, k, v = qkv(t)
    dense = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    whole_block = sparse_attention(q, k, v, SparsePattern("fixed", "alternate", block=t, summary=1), 0, causal)
    assert_close(whole_block, dense, atol=1e-5, rtol=1e-5)
    union = sparse_attention(q, k, v, SparsePattern("strided", "union", block=t), 0, causal)
    assert_close(union, dense, atol=1e-5, rtol=1e-5)


def test_the_patterns_are_the_papers():
    """Strided: the previous l positions and every l-th; fixed: the own block and the last c of every block."""
    sp = SparsePattern("strided", "split", block=4)
    a, b = sp.parts(torch.tensor(9), torch.arange(10), causal=True)
    assert a.nonzero().flatten().tolist() == [6, 7, 8, 9] and b.nonzero().flatten().tolist() == [1, 5, 9]
    sp = SparsePattern("fixed", "split", block=4, summary=2)
    a, b = sp.parts(torch.tensor(9), torch.arange(12), causal=True)
    assert a.nonzero().flatten().tolist() == [8, 9] and b.nonzero().flatten().tolist() == [2, 3, 6, 7]
    mask = sp.mask(0, 4, 12)  # split: heads 0-1 take part A, heads 2-3 part B
    assert torch.equal(mask[0], mask[1]) and torch.equal(mask[2], mask[3]) and not torch.equal(mask[0], mask[2])
    assert (mask.sum((1, 2)) < 12 * 13 / 2).all()  # sparse: each head has fewer pairs than causal attention


def influence(model: CausalLM, t: int) -> torch.Tensor:
    """(t, t) bool: does the output at position i depend on the input at position j (gradient not zero)."""
    ids = torch.randint(model.cfg.vocab_size, (1, t), generator=torch.Generator().manual_seed(0))
    x = model.embed(ids).detach().requires_grad_()  # (1, t, k): the inputs to the blocks
    out = model.stack(x) @ torch.randn(x.size(-1), generator=torch.Generator().manual_seed(1))  # (1, t): not
    # the features' sum, which the final LayerNorm holds constant
    rows = [torch.autograd.grad(out[0, i], x, retain_graph=True)[0][0].abs().sum(-1) > 0 for i in range(t)]
    return torch.stack(rows)


@pytest.mark.parametrize("pattern, layout", [(p, lay) for p, lay, causal in CASES if causal])
def test_within_two_layers_every_position_reads_every_earlier_one(pattern, layout):
    """The paper's claim about the factorization, checked by gradients: after two layers the output at i depends
    on the input at every j <= i, though no head of a layer attends to all of them."""
    torch.manual_seed(0)
    t = 45
    cfg = dict(vocab_size=20, context=t, emb=16, heads=2, ff_mult=2,
               sparse=dict(pattern=pattern, layout=layout, block=6, summary=2))  # fmt: skip
    two = influence(CausalLM(LMConfig(depth=2, **cfg)), t)
    assert torch.equal(two, torch.ones(t, t, dtype=torch.bool).tril())
    one = influence(CausalLM(LMConfig(depth=1, **cfg)), t)
    assert one.sum() < two.sum()  # one layer alone does not reach everything


def model_pair(pattern: str, layout: str, **more) -> tuple[CausalLM, CausalLM]:
    """A sparse model on the blocked path and the same weights on the dense masked path."""
    torch.manual_seed(0)
    sparse = dict(pattern=pattern, layout=layout, block=8, summary=2)
    cfg = dict(vocab_size=30, context=40, emb=32, heads=4, depth=2, **more)
    fast = CausalLM(LMConfig(**cfg, sparse=sparse)).eval()
    dense = CausalLM(LMConfig(**cfg, sparse={**sparse, "kernel": "dense"})).eval()
    dense.load_state_dict(fast.state_dict())
    return fast, dense


@pytest.mark.parametrize("pattern, layout", [(p, lay) for p, lay, causal in CASES if causal])
def test_a_sparse_model_decodes_with_its_cache_as_it_recomputes(pattern, layout):
    fast, dense = model_pair(pattern, layout)
    ids = torch.randint(30, (2, 37))
    assert_close(fast(ids), dense(ids), atol=1e-5, rtol=1e-5)
    prompt = ids[:, :5]
    cached = fast.generate(prompt, 35, temperature=0, use_cache=True)  # past the context: the window moves on
    assert torch.equal(cached, fast.generate(prompt, 35, temperature=0, use_cache=False))
    dynamic, static = fast.new_caches(2), fast.new_caches(2)
    with torch.inference_mode():  # the step a CUDA graph replays reads the pattern's row at a device position
        fast(prompt, dynamic), fast(prompt, static)
        step = GraphedStep(fast, static, graph=False)
        token = prompt[:, -1:]
        for _ in range(10):
            expected = fast(token, dynamic)
            assert_close(step(token), expected)
            token = expected[:, -1].argmax(-1, keepdim=True)


def test_a_sparse_encoder_classifies_padded_reviews_as_the_dense_masked_path():
    torch.manual_seed(0)
    sparse = dict(pattern="fixed", block=6, summary=2)
    cfg = dict(vocab_size=30, context=30, emb=32, heads=4, depth=2, pool="cls")
    fast = SequenceClassifier(ClassifierConfig(**cfg, sparse=sparse)).eval()
    dense = SequenceClassifier(ClassifierConfig(**cfg, sparse={**sparse, "kernel": "dense"})).eval()
    dense.load_state_dict(fast.state_dict())
    ids, mask = torch.randint(30, (2, 30)), padding(2, 30)
    assert_close(fast(ids, mask), dense(ids, mask), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(block=0), "sparse.block=0 is not an integer in \\[1, "),
        (dict(block=65), "sparse.block=65 is longer than the context 64: .* such as 8"),
        (
            dict(pattern="fixed", block=8, summary=8),
            r"sparse.summary=8 must lie in \[1, "
            "sparse.block=8\\): .* pass a smaller summary",
        ),
        (dict(pattern="banded"), "sparse.pattern='banded' is not one of strided\\|fixed"),
        (dict(layout="diagonal"), "sparse.layout='diagonal' is not one of split\\|alternate\\|union"),
        (dict(positions="alibi"), "positions alibi adds a bias .* use learned, sinusoidal or rope"),
        (dict(heads=1, emb=16), "heads=1 is too few; use 2 heads or more, or layout alternate"),
    ],
)
def test_hostile_sparse_settings_get_one_line_each(settings, message):
    model = {k: settings.pop(k) for k in ("positions", "heads", "emb") if k in settings}
    with pytest.raises(ValueError, match=message) as caught:
        LMConfig(**{"context": 64, "emb": 32, "heads": 4, **model, "sparse": settings})
    assert "\n" not in str(caught.value)


def test_transformer_xl_refuses_sparse_attention():
    with pytest.raises(ValueError, match="sparse: Transformer-XL's relative attention is dense"):
        XLConfig(context=64, sparse={"block": 8})


def test_flex_attention_refuses_a_backward_pass_on_a_cpu_in_one_line():
    q, k, v = qkv(16)
    with pytest.raises(ValueError, match="FlexAttention has no backward pass on a CPU; train with sparse.kernel "
                                         "blocked"):  # fmt: skip
        flex_sparse_attention(q, k, v, SparsePattern(block=4), 0, True)


def test_flex_attention_keeps_a_bounded_number_of_block_masks(monkeypatch):
    """Block masks without padding are kept per pattern and length, the oldest dropped past FLEX_MASKS_KEPT, so that
    prompts of many lengths do not grow the cache. (FlexAttention itself replaced by a stand-in: no compiling.)"""
    import torch.nn.attention.flex_attention as flex

    from transformers_scratch.model import sparse

    built = []
    monkeypatch.setattr(flex, "create_block_mask", lambda mod, b, h, t, u, **kw: built.append(t) or f"mask{t}")
    monkeypatch.setattr(sparse, "_FLEX", {"fn": lambda q, k, v, block_mask: q})
    with torch.no_grad():
        for t in [*range(10, 30), 29]:
            flex_sparse_attention(*(x.detach() for x in qkv(t, b=1)), SparsePattern(block=4), 0, True)
    masks = [key for key in sparse._FLEX if key != "fn"]
    assert len(masks) == sparse.FLEX_MASKS_KEPT and masks[-1][4] == 29 and built.count(29) == 1  # reused


def test_flex_attention_refuses_attention_dropout_in_one_line():
    model = CausalLM(LMConfig(vocab_size=30, context=32, emb=16, heads=2, depth=1, dropout=0.1,
                              sparse={"block": 4, "kernel": "flex"}))  # fmt: skip
    with (
        torch.no_grad(),
        pytest.raises(ValueError, match=r"sparse.kernel flex has no attention dropout \(dropout=0.1\)"),
    ):
        model(torch.zeros(1, 32, dtype=torch.long))


@pytest.mark.slow
@pytest.mark.parametrize("pattern, layout", [("strided", "split"), ("fixed", "union"), ("fixed", "alternate")])
def test_flex_attention_forward_on_a_cpu_equals_the_blocked_path(pattern, layout):
    """FlexAttention compiles its kernel from the same pattern (forward only on a CPU)."""
    sp = SparsePattern(pattern, layout, block=16, summary=4)
    q, k, v = (x.detach() for x in qkv(200, b=1))
    with torch.no_grad():
        assert_close(flex_sparse_attention(q, k, v, sp, 1, True), sparse_attention(q, k, v, sp, 1, True),
                     atol=1e-5, rtol=1e-5)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("pattern, layout", [("strided", "split"), ("fixed", "union")])
def test_flex_attention_trains_on_a_gpu_as_the_reference(pattern, layout):
    sp = SparsePattern(pattern, layout, block=64, summary=8)
    q, k, v = (x.detach().cuda().requires_grad_() for x in qkv(1000, b=1, s=16))
    out = flex_sparse_attention(q, k, v, sp, 0, True)
    ref = reference(q, k, v, sp, 0, True)
    assert_close(out, ref, atol=1e-4, rtol=1e-4)
    grad = torch.randn_like(out)
    for ours, theirs in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(ref, (q, k, v), grad),
                               strict=True):  # fmt: skip
        assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_a_sparse_model_has_no_hugging_face_export(tmp_path):
    from transformers_scratch.model.hf import HFError, save_hf

    model = CausalLM(LMConfig(vocab_size=30, context=32, emb=16, heads=2, depth=1, sparse={"block": 4}))
    with pytest.raises(HFError, match="sparse attention has no counterpart in GPT-2, BERT or Llama"):
        save_hf(model, tmp_path / "out")


def test_the_attention_picture_shows_each_heads_pattern(tmp_path):
    """The picture's data: the weights come from the model's forward pass, are zero outside each head's pattern,
    and the pattern drawn is the one the model attends through."""
    from transformers_scratch.training.pictures import attention_maps, attention_patterns, draw_attention

    fast, _ = model_pair("fixed", "split")
    ids = torch.randint(30, (1, 40))
    weights, allowed = attention_maps(fast, ids)[:, 0], attention_patterns(fast, 40)
    assert allowed.shape == weights.shape == (2, 4, 40, 40)
    assert torch.equal(allowed[0], SparsePattern.of(fast.cfg.sparse).mask(0, 4, 40))
    assert (weights[~allowed] == 0).all()
    assert torch.allclose(weights.sum(-1), allowed.any(-1).float())  # 1, or 0 for a query its pattern gives no key
    fig = draw_attention(weights, [str(i) for i in range(40)], tmp_path / "a.png", allowed=allowed)
    panel = fig.axes[0].images[0].get_array()
    assert panel.mask.sum() == (~allowed[0, 0]).sum()  # the cells outside the pattern are masked (drawn grey)
    assert (tmp_path / "a.png").stat().st_size > 0
    dense = CausalLM(LMConfig(vocab_size=30, context=40, emb=32, heads=4, depth=2))
    assert attention_patterns(dense, 40) is None


@pytest.mark.slow
def test_a_sparse_character_model_trains_samples_and_draws_its_patterns_through_the_cli(tmp_path, cli):
    from test_cli import FAST, TINY_LM, corpus

    data = corpus(tmp_path / "text.txt")
    sparse = ["--model.model.sparse", "{pattern: fixed, block: 8, summary: 2}"]
    fit = cli("fit", "--config", TINY_LM, "--data.path", str(data), *FAST, *sparse, "--name", "sp", cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-2000:]
    ckpt = str(tmp_path / "checkpoints" / "sp" / "last.ckpt")
    sample = cli("sample", "--ckpt_path", ckpt, "--prompt", "the cat", "--length", "40", cwd=tmp_path)
    assert sample.returncode == 0 and sample.stdout.startswith("the cat"), sample.stderr[-2000:]
    picture = cli("attention", "--ckpt_path", ckpt, "--text", "the cat sat on a mat while one dog ran far away",
                  "--out", "a.png", cwd=tmp_path)  # fmt: skip
    assert picture.returncode == 0, picture.stderr[-2000:]
    assert "4 layers x 4 heads" in picture.stdout and (tmp_path / "a.png").stat().st_size > 0

"""Transformer-XL: the relative shift, the attention against a dense computation, causality through the memory, no
gradient into the memory, segmenting that does not change a windowed model, cached sampling, the authors' weights
in, ordered streams, evaluation that scores every byte once, and the memory through save and resume."""

import csv
import math
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from inprocess import run_cli, run_process
from test_reliability import fails, same_training_state
from torch.testing import assert_close

from transformers_scratch.cli import main
from transformers_scratch.data import DataError
from transformers_scratch.data.ids import IGNORE_INDEX
from transformers_scratch.data.text import OrderedSegments, StreamedSegments
from transformers_scratch.model.config import XLConfig
from transformers_scratch.model.pretrained import from_pretrained
from transformers_scratch.model.xl import (
    TransformerXL,
    authors_names,
    from_authors,
    relative_shift,
    window_mask,
    xl_sinusoids,
)
from transformers_scratch.training.modules import LitXL

ROOT = Path(__file__).resolve().parents[1]
XL_CONFIG = str(ROOT / "configs" / "shakespeare_xl.yaml")
CFG = XLConfig(vocab_size=40, context=6, emb=32, heads=4, depth=3, mem_len=7, clamp_len=9)


def model_of(cfg: XLConfig = CFG, seed: int = 0) -> TransformerXL:
    """A model whose every parameter is drawn at random (biases and norms too), so nothing hides behind a zero."""
    torch.manual_seed(seed)
    model = TransformerXL(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def segments(model, ids: torch.Tensor, size: int, **options) -> torch.Tensor:
    """Logits of ids (b, n) read in segments of ``size`` with the memory carried: (b, n, v)."""
    memory, out = None, []
    for start in range(0, ids.size(1), size):
        logits, memory = model(ids[:, start : start + size], memory, **options)
        out.append(logits)
    return torch.cat(out, dim=1)


def test_the_shifted_scores_equal_a_direct_computation_of_every_distance():
    b, h, t, m = 2, 3, 5, 4
    n = m + t
    by_distance = torch.randn(b, h, t, n)  # column c: distance n - 1 - c
    shifted = relative_shift(by_distance)
    for i in range(t):
        for j in range(m + i + 1):  # every key the query may see
            assert shifted[:, :, i, j].equal(by_distance[:, :, i, n - 1 - (m + i - j)]), (i, j)


def test_with_no_memory_the_layer_equals_dense_attention_with_an_explicit_relative_bias():
    torch.manual_seed(0)
    for impl in ("sdpa", "reference"):
        cfg = replace(CFG, attention=impl)
        model = model_of(cfg)
        attn, u, v = model.blocks[0].attn, model.u, model.v
        t, k, h = 6, cfg.emb, cfg.heads
        s = k // h
        x = torch.randn(2, t, k)
        r = xl_sinusoids(torch.arange(t - 1, -1, -1.0), k)
        got = attn(x, t, r, u, v, window_mask(t, t, None))
        q, key, val = (z.view(2, t, h, s).transpose(1, 2) for z in attn.qkv(x).split(k, -1))
        pos = attn.pos(xl_sinusoids(torch.arange(t).float(), k)).view(t, h, s)  # W_r R_d for every distance d
        scores = torch.full((2, h, t, t), float("-inf"))
        for i in range(t):
            for j in range(i + 1):
                scores[:, :, i, j] = ((q[:, :, i] + u) * key[:, :, j]).sum(-1) + ((q[:, :, i] + v) * pos[i - j]).sum(-1)
        dense = (scores / math.sqrt(s)).softmax(-1) @ val  # (b, h, t, s)
        assert_close(got, attn.out(dense.transpose(1, 2).reshape(2, t, k)), rtol=1e-5, atol=1e-5)


def test_a_tokens_logits_depend_on_no_later_token_through_the_memory_or_the_segment():
    model = model_of()
    ids = torch.randint(CFG.vocab_size, (1, 18))
    for p in (2, 7, 13):  # in the first segment, the second, the third
        changed = ids.clone()
        changed[0, p:] = (changed[0, p:] + 1) % CFG.vocab_size
        a, b = segments(model, ids, 6), segments(model, changed, 6)
        assert a[:, :p].equal(b[:, :p]) and not a[:, p].equal(b[:, p])


def test_no_gradient_reaches_the_memory():
    model = model_of().train()
    ids = torch.randint(CFG.vocab_size, (2, 12))
    _, memory = model(ids[:, :6])
    assert all(not m.requires_grad and m.grad_fn is None for m in memory)
    logits, _ = model(ids[:, 6:], memory)
    logits.sum().backward()
    with_memory = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    logits, _ = model(ids[:, 6:], [m.clone() for m in memory])  # the same numbers, no history at all
    logits.sum().backward()
    for name, p in model.named_parameters():
        assert_close(p.grad, with_memory[name], msg=name)


def test_the_memory_keeps_the_newest_positions_and_a_longer_one_is_read():
    model = model_of()
    ids = torch.randint(CFG.vocab_size, (1, 18))
    memory = None
    for start in (0, 6, 12):
        _, memory = model(ids[:, start : start + 6], memory)
    assert [m.shape for m in memory] == [(1, 7, 32)] * 3
    short, long = segments(model, ids, 6, mem_len=2), segments(model, ids, 6, mem_len=12)
    assert short[:, :6].equal(long[:, :6]) and not short[:, 6:].equal(long[:, 6:])
    assert model(ids[:, :6], mem_len=0)[1] is None


def test_a_stream_started_from_the_empty_memory_reads_as_one_with_no_memory():
    model, ids = model_of(), torch.randint(0, CFG.vocab_size, (2, 18))
    logits, memory = model(ids[:, :6], model.empty_memory(2, model.embed.weight))
    expected, expected_memory = model(ids[:, :6])
    assert_close(logits, expected)
    assert all(torch.equal(a, b) for a, b in zip(memory, expected_memory, strict=True))


def test_a_full_memory_has_the_same_layout_on_every_segment():
    """A memory is its own tensor, not a view of the concatenation: under torch.compile a change of strides from
    one segment to the next is a recompilation (seen on a GPU: 'memory[0] stride mismatch')."""
    model = model_of(replace(CFG, mem_len=6))
    ids = torch.randint(CFG.vocab_size, (2, 18))
    layouts, memory = [], None
    for start in (0, 6, 12):
        _, memory = model(ids[:, start : start + 6], memory)
        layouts.append([(m.shape, m.stride()) for m in memory])
    assert layouts[0] == layouts[1] == layouts[2]


def test_with_same_length_the_segmenting_does_not_change_the_logits():
    """Every query sees the same window of keys at every layer: one pass, segments of 4 or of 1 agree."""
    model = model_of(replace(CFG, same_length=True))
    ids = torch.randint(CFG.vocab_size, (2, 20))
    whole = model(ids, mem_len=7)[0]
    for size in (4, 1):
        assert_close(segments(model, ids, size), whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_cached_generation_gives_the_tokens_of_recomputation(temperature):
    model = model_of(replace(CFG, vocab_size=40))
    prompt = torch.randint(40, (2, 23))  # longer than a segment and the window
    out = [
        model.generate(
            prompt, 30, temperature=temperature, use_cache=cached, generator=torch.Generator().manual_seed(3)
        )
        for cached in (True, False)
    ]
    assert out[0].equal(out[1]) and out[0][:, :23].equal(prompt)


def test_a_model_with_the_longest_memory_samples():
    """The default sampling window, memory plus segment, may pass the longest memory a config takes."""
    from transformers_scratch.bounds import MAX_MEMORY

    model = model_of(replace(CFG, mem_len=MAX_MEMORY))
    assert model.generate(torch.zeros(1, 3, dtype=torch.long), 2).shape == (1, 5)
    with pytest.raises(ValueError, match="window of -1 positions must be at least 1"):
        model.generate(torch.zeros(1, 3, dtype=torch.long), 2, window=-1)


@pytest.mark.parametrize("settings, message", [
    (dict(activation="swiglu"), "model activation swiglu: Transformer-XL's feed-forward is one hidden layer"),
    (dict(same_length=True, mem_len=0), "model same_length shows every query mem_len keys: give it a memory"),
])  # fmt: skip
def test_settings_that_transformer_xl_cannot_follow_are_refused_by_its_config(settings, message):
    with pytest.raises(ValueError, match=message):
        replace(CFG, **settings)


@pytest.mark.parametrize("state, message", [
    ([torch.zeros(2)], "is not a state dict of named tensors; pass the state_dict() of the authors'"),
    ({"word_emb.emb_layers.0.weight": torch.zeros(10, 8), "layers.0.pos_ff.CoreNet.0.weight": torch.zeros(16, 8)},
     "lacks the biases r_w_bias (heads, head width); pass the state_dict() of the authors'"),
])  # fmt: skip
def test_what_is_no_state_dict_of_the_authors_model_is_refused_naming_it(state, message):
    with pytest.raises(ValueError, match=re.escape(f"the state dict {message}")):
        from_authors(state)


def test_a_train_split_too_short_for_one_segment_a_stream_says_what_to_lower():
    with pytest.raises(DataError, match="the train split holds 40 bytes, too few for 4 streams of one segment of 10"):
        OrderedSegments(torch.zeros(40, dtype=torch.long), 10, 4, range(4))


def test_a_state_dict_file_that_holds_no_mapping_is_refused_naming_the_flag(tmp_path):
    from transformers_scratch.training.checkpoints import Checkpoint

    torch.save([torch.zeros(2)], tmp_path / "list.pt")
    with pytest.raises(ValueError, match=f"--state_dict '{tmp_path / 'list.pt'}' holds a list, not a state dict"):
        Checkpoint.tensors(str(tmp_path / "list.pt"), "--state_dict")


def test_init_from_a_litxl_checkpoint_starts_from_its_weights_and_architecture(tmp_path):
    """``--model.init_from`` of a LitXL: a new run (no memory, step 0) from a trained model's weights, whose
    architecture it takes, and whose hyper-parameters then need no file to reload."""
    import lightning

    trained = LitXL(replace(CFG, depth=2))
    path = tmp_path / "xl.ckpt"
    torch.save({"state_dict": trained.state_dict(), "pytorch-lightning_version": lightning.__version__,
                "hyper_parameters": {"_class_path": "transformers_scratch.training.LitXL", **trained.hparams}},
               path)  # fmt: skip
    module = LitXL(CFG, init_from=str(path))
    assert module.hparams["model"]["depth"] == 2 and module.hparams["init_from"] is None
    started, saved = module.model.state_dict(), trained.model.state_dict()
    assert started.keys() == saved.keys() and all(started[k].equal(saved[k]) for k in saved)


def test_decoding_replayed_as_a_cuda_graph_is_refused_for_a_memory_that_grows():
    """A graph replays one fixed shape; a Transformer-XL's memory grows with the text (sample --cuda_graph)."""
    with pytest.raises(ValueError, match="a Transformer-XL's memory grows: leave it off"):
        model_of(CFG).generate(torch.zeros(1, 3, dtype=torch.long), 2, cuda_graph=True)


@pytest.mark.parametrize("cfg, options", [(CFG, dict(eval_same_length=True)), (replace(CFG, same_length=True), {})])
def test_evaluating_with_same_length_and_no_memory_is_refused(cfg, options):
    """Every byte would see eval_mem_len keys: 0 of them, not even itself (a memory of 0 was let through when the
    training memory was not 0)."""
    with pytest.raises(ValueError, match="model.eval_mem_len 0 with same_length"):
        LitXL(cfg, eval_mem_len=0, **options)
    LitXL(cfg, eval_mem_len=1, **options)


def test_the_authors_state_dict_maps_one_to_one():
    model = model_of(replace(CFG, untie_r=False))
    names = authors_names(CFG.depth, untie_r=False)
    state = {theirs: model.state_dict()[ours] for ours, theirs in names.items()}
    state["crit.out_layers.0.weight"] = state["word_emb.emb_layers.0.weight"]
    state["pos_emb.inv_freq"] = torch.zeros(16)
    converted = from_authors(state, pre_norm=False, context=6, mem_len=7, clamp_len=9)
    assert converted.cfg == replace(CFG, ff_hidden=128)
    ids = torch.randint(CFG.vocab_size, (2, 18))
    assert segments(converted, ids, 6).equal(segments(model, ids, 6))


def authors_state(depth: int = 2) -> dict:
    model = model_of(replace(CFG, depth=depth))
    return {theirs: model.state_dict()[ours] for ours, theirs in authors_names(depth, False).items()}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.pop("layers.1.dec_attn.r_net.weight"), "r_net.weight' as floats of shape (32, 32), and it lacks"),
        (lambda s: s.update({"layers.0.dec_attn.extra": torch.zeros(1)}), "holds 'layers.0.dec_attn.extra'"),
        (lambda s: s.update({"layers.1.pos_ff.CoreNet.3.bias": torch.zeros(5)}), "holds torch.float32 of shape (5,)"),
        (lambda s: s.update({"crit.out_layers.0.weight": torch.zeros(40, 32)}), "not the embedding"),
        (lambda s: s.update({"r_w_bias": torch.zeros(4, 16)}), "4 heads of 16 in a width of 32"),
        (lambda s: s.update({"word_emb.emb_layers.0.weight": torch.zeros(40)}), "'word_emb.emb_layers.0.weight' as a"),
        (lambda s: s.update({"layers.0.pos_ff.CoreNet.0.weight": torch.zeros(())}), "'layers.0.pos_ff.CoreNet.0.w"),
        (lambda s: s.update({"layers.².x": torch.zeros(1)}), "holds 'layers.².x'"),  # a digit, but not decimal
        (
            lambda s: s.update({"layers.0.dec_attn.o_net.weight": torch.zeros(32, 32, dtype=torch.complex64)}),
            "needs 'layers.0.dec_attn.o_net.weight' as floats of shape (32, 32), and it holds torch.complex64",
        ),
    ],
    ids=[
        "missing",
        "extra",
        "shape",
        "untied",
        "head-width",
        "vector-embedding",
        "scalar-ff",
        "superscript",
        "complex",
    ],
)
def test_an_authors_state_dict_that_does_not_fit_is_refused_naming_the_tensor(change, message):
    state = authors_state()
    change(state)
    with pytest.raises(ValueError, match="the state dict") as e:
        from_authors(state)
    assert message in str(e.value)


def test_convert_xl_refuses_weights_that_are_not_finite_and_writes_nothing(tmp_path, capsys):
    state = authors_state()
    state["layers.1.dec_attn.qkv_net.weight"][0, 0] = float("inf")
    torch.save(state, tmp_path / "model.pt")
    fails(capsys, "convert_xl", "--state_dict", str(tmp_path / "model.pt"), "--out", str(tmp_path / "xl.ckpt"),
          message="'layers.1.dec_attn.qkv_net.weight': NaN or inf): a diverged or damaged model")  # fmt: skip
    assert not (tmp_path / "xl.ckpt").exists()


def test_convert_xl_writes_no_checkpoint_in_place_of_a_folder(tmp_path, capsys):
    """An --out that is a folder, or names one ("new/"), is refused before anything is read or written."""
    torch.save(authors_state(), tmp_path / "model.pt")
    for out in (str(tmp_path), f"{tmp_path / 'new'}/"):
        fails(capsys, "convert_xl", "--state_dict", str(tmp_path / "model.pt"), "--out", out,
              message=f"error: --out {out!r} is a folder; pass a file name, e.g. --out ")  # fmt: skip
    assert not (tmp_path / "new").exists()


def test_convert_xl_refuses_symbols_that_are_digits_but_no_decimal_number(tmp_path, capsys):
    torch.save(authors_state(), tmp_path / "model.pt")
    (tmp_path / "symbols.txt").write_text("\n".join([*map(str, range(39)), "²"]))  # int('²') fails
    fails(capsys, "convert_xl", "--state_dict", str(tmp_path / "model.pt"), "--out", str(tmp_path / "xl.ckpt"),
          "--symbols", str(tmp_path / "symbols.txt"), message="the model's 40 ids as distinct decimal")  # fmt: skip


def test_convert_xl_names_a_symbols_file_that_is_not_there_by_its_flag(tmp_path, capsys):
    torch.save(authors_state(), tmp_path / "model.pt")
    fails(capsys, "convert_xl", "--state_dict", str(tmp_path / "model.pt"), "--out", str(tmp_path / "xl.ckpt"),
          "--symbols", "-1", message="error: --symbols '-1' does not exist or is a folder")  # fmt: skip


@pytest.mark.slow
def test_convert_xl_writes_a_checkpoint_that_samples_validates_and_draws(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    state = authors_state()
    torch.save(state, tmp_path / "model.pt")
    symbols = b" etaoinshrdlucmfwypvbgkqjxzETAOINS.,;:!?"  # their ids: most frequent first
    (tmp_path / "symbols.txt").write_text("\n".join(str(b) for b in symbols))
    main(["convert_xl", "--state_dict", "model.pt", "--out", "xl.ckpt", "--symbols", "symbols.txt", "--context", "6",
          "--mem_len", "7", "--clamp_len", "9"])  # fmt: skip
    assert "converted model.pt to xl.ckpt: a LitXL of 2 blocks x 32" in capsys.readouterr().out
    main(["sample", "--ckpt_path", "xl.ckpt", "--prompt", "the cat sat on a mat", "--length", "40", "--seed", "1"])
    out = capsys.readouterr().out
    assert out.startswith("the cat sat on a mat") and len(out.rstrip("\n")) == 60
    main(["attention", "--ckpt_path", "xl.ckpt", "--text", "to be or not to be that is the question", "--out", "a.png"])
    assert "2 layers x 4 heads over 13 characters" in capsys.readouterr().out  # a segment of 6 after a memory of 7
    (tmp_path / "scored.txt").write_bytes(symbols * 11)  # every symbol: data.vocab file sizes the model by them
    main(["predict", "--config", XL_CONFIG, "--ckpt_path", "xl.ckpt", "--data.predict_path", "scored.txt",
          "--data.context", "6", "--data.vocab", "file", "--data.path", "scored.txt"])  # fmt: skip
    assert "scored.txt: " in (out := capsys.readouterr().out) and "bits per byte over 439 bytes" in out
    (tmp_path / "short.txt").write_bytes(symbols[:5])  # fewer bytes than the config's 16 evaluation streams
    main(["predict", "--config", XL_CONFIG, "--ckpt_path", "xl.ckpt", "--data.predict_path", "short.txt",
          "--data.context", "6", "--data.vocab", "file", "--data.path", "scored.txt"])  # fmt: skip
    assert "short.txt: " in (out := capsys.readouterr().out) and "bits per byte over 4 bytes" in out
    main(["export", "--ckpt_path", "xl.ckpt", "--out", "exported"])
    exported, ids = from_pretrained("exported"), torch.randint(40, (1, 18))
    assert segments(exported, ids, 6).equal(segments(from_authors(state, context=6, mem_len=7, clamp_len=9), ids, 6))
    fails(capsys, "convert_xl", "--state_dict", "model.pt", "--out", "xl.ckpt", message="already exists")

    def dies(path, data) -> None:  # a write that stops part-way, as the system's on a full disk
        with open(path, "wb") as f:
            f.write(b"half a checkpoint")
        raise OSError(28, "No space left on device", str(path))

    with monkeypatch.context() as failing:
        failing.setattr(Path, "write_bytes", dies)
        fails(capsys, "convert_xl", "--state_dict", "model.pt", "--out", "d.ckpt", "--symbols", "symbols.txt",
              message="No space left on device")  # fmt: skip
    assert not list(tmp_path.glob("*d.ckpt*"))  # no half-written file under its name, nor beside it
    fails(capsys, "convert_xl", "--state_dict", "model.pt", "--out", "b.ckpt", message="pass --symbols FILE")
    torch.save(torch.nn.Linear(2, 2), tmp_path / "pickled.pt")  # a whole model: code to run, refused
    fails(capsys, "convert_xl", "--state_dict", "pickled.pt", "--out", "c.ckpt", message="not a file of tensors")
    fails(capsys, "decode", "--ckpt_path", "xl.ckpt", "--input", "12", message="holds a LitXL; decode takes")
    fails(capsys, "export", "--ckpt_path", "xl.ckpt", "--out", "hf", "--format", "hf", message="holds a LitXL")


@pytest.mark.parametrize("n", [101, 977])
@pytest.mark.parametrize("streams", [1, 3, 16])
def test_streamed_evaluation_scores_every_byte_once(n, streams):
    data = torch.arange(n) % 251
    position = torch.arange(n)
    ds = StreamedSegments(position, 8, streams, range(streams))
    scored = []
    for i in range(len(ds)):
        x, y, fresh = ds[i]
        assert fresh == (i == 0)
        keep = y != IGNORE_INDEX
        assert (y[keep] == x[keep] + 1).all()  # each target is the byte after its input
        scored += y[keep].tolist()
    assert sorted(scored) == list(range(1, n))
    assert StreamedSegments(data, 8, streams, range(streams)).segments == len(ds)


def test_more_evaluation_streams_than_bytes_to_score_are_refused():
    """Each stream would hold at most one byte, most none: one batch of every stream, slow and memoryless."""
    StreamedSegments(torch.arange(11), 8, 10, range(10))
    with pytest.raises(DataError, match="11 streams .data.eval_batch_size x devices. for 10 bytes to score"):
        StreamedSegments(torch.arange(11), 8, 11, range(11))


def test_training_streams_are_contiguous_rows_and_each_rank_has_its_own():
    data = torch.arange(1000)
    both = [OrderedSegments(data, 10, 4, range(r * 2, r * 2 + 2)) for r in (0, 1)]
    assert len(both[0]) == (999 // 4) // 10
    for ds in both:
        for i in range(1, len(ds)):
            (x0, _, _), (x1, y1, _) = ds[i - 1], ds[i]
            assert (x1[:, 0] == x0[:, -1] + 1).all() and (y1 == x1 + 1).all()  # the row goes on where it was
        assert ds[0][2] and not ds[1][2] and ds[len(ds)][2]  # an epoch starts the streams afresh
    assert set(both[0][0][0][:, 0].tolist()).isdisjoint(both[1][0][0][:, 0].tolist())


def text_file(path: Path) -> Path:
    path.write_text(
        "".join(f"line {i}: the quick brown fox jumps over the lazy dog {i * 7 % 13}.\n" for i in range(900))
    )
    return path


def xl_args(data: Path) -> list[str]:
    return ["--config", XL_CONFIG, "--data.path", str(data), "--model.model.emb", "32", "--model.model.depth", "2",
            "--model.model.mem_len", "16", "--data.context", "8", "--data.batch_size", "4", "--data.eval_batch_size",
            "3", "--trainer.max_steps", "10", "--trainer.val_check_interval", "4", "--trainer.limit_val_batches", "3",
            "--trainer.log_every_n_steps", "1", "--model.model.dropout", "0.1", "--trainer.enable_progress_bar",
            "false", "--sample.length", "5", "--checkpoint.every_n_train_steps", "3"]  # fmt: skip


@pytest.mark.slow
def test_a_killed_xl_run_resumed_draws_the_same_segments_and_memory(tmp_path):
    """SIGKILL at step 7: resumed from step 6's checkpoint, with its memory and its streams' positions, the run ends
    as the uninterrupted one does, bit for bit (weights, optimizer, memory)."""
    from test_reliability import KILLED_RUN

    args = xl_args(text_file(tmp_path / "text.txt"))
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole.mkdir(), killed.mkdir()
    done = run_cli("fit", *args, cwd=whole)
    assert done.returncode == 0, done.stderr[-3000:]
    cut = run_process("-c", KILLED_RUN, *args, cwd=killed, env={"KILL_AT": "7"})
    assert cut.returncode == -9, cut.stderr[-3000:]
    saved = torch.load(killed / "checkpoints" / "shakespeare_xl" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 6 and saved["xl_memory"].shape == (1, 2, 4, 16, 32)
    resumed = run_cli("fit", *args, "--ckpt_path", "last", cwd=killed)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = (torch.load(d / "checkpoints" / "shakespeare_xl" / "last.ckpt", weights_only=True) for d in (whole, killed))
    same_training_state(a, b)
    assert a["xl_memory"].equal(b["xl_memory"])


def test_the_memory_goes_into_the_checkpoint_and_comes_back_bit_for_bit():
    fitting = SimpleNamespace(world_size=1, global_rank=0, global_step=5, state=SimpleNamespace(fn="fit"))
    module = LitXL(replace(CFG, vocab_size=256))
    module._trainer = fitting
    module.memory = [torch.randn(2, 5, 32) for _ in range(3)]
    checkpoint = {}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint["xl_memory"].shape == (1, 3, 2, 5, 32)
    other = LitXL(replace(CFG, vocab_size=256))
    other._trainer = fitting
    other.on_load_checkpoint(checkpoint)
    assert all(a.equal(b) for a, b in zip(other.memory, module.memory, strict=True))
    with pytest.raises(ValueError, match="of 1 processes and this run has 2"):
        other._trainer = SimpleNamespace(world_size=2, global_rank=0, state=SimpleNamespace(fn="fit"))
        other.on_load_checkpoint(checkpoint)
    other._trainer = fitting
    for damaged in (
        checkpoint["xl_memory"][..., :7],
        checkpoint["xl_memory"].long(),
        [1, 2],
        checkpoint["xl_memory"][0],
    ):
        with pytest.raises(ValueError, match=r"the checkpoint's memory is no float tensor of \(processes, 3 layers"):
            other.on_load_checkpoint({"xl_memory": damaged})  # a width, a dtype or a layout that no step could read


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model.model.mem_len", "100001"], "model.model.mem_len: 100001 is not an integer in [0, 100,000]"),
        (["--data.context", "0"], "data.context: 0 is not an integer in [1, 16,777,216]"),
        (["--model.eval_mem_len", "200000"], "model.eval_mem_len: 200000 is not an integer in [0, 100,000]"),
        (["--model.model.kv_heads", "2"], "Transformer-XL has no such option"),
        (["--data.class_path", "transformers_scratch.data.TextDataModule"], "a LitXL reads OrderedTextDataModule's"),
    ],
    ids=["memory", "segment", "eval-memory", "kv-heads", "random-windows"],
)
def test_hostile_xl_settings_get_one_line(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    data = text_file(tmp_path / "text.txt")
    fails(capsys, "fit", *xl_args(data), "--trainer.max_steps", "1", *args, message=message)


@pytest.mark.parametrize("settings", [{"eval_mem_len": 10**6}, {"eval_clamp_len": 0}, {"eval_mem_len": None, "model": {
    "mem_len": -1}}])  # fmt: skip
def test_an_xl_module_from_a_checkpoints_settings_meets_the_bounds_of_its_types(settings):
    """A module built from a checkpoint's hyper-parameters (not through the command line) checks them too."""
    with pytest.raises(ValueError, match=r"is not an integer in \[|is not a positive integer"):
        LitXL(**{"model": XLConfig(vocab_size=8, context=8, emb=16, heads=2, depth=1), **settings})


@pytest.mark.slow
def test_resuming_an_xl_run_needs_its_memory_and_its_kind_of_config(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = text_file(tmp_path / "text.txt")
    main(["fit", *xl_args(data), "--trainer.max_steps", "3", "--trainer.logger", "false"])
    capsys.readouterr()
    last = tmp_path / "checkpoints" / "shakespeare_xl" / "last.ckpt"
    tiny = str(ROOT / "configs" / "tiny_charlm.yaml")
    fails(capsys, "fit", "--config", tiny, "--data.path", str(data), "--ckpt_path", str(last),
          message="holds a LitXL and this config runs a LitCharLM")  # fmt: skip
    checkpoint = torch.load(last, weights_only=True)
    del checkpoint["xl_memory"]
    torch.save(checkpoint, tmp_path / "no_memory.ckpt")
    fails(capsys, "fit", *xl_args(data), "--trainer.max_steps", "5", "--ckpt_path", "no_memory.ckpt",
          "--name", "again", message="holds no Transformer-XL memory")  # fmt: skip
    fails(capsys, "fit", *xl_args(data), "--trainer.max_steps", "5", "--ckpt_path", "last", "--data.batch_size", "2",
          message="the memory holds 4 streams and the batch has 2 rows")  # fmt: skip


@pytest.mark.slow
def test_validation_and_test_score_every_byte_whatever_the_memory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = text_file(tmp_path / "text.txt")
    main(["fit", *xl_args(data), "--trainer.max_steps", "2", "--trainer.logger", "false"])
    last = str(tmp_path / "checkpoints" / "shakespeare_xl" / "last.ckpt")
    module = LitXL.load_from_checkpoint(last, weights_only=True).eval()
    from transformers_scratch.data import OrderedTextDataModule

    dm = OrderedTextDataModule(path=str(data), context=8, batch_size=4, eval_batch_size=3)
    dm.setup("validate")
    for mem in (0, 5, 100):
        module.eval_options["mem_len"] = mem
        module.on_validation_epoch_start()
        counted = sum(int(module.scored_bits(batch)[1]) for batch in dm.val_dataloader())
        assert counted == len(dm.splits["val"]) - 1
    capsys.readouterr()
    main(["context", "--ckpt_path", last, "--data_path", str(data), "--batch_size", "3", "--eval_mem_len", "[0, 5]",
          "--bins", "2", "--csv", "ctx.csv"])  # a curve for each memory  # fmt: skip
    assert capsys.readouterr().out.startswith("positions\tshakespeare_xl, memory 0\tshakespeare_xl, memory 5\n")
    with open("ctx.csv", newline="") as table:  # a curve's name holds a comma: quoted, four fields a row
        rows = list(csv.reader(table))
    assert {len(row) for row in rows} == {4} and rows[1][:2] == ["shakespeare_xl, memory 0", "1"]


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs the gloo backend")
def test_two_processes_walk_their_own_streams_and_both_memories_are_saved(tmp_path):
    script = tmp_path / "ddp_fit.py"
    script.write_text(DDP_RUN)
    data = text_file(tmp_path / "text.txt")
    args = [*xl_args(data), "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.max_steps", "3",
            "--trainer.val_check_interval", "3", "--sample.length", "0"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "WANDB_MODE": "offline"}
    done = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    firsts = [torch.load(tmp_path / f"rows{r}.pt") for r in (0, 1)]
    assert set(firsts[0]).isdisjoint(firsts[1])  # different streams
    memory = torch.load(tmp_path / "checkpoints" / "shakespeare_xl" / "last.ckpt", weights_only=True)["xl_memory"]
    assert memory.shape == (2, 2, 4, 16, 32) and not memory[0].equal(memory[1])


DDP_RUN = """
import sys
import lightning as L
import torch
from transformers_scratch.cli import build_cli

class Rows(L.Callback):
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == 0:
            torch.save([bytes(row.tolist()) for row in batch[0].byte()], f"rows{trainer.global_rank}.pt")

run = build_cli(sys.argv[1:], run=False)
run.trainer.callbacks.append(Rows())
run.trainer.fit(run.model, datamodule=run.datamodule)
"""

"""The encoder-decoder end to end: generated transduction tasks, LitSeq2Seq, the configs, decode and export."""

import os
import random
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from inprocess import run_cli as cli

from transformers_scratch import EncoderDecoder, EncoderDecoderConfig, from_pretrained
from transformers_scratch.data import IGNORE_INDEX as IGNORE
from transformers_scratch.data import TransductionDataModule, transduction
from transformers_scratch.data.transduction import TrainingBatches, collate, decode, draw, encode, example, split_of
from transformers_scratch.training.modules import LitSeq2Seq
from transformers_scratch.training.optim import OptimConfig

ROOT = Path(__file__).resolve().parents[1]
REVERSE = str(ROOT / "configs" / "seq2seq_reverse.yaml")
TINY = ["--model.model.emb", "32", "--model.model.heads", "2", "--model.model.depth", "1",
        "--model.model.decoder_depth", "1", "--data.max_length", "4", "--data.val_size", "20",
        "--data.test_size", "20", "--data.batch_size", "16", "--trainer.max_steps", "4",
        "--data.batches_per_epoch", "2", "--trainer.logger", "false",
        "--trainer.enable_progress_bar", "false"]  # fmt: skip


# ---- the tasks --------------------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["reverse", "sort", "add"])
def test_each_task_pairs_a_source_with_its_answer_at_lengths_in_the_range(task):
    rng = random.Random(0)
    for _ in range(500):
        src, tgt = example(task, rng, 2, 5)
        if task == "add":
            a, b = src.split("+")
            assert all(2 <= len(n) <= 5 for n in (a, b)) and int(tgt) == int(a) + int(b)
            assert all(n == str(int(n)) for n in (a, b, tgt))  # numbers as written: no leading zeros
        else:
            assert 2 <= len(src) <= 5 and set(src) <= set("0123456789")
            assert tgt == (src[::-1] if task == "reverse" else "".join(sorted(src)))


@pytest.mark.parametrize("task", ["reverse", "add"])
def test_no_validation_or_test_example_is_ever_a_training_example(task):
    data = TransductionDataModule(task=task, min_length=1, max_length=3, val_size=20, test_size=20, batch_size=64)
    data.setup("fit")
    val, test = {s for s, _ in data.sets["val"]}, {s for s, _ in data.sets["test"]}
    assert len(val) == 20 and len(test) == 20 and not val & test
    trained = set()
    for i in range(100):  # 6,400 training examples, far more than the 1,000 sources of length 3
        src, mask, _, _ = TrainingBatches(task, 1, 3, 64, seed=1234)[i]
        trained |= {decode([*row[m].tolist(), EncoderDecoder.EOS]) for row, m in zip(src, mask, strict=True)}
    assert trained and not trained & (val | test)
    assert {split_of(s) for s in trained} == {"train"}


@pytest.mark.slow
def test_the_splits_and_batches_are_the_same_in_every_process():
    """Python salts str hashes per process; the sets and batches must not depend on that."""
    code = (
        "from transformers_scratch.data import TransductionDataModule as T; from transformers_scratch.data."
        "transduction import TrainingBatches as B; d = T(max_length=6, val_size=5, test_size=5); d.setup('fit'); "
        "print(d.sets['val'], d.sets['test'], B('reverse', 1, 6, 4, 7)[3][0].tolist())"
    )
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}  # fmt: skip
    assert len(outs) == 1


def test_a_batch_teaches_begin_then_target_then_end():
    src, mask, tgt_in, tgt_out = collate([("123", "321"), ("4", "4")])
    assert mask.tolist() == [[True] * 3, [True, False, False]]
    assert tgt_in[:, 0].tolist() == [EncoderDecoder.BOS] * 2
    assert tgt_out[0].tolist() == [*encode("321"), EncoderDecoder.EOS]
    assert tgt_out[1].tolist() == [*encode("4"), EncoderDecoder.EOS, IGNORE, IGNORE]
    assert torch.equal(tgt_in[0, 1:], tgt_out[0, :-1])  # teacher forcing: the input is the target shifted right


def test_bad_settings_get_one_clear_error(monkeypatch):
    with pytest.raises(ValueError, match="data.min_length 5 and data.max_length 3"):
        TransductionDataModule(min_length=5, max_length=3)
    with pytest.raises(ValueError, match="data.val_size 500 is more than the"):
        TransductionDataModule(max_length=1, val_size=500).setup("fit")  # only 10 sources of one digit
    draws = []  # a split that runs dry is said to once it stops giving new sources: not after 200 draws an example
    monkeypatch.setattr(transduction, "draw", lambda *a: draws.append(1) or draw(*a))
    with pytest.raises(ValueError, match="data.val_size 600 is more than the 486 distinct val examples found"):
        TransductionDataModule(task="add", max_length=2, val_size=600).setup("fit")
    assert 0 < len(draws) < 100_000  # it drew 20,000,000 sources, for minutes
    draws.clear()  # far more than the split holds (one source in 20): refused before a draw, not after minutes
    with pytest.raises(ValueError, match="data.val_size 100000 is more than the about 50,000 distinct val examples"):
        TransductionDataModule(task="add", max_length=3, val_size=100_000).setup("fit")
    assert not draws  # and a space of 8,000-digit counts is no float: the check does not overflow
    assert len(TransductionDataModule(task="add", max_length=4_096, val_size=100_000).held_out("val", 3)) == 3
    # add's numbers print with up to 4,300 digits; a held-out set is drawn whole, one by one
    for setting, value, bound in (("max_length", 4097, "[1, 4,096]"), ("val_size", 100_001, "[1, 100,000]")):
        with pytest.raises(ValueError, match=rf"data.{setting}={value} is not an integer in \{bound}"):
            TransductionDataModule(**{setting: value})
    with pytest.raises(ValueError, match="'x' in '1x' is not in the tasks' alphabet"):
        encode("1x")
    with pytest.raises(ValueError, match=r"label_smoothing=1.0 is not a number in \[0.0, 1.0\)"):
        LitSeq2Seq({"vocab_size": 14, "context": 8, "emb": 16, "heads": 2, "depth": 1}, label_smoothing=1.0)


# ---- the module -------------------------------------------------------------------------------------
def test_exact_match_needs_the_whole_target_and_the_end():
    _, _, _, tgt_out = collate([("12", "21"), ("3", "3"), ("45", "54")])
    eos = EncoderDecoder.EOS
    decoded = torch.tensor([[*encode("21"), eos], [*encode("3"), eos, 0], [*encode("54"), 5]])  # last: no end
    assert LitSeq2Seq.exact_match(decoded, tgt_out).tolist() == [1.0, 1.0, 0.0]
    early = torch.tensor([[eos], [eos], [eos]])  # every row ended at once: shorter than the targets
    assert LitSeq2Seq.exact_match(early, tgt_out).tolist() == [0.0, 0.0, 0.0]


def test_teacher_forcing_runs_the_decoder_once_per_batch(monkeypatch):
    module = LitSeq2Seq({"vocab_size": 14, "context": 8, "emb": 16, "heads": 2, "depth": 1})
    calls = []
    real = module.model.decoder.forward
    monkeypatch.setattr(module.model.decoder, "forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(module, "should_log", lambda: False)
    loss = module.training_step(collate([("123", "321"), ("4", "4")]), 0)
    assert len(calls) == 1 and loss.ndim == 0 and torch.isfinite(loss)


def test_label_smoothing_changes_the_training_loss_only():
    cfg = {"vocab_size": 14, "context": 8, "emb": 16, "heads": 2, "depth": 1}
    torch.manual_seed(0)
    plain = LitSeq2Seq(cfg)
    smooth = LitSeq2Seq(cfg, label_smoothing=0.1)
    smooth.load_state_dict(plain.state_dict())
    batch = collate([("123", "321"), ("4", "4")])
    losses = []
    for module in (plain, smooth):
        module.should_log = lambda: False
        losses.append(module.training_step(batch, 0).item())
    assert losses[0] != losses[1]


@pytest.mark.slow
def test_the_module_learns_to_reverse_unseen_strings(tmp_path):
    """A small encoder-decoder, trained through Lightning on the data module, decodes held-out sources."""
    torch.manual_seed(0)
    data = TransductionDataModule(task="reverse", max_length=4, batch_size=32, batches_per_epoch=400, val_size=40,
                                  test_size=40)  # fmt: skip
    module = LitSeq2Seq({"vocab_size": data.vocab_size, "context": data.context, "emb": 64, "heads": 4, "depth": 2},
                        OptimConfig(lr=2e-3, warmup_steps=50, weight_decay=0.0))  # fmt: skip
    trainer = L.Trainer(accelerator="cpu", max_steps=400, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(module, data)
    result = trainer.test(module, data, verbose=False)[0]
    assert result["test/exact"] >= 0.9, result


# ---- the commands -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny reverse model fitted through the CLI (context 5: sources of up to 4 digits)."""
    cwd = tmp_path_factory.mktemp("seq2seq")
    fit = cli("fit", "--config", REVERSE, *TINY, cwd=cwd)
    assert fit.returncode == 0, fit.stderr[-3000:]
    return cwd, "checkpoints/seq2seq_reverse/last.ckpt"


@pytest.mark.slow
def test_fit_test_decode_and_export_through_the_cli(trained):
    tmp_path, ckpt = trained
    test = cli("test", "--config", REVERSE, *TINY, "--ckpt_path", ckpt, cwd=tmp_path)
    assert test.returncode == 0 and "test/exact" in test.stdout, test.stderr[-3000:]

    (tmp_path / "inputs.txt").write_text("1234\n\n42\n")
    decoded = cli("decode", "--ckpt_path", ckpt, "--input_file", "inputs.txt", cwd=tmp_path)
    assert decoded.returncode == 0, decoded.stderr[-3000:]
    lines = decoded.stdout.splitlines()
    assert len(lines) == 3 and lines[1] == "" and all(set(line) <= set("0123456789+") for line in lines)
    module = LitSeq2Seq.load_from_checkpoint(tmp_path / ckpt, map_location="cpu", weights_only=True)
    src, mask, _, _ = collate([("1234", ""), ("42", "")])
    expected = [decode(row.tolist()) for row in module.greedy(src, mask, module.model.cfg.context)]
    assert lines[::2] == expected  # output line N is source line N's: the blank one stays blank

    predicted = cli("predict", "--config", REVERSE, *TINY, "--ckpt_path", ckpt, cwd=tmp_path)  # decode's job
    assert predicted.returncode == 1 and "error: predict reads no file for a LitSeq2Seq: its sources are decoded by " \
        "`cli.py decode" in predicted.stderr and "Traceback" not in predicted.stderr  # fmt: skip

    exported = cli("export", "--ckpt_path", ckpt, "--out", "exported", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    model = from_pretrained(tmp_path / "exported")
    assert isinstance(model, EncoderDecoder) and isinstance(model.cfg, EncoderDecoderConfig)
    tgt = torch.tensor([[EncoderDecoder.BOS, 5, 6]] * 2)
    with torch.no_grad():
        assert torch.equal(model.eval()(src, tgt, mask), module.model(src, tgt, mask))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "12x"], "character 'x' in '12x' is not in the tasks' alphabet"),
        (["--input", "1" * 9], "--input: '111111111' has 9 characters, more than the model's context 5"),
        (["--input_file", "long.txt"], "--input_file 'long.txt' line 2: '111111111' has 9 characters, more than the"),
        ([], "give the source with --input TEXT or --input_file FILE"),
        (["--input", "1", "--input_file", "f.txt"], "give the source with --input TEXT or --input_file FILE"),
        (["--input_file", "missing.txt"], "--input_file 'missing.txt' does not exist"),
        (["--input_file", "sep.txt"], "line 2: character '\\x0c' in '3\\x0c4'"),  # a line as wc -l counts it
    ],
)
def test_decode_refuses_bad_input_with_one_line(trained, args, message):
    cwd, ckpt = trained
    (cwd / "long.txt").write_text("12\n111111111\n")
    (cwd / "sep.txt").write_text("12\n3\f4\n")  # str.splitlines() would split at the form feed
    result = cli("decode", "--ckpt_path", ckpt, *args, cwd=cwd)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.count("error:") == 1 and message in result.stderr, result.stderr[-2000:]

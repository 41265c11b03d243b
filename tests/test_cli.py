"""The product through its front door: the command line (in this process, and once as ``python cli.py``), on a
CPU, with no network."""

import csv
import gzip
import json
import math
import os
import re
import shutil
import site
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
import torch
from inprocess import Ran, run_cli, run_process
from lightning.pytorch.cli import LightningCLI

from transformers_scratch.cli import build_cli

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
OVERLAYS = {
    "extrapolate.yaml": ["tiny_charlm.yaml"],
    "extrapolate_enwik8.yaml": ["tiny_charlm.yaml", "extrapolate.yaml"],
    "shakespeare_char_cpu.yaml": ["shakespeare_char.yaml"],
    "imdb_cpu.yaml": ["imdb.yaml"],
    "imdb_best.yaml": ["imdb.yaml"],
    "imdb_finetune.yaml": ["imdb.yaml"],
    "stdlib_stage1.yaml": ["stdlib_dense.yaml"],
    "stdlib_sparse.yaml": ["stdlib_dense.yaml"],
    "stdlib_sparse_fixed.yaml": ["stdlib_dense.yaml"],
    "stdlib_dense_long.yaml": ["stdlib_dense.yaml"],
}  # configs that change other configs: tested on top of them
TINY_LM = str(ROOT / "configs" / "tiny_charlm.yaml")
TINY_IMDB = str(ROOT / "configs" / "tiny_imdb.yaml")
IMDB_TARBALL = ROOT.parent / "shared" / "data" / "aclImdb_v1.tar.gz"
FAST = ["--trainer.max_steps", "6", "--data.batches_per_epoch", "3", "--trainer.limit_val_batches", "2",
        "--trainer.log_every_n_steps", "1", "--sample.length", "20"]  # fmt: skip


def cli_process(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python cli.py ARGS`` in a new process, as a user types it (for what is about processes and start-up)."""
    return run_process(str(ROOT / "cli.py"), *args, cwd=cwd, env=env)


cli = run_cli  # everything else: the same entry point inside this process (tests/inprocess.py)


def corpus(path: Path, n: int = 60_000) -> Path:
    g = torch.Generator().manual_seed(0)
    words = "the cat sat on a mat while one dog ran far away to see its friend".split()
    idx = torch.randint(len(words), (n // 4,), generator=g).tolist()
    path.write_text(" ".join(words[i] for i in idx)[:n])
    return path


def assert_fails_cleanly(result: Ran | subprocess.CompletedProcess, message: str) -> None:
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.count("error:") == 1, result.stderr[-3000:]
    assert message in result.stderr, result.stderr[-3000:]


# ---- configs ----------------------------------------------------------------------------------------
CLIPPED_AT = {"enwik8_xl.yaml": 0.25}  # the Transformer-XL authors' clipping; every other config clips at 1


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_every_config_instantiates(config, monkeypatch):
    base = [arg for name in OVERLAYS.get(config.name, []) for arg in ("--config", str(ROOT / "configs" / name))]
    monkeypatch.chdir(ROOT)
    extra, text = [], IMDB_TARBALL.parent / "tinyshakespeare.txt"  # what `download: tinyshakespeare` fetches
    names = [*OVERLAYS.get(config.name, []), config.name]
    if "tinyshakespeare" in "".join((ROOT / "configs" / name).read_text() for name in names):
        if not text.exists():
            pytest.skip("needs ../shared/data/tinyshakespeare.txt (no network here)")
        extra = ["--data.path", str(text)]
    run = build_cli([*base, "--config", str(config), *extra], run=False)
    cfg = run.model.model.cfg
    assert cfg.vocab_size == run.datamodule.vocab_size  # linked, never typed twice
    assert cfg.context == run.datamodule.context
    assert run.trainer.gradient_clip_val == CLIPPED_AT.get(config.name, 1.0)
    if hasattr(run.datamodule, "num_classes"):
        assert cfg.num_classes == run.datamodule.num_classes == 2
    dumps = []
    for dump_config in (type(run)._dump_config, LightningCLI._dump_config):  # what the modules' hparams record
        del run.config_dump
        dump_config(run)
        dumps.append(run.config_dump)
    assert dumps[0] == dumps[1]


def test_enwik8_config_has_the_tutorials_sizes(tmp_path):
    result = cli("fit", "--config", str(ROOT / "configs" / "enwik8.yaml"), "--print_config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for line in (
        "depth: 12",
        "emb: 256",
        "context: 256",
        "heads: 8",
        "batch_size: 32",
        "warmup_steps: 5000",
        "gradient_clip_val: 1.0",
        "precision: bf16-mixed",
        "temperature: 0.5",  # the sample callback's
        "length: 600",
    ):
        assert line in out, line


# ---- the character LM, end to end -------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A few steps of the tiny LM on a generated file, with a file-derived vocabulary."""
    cwd = tmp_path_factory.mktemp("lm")
    data = corpus(cwd / "text.txt")
    result = cli("fit", "--config", TINY_LM, "--data.path", str(data), "--data.vocab", "file",
                 *FAST, cwd=cwd)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd, data, result


def test_fit_writes_checkpoints_logs_and_an_offline_wandb_run(trained):
    cwd, _, result = trained
    ckpt = cwd / "checkpoints" / "tiny_charlm" / "last.ckpt"
    assert ckpt.is_file()
    assert torch.load(ckpt, weights_only=True)["global_step"] == 6
    assert len(list((cwd / "checkpoints" / "tiny_charlm").glob("step*-bpc*.ckpt"))) == 1  # the best by val/bpc
    assert "W&B (offline in logs/wandb)" in result.stderr.splitlines()[0]  # the header says where
    assert "upload with `wandb sync logs/wandb/offline-run-*`" in result.stderr  # and the end how to upload
    assert list((cwd / "logs" / "wandb").glob("offline-run-*"))
    metrics = (cwd / "logs" / "tiny_charlm" / "version_0" / "metrics.csv").read_text()
    for name in ("train/loss", "train/bpc", "val/bpc", "train/tokens_per_s"):
        assert name in metrics
    assert "--- sample at step" in result.stdout + result.stderr


@pytest.mark.slow
def test_a_cheap_validation_during_fit_is_followed_by_one_over_the_whole_split(tmp_path):
    """trainer.limit_val_batches keeps the frequent validations cheap; after fit the model is scored once on the
    whole validation split: the number `validate` gives for last.ckpt. The step keeps its one sample, and
    phases.json says where the run's time went. --final_validation false leaves the last check out."""
    data = corpus(tmp_path / "text.txt")
    small = ["--data.path", str(data), "--data.vocab", "file", *FAST, "--data.batch_size", "4"]  # 12 val batches
    result = cli("fit", "--config", TINY_LM, *small, cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 0, result.stderr[-3000:]
    assert "final validation over the whole validation split (12 batches): val/bpc" in out
    assert out.count("--- sample at step 6") == 1
    rows = list(csv.DictReader((tmp_path / "logs" / "tiny_charlm" / "version_0" / "metrics.csv").open()))
    final = float([r for r in rows if r.get("val/bpc")][-1]["val/bpc"])
    check = cli("validate", "--config", TINY_LM, *small, "--trainer.limit_val_batches", "1.0", "--ckpt_path",
                "checkpoints/tiny_charlm/last.ckpt", "--trainer.logger", "false", cwd=tmp_path)  # fmt: skip
    assert check.returncode == 0, check.stderr[-3000:]
    printed = re.search(r"val/bpc\W+([0-9.]+)", check.stdout)  # Lightning's table, plain or boxed (with rich)
    assert math.isclose(final, float(printed[1]), rel_tol=1e-5)
    phases = json.loads((tmp_path / "logs" / "tiny_charlm" / "version_0" / "phases.json").read_text())
    assert phases["fit_start"] <= phases["first_batch"] and phases["train_s"] > 0
    assert phases["val_s"] > phases["sample_s"] > 0

    again = cli("fit", "--config", TINY_LM, *small, "--name", "no_final", "--final_validation", "false", cwd=tmp_path)
    assert again.returncode == 0 and "final validation" not in again.stdout + again.stderr, again.stderr[-3000:]


def test_a_fit_that_ends_before_its_first_validation_keeps_last_ckpt_without_lightnings_misleading_hint(tmp_path):
    """A smoke run shorter than the validation interval has no score to rank checkpoints by: last.ckpt holds it,
    and Lightning's warning, whose hint asks whether the module logs its metric (it does), is not shown."""
    data = corpus(tmp_path / "text.txt")
    result = cli(
        "fit",
        "--config",
        TINY_LM,
        "--data.path",
        str(data),
        "--trainer.max_steps",
        "2",
        "--final_validation",
        "false",
        "--sample.length",
        "0",
        cwd=tmp_path,
    )  # validation: at 250 steps
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "checkpoints" / "tiny_charlm" / "last.ckpt").is_file()
    assert "could not find the monitored key" not in result.stderr, result.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("config", ["tiny_charlm", "seq2seq_reverse"])
def test_overfit_batches_trains_on_the_same_batches_and_overfits_them(tmp_path, config):
    """Lightning's overfit_batches lists the training set's items in order: the batches drawn by number (a
    random window, a generated sum) have an epoch's length for it."""
    data = ["--data.path", str(corpus(tmp_path / "text.txt"))] if config == "tiny_charlm" else []
    result = cli("fit", "--config", str(ROOT / "configs" / f"{config}.yaml"), *data, "--trainer.overfit_batches", "1",
                 "--trainer.max_steps", "30", "--trainer.log_every_n_steps", "1", "--sample.length", "0",
                 "--data.batch_size", "8", "--final_validation", "false", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "logs" / config / "version_0" / "metrics.csv").open()))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert losses[-1] < 0.6 * losses[0]  # one batch, learnt


@pytest.mark.slow
def test_resume_continues_from_last(trained):
    cwd, data, _ = trained
    result = cli("fit", "--config", TINY_LM, "--data.path", str(data), "--data.vocab", "file",
                 *FAST, "--trainer.max_steps", "9", "--ckpt_path", "last", cwd=cwd)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from checkpoints/tiny_charlm/last.ckpt\nrun tiny_charlm: checkpoints in" in result.stderr
    assert torch.load(cwd / "checkpoints" / "tiny_charlm" / "last.ckpt", weights_only=True)["global_step"] == 9


def test_test_prints_bits_per_byte(trained):
    cwd, data, _ = trained
    result = cli(
        "test",
        "--config",
        TINY_LM,
        "--data.path",
        str(data),
        "--data.vocab",
        "file",
        "--ckpt_path",
        "checkpoints/tiny_charlm/last.ckpt",
        "--trainer.logger",
        "false",
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test/bpc" in result.stdout
    assert "contiguous windows of 64 bytes" in result.stdout + result.stderr  # the protocol is named


def test_predict_scores_a_file(trained):
    cwd, data, _ = trained
    (cwd / "score.txt").write_text("the dog sat on the mat " * 20)
    (cwd / "config.yaml").write_text("mine\n")  # a user's own file where Lightning would write a run's config
    result = cli("predict", "--config", TINY_LM, "--data.path", str(data), "--data.vocab", "file",
                 "--data.predict_path", "score.txt", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt",
                 "--trainer.logger", "false", cwd=cwd)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "score.txt: " in result.stdout and "bits per byte over 459 bytes" in result.stdout  # 460 - the first
    assert (cwd / "config.yaml").read_text() == "mine\n"  # no logger, no run folder: nothing written here
    assert not (cwd / "phases.json").exists()


def test_sample_prints_text_that_begins_with_the_prompt(trained):
    cwd, _, _ = trained
    result = cli("sample", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt", "--prompt", "the cat ",
                 "--length", "50", "--seed", "0", cwd=cwd)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("the cat ") and len(result.stdout.rstrip("\n")) == len("the cat ") + 50


def test_samples_are_reproducible_by_seed_and_several_differ(trained):
    cwd = trained[0]
    (cwd / "prompt.txt").write_text("the dog ")
    args = ["sample", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt", "--length", "40", "--temperature", "1.0",
            "--top_p", "0.95"]  # fmt: skip
    three = cli(*args, "--prompt_file", "prompt.txt", "--num_samples", "3", "--seed", "1", cwd=cwd)
    assert three.returncode == 0, three.stderr
    samples = three.stdout.rstrip("\n").split("\n---\n")
    assert len(samples) == 3 and len(set(samples)) == 3  # three different samples
    assert all(x.startswith("the dog ") and len(x) == len("the dog ") + 40 for x in samples)
    again = cli(*args, "--prompt", "the dog ", "--num_samples", "3", "--seed", "1", cwd=cwd)
    assert again.stdout == three.stdout  # the same seed, the same text (the prompt from a file or the flag)
    other = cli(*args, "--prompt", "the dog ", "--num_samples", "3", "--seed", "2", cwd=cwd)
    assert other.stdout != three.stdout


def test_sample_needs_one_prompt_and_a_sane_count(trained):
    cwd, ckpt = trained[0], "checkpoints/tiny_charlm/last.ckpt"
    assert_fails_cleanly(cli("sample", "--ckpt_path", ckpt, cwd=cwd), "--prompt TEXT or --prompt_file FILE")
    both = cli("sample", "--ckpt_path", ckpt, "--prompt", "a", "--prompt_file", "p.txt", cwd=cwd)
    assert_fails_cleanly(both, "(one of the two)")
    missing = cli("sample", "--ckpt_path", ckpt, "--prompt_file", "nope.txt", cwd=cwd)
    assert_fails_cleanly(missing, "--prompt_file 'nope.txt' does not exist")
    many = cli("sample", "--ckpt_path", ckpt, "--prompt", "the ", "--num_samples", "0", cwd=cwd)
    assert_fails_cleanly(many, "num_samples: 0 is not an integer in [1, 1,000]")
    for flag, bad, bound in (
        ("top_p", "0", "is not a number in (0.0, 1.0]"),
        ("top_p", "1.5", "is not a number in (0.0, 1.0]"),
        ("temperature", "-1", "is not a non-negative number"),
        ("top_k", "0", "is not a positive integer"),
        ("seed", "-1", "is not an integer in [0, 9,223,372,036,854,775,807]"),
    ):
        refused = cli("sample", "--ckpt_path", ckpt, "--prompt", "the ", f"--{flag}", bad, cwd=cwd)
        assert_fails_cleanly(refused, f"{flag}: ")
        assert bad in refused.stderr and bound in refused.stderr, refused.stderr
    graph = cli("sample", "--ckpt_path", ckpt, "--prompt", "the ", "--cuda_graph", "true", "--cache", "false", cwd=cwd)
    assert_fails_cleanly(graph, "cuda_graph replays the cached one-token step on a GPU, and here the model is on")
    if not torch.cuda.is_available():
        graph = cli("sample", "--ckpt_path", ckpt, "--prompt", "the ", "--cuda_graph", "true", cwd=cwd)
        assert_fails_cleanly(graph, "on cpu; leave cuda_graph off (or run on a GPU with the cache on)")


def test_export_writes_a_model_that_loads_without_the_project_cli(trained):
    from transformers_scratch import from_pretrained
    from transformers_scratch.training.checkpoints import Checkpoint
    from transformers_scratch.training.modules import LitCharLM

    cwd, ckpt = trained[0], "checkpoints/tiny_charlm/last.ckpt"
    result = cli("export", "--ckpt_path", ckpt, "--out", "exported", cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert "exported LitCharLM's model to exported/ (model.safetensors, config.json)" in result.stdout
    module, vocab = Checkpoint(str(cwd / ckpt)).trained(LitCharLM)
    x = vocab.encode_text("the cat sat")  # (1, t)
    assert torch.equal(from_pretrained(cwd / "exported")(x), module.model(x))
    config = json.loads((cwd / "exported" / "config.json").read_text())
    assert config["model"] == "CausalLM" and bytes(config["vocab"]["bytes"]) == vocab.symbols  # a file vocabulary
    again = cli("export", "--ckpt_path", ckpt, "--out", "exported", cwd=cwd)
    assert_fails_cleanly(again, "--out 'exported' already holds model.safetensors and config.json; pass another")
    again = cli("export", "--ckpt_path", ckpt, "--out", "exported", "--format", "hf", cwd=cwd)
    assert_fails_cleanly(again, "--out 'exported' is not empty; pass a new or empty folder")
    onto = cli("export", "--ckpt_path", ckpt, "--out", ckpt, cwd=cwd)  # the flag at fault, not the checkpoint's
    assert_fails_cleanly(onto, f"--out {ckpt!r} is a file, and export writes a folder; pass a folder")


def test_attention_draws_every_layer_and_head_of_a_character_model(trained):
    cwd = trained[0]
    result = cli("attention", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt", "--text", "the cat sat on a mat",
                 "--max_tokens", "12", "--out", "att.png", cwd=cwd)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "wrote att.png: 4 layers x 4 heads over 12 characters" in result.stdout
    assert "note: drawing the first 12 of 20 tokens" in result.stderr
    assert (cwd / "att.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = cli("attention", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt", "--text", "x", "--max_tokens", "0",
                cwd=cwd)  # fmt: skip
    assert_fails_cleanly(empty, "max_tokens: 0 is not an integer in [1, 256]")


def test_plot_draws_a_runs_learning_curves(trained):
    cwd = trained[0]
    result = cli("plot", "logs/tiny_charlm/version_0", cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "wrote logs/tiny_charlm/version_0/curves.png: train/loss, val/bpc, lr-AdamW" in result.stdout
    assert (cwd / "logs" / "tiny_charlm" / "version_0" / "curves.png").is_file()
    missing = cli("plot", "logs/tiny_charlm/version_9", cwd=cwd)
    assert_fails_cleanly(missing, "'logs/tiny_charlm/version_9/metrics.csv' does not exist")
    whole = cli("plot", "logs/tiny_charlm", cwd=cwd)  # the run's folder, as TensorBoard takes it: its version named
    assert_fails_cleanly(whole, "pass a run's log folder such as logs/tiny_charlm/version_")
    assert re.search(r"such as logs/tiny_charlm/version_\d+ \(fit writes", whole.stderr)  # a version it holds
    pipe = cwd / "metrics.pipe"  # as <(ssh host cat logs/.../metrics.csv) hands a remote run's log over
    os.mkfifo(pipe)
    logged = (cwd / "logs" / "tiny_charlm" / "version_0" / "metrics.csv").read_bytes()
    writer = threading.Thread(target=lambda: pipe.write_bytes(logged), daemon=True)  # blocks until plot reads
    writer.start()
    piped = cli("plot", str(pipe), "--out", "piped.png", cwd=cwd)
    writer.join(timeout=5)
    assert piped.returncode == 0 and (cwd / "piped.png").is_file(), piped.stderr[-3000:]
    nowhere = cli("plot", str(pipe), cwd=cwd)  # refused before the pipe is opened
    assert_fails_cleanly(nowhere, f"run {str(pipe)!r} is a pipe, with no folder to hold the picture; pass --out ")


def test_a_learned_position_checkpoint_refuses_windows_past_its_context(trained):
    cwd, data, _ = trained
    result = cli("test", "--config", TINY_LM, "--data.path", str(data), "--data.vocab", "file", "--data.context", "128",
                 "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt", "--trainer.logger", "false", cwd=cwd)  # fmt: skip
    assert_fails_cleanly(result, "--data.context 128 > 64, the context --ckpt_path 'checkpoints/tiny_charlm/last.ckpt'"
                         " was trained at: its learned position embeddings have no vector past 64")  # fmt: skip


@pytest.mark.slow
def test_an_alibi_checkpoint_is_tested_past_its_training_context(tmp_path):
    data = corpus(tmp_path / "text.txt")
    args = ["--config", TINY_LM, "--data.path", str(data), "--model.model.positions", "alibi", "--trainer.logger",
            "false"]  # fmt: skip
    fit = cli("fit", *args, *FAST, cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    result = cli("test", *args, "--data.context", "256", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt",
                 cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "note: data.context 256, past the training context 64 (alibi positions)" in result.stderr
    assert "contiguous windows of 256 bytes" in result.stdout + result.stderr and "test/bpc" in result.stdout


def test_the_help_lists_every_command_under_the_name_it_was_invoked_by(tmp_path):
    result = cli("--help", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("usage: cli.py COMMAND")
    listed = [line.split()[0] for line in result.stdout.splitlines()[2:] if line.strip()]
    assert listed == ["fit", "validate", "test", "predict", "sample", "decode", "export", "attention", "plot",
                      "context", "convert_xl", "extrapolate", "soak"]  # fmt: skip
    sample = cli("sample", "--help", cwd=tmp_path)
    assert sample.returncode == 0 and sample.stdout.startswith("usage: cli.py sample --ckpt_path CKPT_PATH")
    assert "A LitCharLM or LitXL checkpoint written by fit" in " ".join(sample.stdout.split())  # from the docstring
    # a bound shows as what it takes, not as its class (type: <class 'Length'>)
    assert "(type: an integer in [1, 1,000,000], default: 600)" in " ".join(sample.stdout.split())


@pytest.mark.slow
def test_output_into_a_pipe_whose_reader_is_gone_ends_quietly_as_unix_tools_do(trained):
    """``cli.py sample ... | head``: once the reader has stopped, the command ends with SIGPIPE's status (141) and
    no line, neither a traceback nor an error about a pipe the user closed on purpose."""
    cwd, _, _ = trained
    ckpt = str(cwd / "checkpoints" / "tiny_charlm" / "last.ckpt")
    for args in (["--help"], ["sample", "--ckpt_path", ckpt, "--prompt", "the ", "--length", "5"]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first byte
        with os.fdopen(write, "wb") as gone:
            done = subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], cwd=cwd, stdout=gone,
                                  stderr=subprocess.PIPE, text=True, timeout=300)  # fmt: skip
        assert (done.returncode, done.stderr) == (141, ""), (args, done.stderr[-2000:])


def test_a_broken_pipe_that_is_not_the_output_is_an_error_line(tmp_path, monkeypatch):
    """Only the standard output's reader stopping ends a command quietly: a pipe broken elsewhere (a service's, a
    worker's) is a failure, and said so."""
    import transformers_scratch.training.pictures as pictures

    def broken(*_):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(pictures, "learning_curves", broken)
    (tmp_path / "metrics.csv").write_text("step,train/loss\n0,1.0\n")
    result = cli("plot", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1 and "error: [Errno 32] Broken pipe" in result.stderr, result.stderr[-2000:]


def test_every_option_of_a_command_has_its_help():
    """A command's options are its function's parameters, and each one's help is its line in the docstring."""
    import inspect

    from transformers_scratch.cli import FUNCTION_NAMES, commands

    for name in FUNCTION_NAMES:
        function = getattr(commands, name)
        unexplained = [p for p in inspect.signature(function).parameters if f"\n        {p}: " not in function.__doc__]
        assert unexplained == [], f"{name}: {unexplained}"


@pytest.mark.slow
def test_the_help_and_the_package_import_neither_torch_nor_lightning():
    """``cli.py --help`` names every command from the sources' docstrings, unimported, so it prints before torch
    (a second) or Lightning (seconds more) could load; the model's names still come from the package on first use."""
    code = ("import sys, io, contextlib\nfrom transformers_scratch.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out: main(['--help'])\n"
            "assert 'soak' in out.getvalue(), out.getvalue()\n"
            "assert not {'torch', 'lightning', 'jsonargparse'} & set(sys.modules), 'imported'\n"
            "from transformers_scratch import CausalLM\n"
            "assert 'torch' in sys.modules and CausalLM.__name__")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_only_the_subcommand_being_run_is_built():
    """Each subcommand's parser costs start-up time; a fit builds the fit parser alone."""
    from transformers_scratch.cli.lightning import CLI

    assert set(CLI.subcommands(CLI.__new__(CLI))) == {"fit", "validate", "test", "predict"}  # no argv: all
    cli = CLI.__new__(CLI)
    cli.argv = ["fit", "--config", "x.yaml"]
    assert set(cli.subcommands()) == {"fit"}
    cli.argv = ["--help"]
    assert set(cli.subcommands()) == {"fit", "validate", "test", "predict"}


@pytest.mark.slow
def test_a_config_that_names_its_loggers_leaves_the_default_list_unread_and_wandb_unimported():
    """Reading the default loggers imports W&B (0.4 s of a speedrun's start-up). A config that names its own
    replaces that list whole, so it is left unread; the config parsed is the same as when it is read."""
    code = ("import sys, io, contextlib\nfrom transformers_scratch.cli import main, lightning\n"
            "def printed(*extra):\n"
            "    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
            "        main(['fit', '--config', 'configs/speedrun_cpu.yaml', *extra, '--print_config'])\n"
            "    return out.getvalue()\n"
            "trimmed = printed()\n"
            "assert 'wandb' not in sys.modules, 'imported'\n"
            "assert 'CSVLogger' in trimmed and 'WandbLogger' not in trimmed, trimmed\n"
            "lightning.configs_name_loggers = lambda argv, configs: False\n"
            "assert printed() == trimmed\n"
            "assert 'wandb' in sys.modules\n")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_logger_named_by_its_class_alone_logs_under_the_runs_name(tmp_path, monkeypatch):
    """As the default loggers do; made outside the command line, Lightning's defaults."""
    from transformers_scratch.training.loggers import CSVLogger, WandbLogger

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    for logger in (CSVLogger, WandbLogger):
        args = ["--config", TINY_LM, "--data.path", str(corpus(tmp_path / "text.txt")), "--name", "run7",
                "--trainer.logger", f"{logger.__module__}.{logger.__name__}"]  # fmt: skip
        (made,) = build_cli(args, run=False).trainer.loggers
        assert made.name == "run7" if logger is CSVLogger else made._wandb_init["name"] == "run7"
    assert CSVLogger().name == "lightning_logs" and WandbLogger()._wandb_init["name"] is None


@pytest.mark.parametrize("flag", ["--trainer.logger.init_args.flush_logs_every_n_steps=7", "--trainer.logger+=x"])
def test_a_command_line_that_edits_the_loggers_keeps_the_default_list(flag):
    from transformers_scratch.cli.lightning import configs_name_loggers

    named = [{"trainer": {"logger": False}}]
    assert configs_name_loggers(["--config", "c.yaml"], named)
    assert not configs_name_loggers(["--config", "c.yaml", flag], named)
    assert not configs_name_loggers(["--trainer", "t.yaml", "--config", "c.yaml"], named)
    assert not configs_name_loggers(["--config", "c.yaml"], [{"trainer": {"max_steps": 3}}, {"model": None}])


@pytest.mark.slow
def test_the_enwik8_model_trains_at_context_4096(tmp_path):
    """Issue 4: the enwik8 config's model (12 x 256) at a 16x longer context, through the CLI. Fused
    attention never builds a t x t mask, so only the position table and the windows grow."""
    data = corpus(tmp_path / "long.txt", n=200_000)  # val and test: 10,000 bytes each, > one 4,097-byte window
    result = cli("fit", "--config", str(ROOT / "configs" / "enwik8.yaml"), "--data.path", str(data),
                 "--data.context", "4096", "--data.batch_size", "1",
                 "--data.num_workers", "0", "--trainer.max_steps", "2", "--data.batches_per_epoch", "2",
                 "--trainer.limit_val_batches", "1", "--sample.length", "8",
                 "--trainer.logger", "false", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LearningRateMonitor callback is left out" in result.stderr  # logging off: Lightning would refuse it
    ckpt = torch.load(tmp_path / "checkpoints" / "enwik8" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 2
    assert ckpt["state_dict"]["model.embed.positions.table.weight"].shape == (4096, 256)
    assert all(v.isfinite().all() for v in ckpt["state_dict"].values() if v.is_floating_point())


def test_sample_refuses_an_empty_prompt(trained):
    assert_fails_cleanly(
        cli("sample", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt", "--prompt", "", cwd=trained[0]),
        "--prompt is empty; give the text to continue",
    )


@pytest.mark.parametrize(("prompt", "bad"), [("the CAT", "'C'"), ("the \udce9t\udce9", "'\\udce9'")])
def test_sample_refuses_characters_outside_the_vocabulary(trained, prompt, bad):
    """A C locale's argument holds its non-ASCII bytes as surrogates: read as those bytes, and named."""
    result = cli("sample", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt", "--prompt", prompt, cwd=trained[0])
    assert_fails_cleanly(result, f"prompt character {bad} is not in the model's vocabulary")


@pytest.mark.slow
def test_output_that_the_outputs_encoding_cannot_write_gets_one_line_with_the_fix(trained):
    cwd = trained[0]
    result = cli_process(
        "plot", "logs/tiny_charlm/version_0", "--out", "courbes-\u00e9.png", cwd=cwd, env={"PYTHONIOENCODING": "ascii"}
    )  # a C locale's console, or a Windows code page's
    assert_fails_cleanly(result, "the output's encoding, ascii, cannot write '\\xe9'; use a UTF-8 locale")


def test_sample_needs_an_existing_checkpoint(tmp_path):
    result = cli("sample", "--ckpt_path", "nope.ckpt", "--prompt", "x", cwd=tmp_path)
    assert_fails_cleanly(result, "'nope.ckpt' does not exist")


# ---- IMDb on the real data ----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not IMDB_TARBALL.exists(), reason="needs ../shared/data/aclImdb_v1.tar.gz")
def test_imdb_on_the_real_tarball_reports_validation_accuracy(tmp_path):
    result = cli("fit", "--config", TINY_IMDB, "--data.path", str(IMDB_TARBALL),
                 "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "3",
                 "--trainer.log_every_n_steps", "1",
                 "--model.model.depth", "1", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "final validation over the whole validation split" in result.stderr and "val/acc" in result.stderr
    ckpt = torch.load(tmp_path / "checkpoints" / "tiny_imdb" / "last.ckpt", weights_only=True)
    assert len(ckpt["IMDbDataModule"]["vocab"]) == 20_000  # the vocabulary travels with the checkpoint
    assert ckpt["hyper_parameters"]["model"]["vocab_size"] == 20_002

    (tmp_path / "reviews.txt").write_text("A wonderful, moving film.\nDull and far too long.\n")
    result = cli(
        "predict",
        "--config",
        TINY_IMDB,
        "--data.predict_path",
        "reviews.txt",
        "--ckpt_path",
        "checkpoints/tiny_imdb/last.ckpt",
        "--trainer.logger",
        "false",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split("\t") for line in result.stdout.splitlines() if line.count("\t") == 2]
    assert [text for _, _, text in lines] == ["A wonderful, moving film.", "Dull and far too long."]
    assert all(label in ("pos", "neg") and 0.5 <= float(p) <= 1 for label, p, _ in lines)


# ---- bad input: one clear line, non-zero exit ---------------------------------------------------------
def lm_fit(cwd: Path, *args: str, env: dict | None = None) -> Ran:
    return cli("fit", "--config", TINY_LM, *FAST, *args, cwd=cwd, env=env)


def test_missing_data_path(tmp_path):
    result = lm_fit(tmp_path, "--data.path", "missing.txt")
    assert_fails_cleanly(result, "data.path 'missing.txt' does not exist")


def test_unreadable_data_path(tmp_path):
    assert_fails_cleanly(lm_fit(tmp_path, "--data.path", str(tmp_path)), "is a directory")


@pytest.mark.parametrize("kind", ["zip", "gz"])
def test_corrupt_archive(tmp_path, kind):
    path = tmp_path / f"enwik8.{kind}"
    text = corpus(tmp_path / "t.txt").read_bytes()
    if kind == "zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("enwik8", text)
    else:
        path.write_bytes(gzip.compress(text))
    path.write_bytes(path.read_bytes()[:-200])  # truncated
    assert_fails_cleanly(lm_fit(tmp_path, "--data.path", str(path)), "truncated or corrupt")


def test_corrupt_imdb_tarball(tmp_path):
    (tmp_path / "aclImdb_v1.tar.gz").write_bytes(gzip.compress(b"not a tar file " * 1000)[:300])
    result = cli("fit", "--config", TINY_IMDB, "--data.path", "aclImdb_v1.tar.gz", cwd=tmp_path)
    assert_fails_cleanly(result, "truncated or corrupt")


def test_file_shorter_than_one_window(tmp_path):
    (tmp_path / "short.txt").write_text("far too short " * 50)
    assert_fails_cleanly(lm_fit(tmp_path, "--data.path", "short.txt"), "fewer than one window")


def test_a_model_context_that_contradicts_the_data(tmp_path):
    """model.context is linked from data.context; a different value typed by hand is refused, not replaced."""
    corpus(tmp_path / "t.txt")
    result = lm_fit(tmp_path, "--data.path", "t.txt", "--model.model.context", "128")
    assert_fails_cleanly(
        result, "model.context 128 is set from data.context (64), so it cannot differ; set --data.context 128 instead"
    )


def test_checkpoint_that_does_not_exist(tmp_path):
    corpus(tmp_path / "t.txt")
    result = cli("test", "--config", TINY_LM, "--data.path", "t.txt", "--ckpt_path", "gone.ckpt", cwd=tmp_path)
    assert_fails_cleanly(result, "--ckpt_path 'gone.ckpt' does not exist")


def test_missing_enwik8_with_no_network(tmp_path):
    result = lm_fit(
        tmp_path,
        "--data.path",
        "null",
        "--data.data_dir",
        "data",
        "--data.download",
        "enwik8",
        "--data.url",
        "http://127.0.0.1:9/enwik8.zip",
    )  # nothing listens on port 9
    assert_fails_cleanly(result, "put it at data/enwik8.zip, or pass --data.path")


def test_missing_imdb_with_no_network(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = cli("fit", "--config", TINY_IMDB, "--data.path", "null", cwd=tmp_path, env=env)
    assert_fails_cleanly(result, "pass --data.path data/aclImdb_v1.tar.gz")


def test_predictions_can_go_to_a_file(trained):
    cwd, data, _ = trained
    (cwd / "score2.txt").write_text("the cat ran far away " * 20)
    result = cli("predict", "--config", TINY_LM, "--data.path", str(data), "--data.vocab", "file",
                 "--data.predict_path", "score2.txt", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt",
                 "--predictions.output", "out/bits.txt", "--trainer.logger", "false", cwd=cwd)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bits per byte" not in result.stdout
    assert (cwd / "out" / "bits.txt").read_text().startswith("score2.txt: ")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="copies the tracked files with git")
def test_a_plain_install_gives_the_transformers_scratch_command(tmp_path):
    """`pip install .` (not editable) in a new virtual environment puts `transformers-scratch` on its PATH.
    The environment sees this machine's packages, so only the project itself is installed."""
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    for name in files:
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, src / name)
    venv = tmp_path / "venv"
    # No pip of its own: the new environment sees the packages of the one running the tests (a .pth file of its
    # site folders; --system-site-packages would show the base interpreter's instead, where this one is a virtual
    # environment), so their pip and setuptools build and install the project alone into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    own_site = next((venv / "lib").glob("python3*/site-packages"))
    (own_site / "tests_outer.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(src)]
    install = subprocess.run(pip, capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    result = subprocess.run([str(venv / "bin" / "transformers-scratch"), "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("usage: transformers-scratch COMMAND") and "predict" in result.stdout
    code = "import transformers_scratch; print(transformers_scratch.__file__)"
    where = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert str(venv) in where.stdout  # the installed copy, not this checkout


@pytest.mark.gpu
def test_a_fit_on_the_gpu_clips_samples_tests_and_samples_again(tmp_path):
    """The first GPU fit found two faults no CPU run can: clipping with the fused AdamW (Lightning refused
    it) and decoding a sample that lay on the GPU. The whole path, at bf16 with clipping, on the GPU."""
    data = corpus(tmp_path / "text.txt")
    args = ["--config", TINY_LM, "--data.path", str(data), "--trainer.accelerator", "gpu", "--trainer.precision",
            "bf16-mixed", "--trainer.logger", "false"]  # fmt: skip
    fit = cli("fit", *args, *FAST, cwd=tmp_path)
    assert fit.returncode == 0 and "--- sample at step" in fit.stderr + fit.stdout, fit.stderr[-3000:]
    test = cli("test", *args, "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt", cwd=tmp_path)
    assert test.returncode == 0 and "test/bpc" in test.stdout, test.stderr[-3000:]
    sample = cli("sample", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt", "--prompt", "the ", "--length", "20",
                 cwd=tmp_path)  # fmt: skip
    assert sample.returncode == 0 and sample.stdout.startswith("the "), sample.stderr[-3000:]
    greedy = ["sample", "--ckpt_path", "checkpoints/tiny_charlm/last.ckpt", "--prompt", "the ", "--length", "300",
              "--temperature", "0"]  # fmt: skip
    graphed = cli(*greedy, "--cuda_graph", "true", cwd=tmp_path)  # past the tiny model's context: the window refills
    assert graphed.returncode == 0 and graphed.stdout == cli(*greedy, cwd=tmp_path).stdout, graphed.stderr[-3000:]


@pytest.mark.slow
def test_the_extrapolation_runner_trains_each_kind_and_tests_every_window(tmp_path, capsys, monkeypatch):
    from transformers_scratch.experiments import extrapolate

    data = corpus(tmp_path / "text.txt", n=80_000)  # test split 4,000 bytes: several windows of 512
    small = tmp_path / "small.yaml"  # --config on top of the runner's configs
    small.write_text(
        "model:\n  init_args:\n    model:\n      depth: 1\n      emb: 32\ndata:\n  init_args:\n    context: 128\n"
    )
    monkeypatch.setenv("WANDB_MODE", "disabled")
    args = ["--data.path", str(data), "--steps", "2", "--windows", "128", "512", "64", "--kinds", "learned", "rope",
            "--work", str(tmp_path / "work"), "--config", str(small)]  # fmt: skip
    assert extrapolate.main(args, build_cli) == 0
    header, table = capsys.readouterr().out.split("\n| positions")
    assert "trained at context 128 (2 steps each)" in header  # the config's context, not the default's
    learned, rope = (line.split("|")[2:5] for line in table.splitlines()[2:4])
    assert float(learned[0]) > 0 and learned[1:] == [" refused ", " refused "]  # one learned vector a position
    assert all(float(bpc) > 0 for bpc in rope)
    state = torch.load(tmp_path / "work/checkpoints/extrapolate-rope/last.ckpt", weights_only=True)
    assert state["global_step"] == 2 and state["hyper_parameters"]["model"]["depth"] == 1


@pytest.mark.slow
def test_the_first_run_trains_validates_saves_and_samples_with_only_the_sample_on_stdout(tmp_path):
    """The README's first command, in a fresh folder, through the real command line."""
    text = IMDB_TARBALL.parent / "tinyshakespeare.txt"  # what the config downloads; no network here
    data = text if text.exists() else corpus(tmp_path / "text.txt", n=200_000)
    result = cli_process("fit", "--config", str(ROOT / "configs" / "first_run.yaml"), "--data.path", str(data),
                         cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "checkpoints" / "first_run" / "last.ckpt").is_file()
    metrics = (tmp_path / "logs" / "first_run" / "version_0" / "metrics.csv").read_text()
    assert "val/bpc" in metrics.splitlines()[0]
    sample = result.stdout
    assert sample.startswith("--- sample at step 300 (temperature 0.5) ---\n[") and sample.endswith("\n---\n")
    assert sample.count("--- sample at step") == 1  # nothing else on stdout
    header = result.stderr.splitlines()[:2]
    assert header[0].startswith("run first_run: checkpoints in checkpoints/first_run/, logs in logs/first_run/")
    assert header[1].startswith("model: CausalLM, 0.67M parameters")
    assert "this run: checkpoints in checkpoints/first_run/" in result.stderr


def test_a_run_built_from_args_says_nothing_of_the_command_line_beside_them(monkeypatch, recwarn):
    """extrapolate and soak build their runs from args while sys.argv holds their own command: Lightning warned of
    the two at every run. sys.argv is set aside while the run is built, and put back."""
    command_line = ["cli.py", "extrapolate", "--data.path", "a.txt"]
    monkeypatch.setattr(sys, "argv", list(command_line))
    build_cli(["--config", str(ROOT / "configs" / "seq2seq_reverse.yaml")], run=False)
    said = [str(w.message)[:80] for w in recwarn if not issubclass(w.category, DeprecationWarning)]
    assert not said, said  # DeprecationWarnings (Lightning's calls into jsonargparse): Python shows them no user
    assert sys.argv == command_line


def test_fit_help_names_the_models_sizes(capsys):
    """And its flags outside the groups are those the error line guesses a misspelt one among."""
    from transformers_scratch.cli.errors import FLAG_GROUPS, TOP_FLAGS

    with pytest.raises(SystemExit):
        build_cli(["fit", "--help"])
    out = capsys.readouterr().out
    flags = set(re.findall(r"^ +(?:-\w(?: \w+)?, )?--(\w+)(?=[ ,\[]|$)", out, re.M)) - {"help", "model", "data"}
    assert flags - set(FLAG_GROUPS) == set(TOP_FLAGS)
    words = " ".join(out.split())
    assert "--model.model.NAME VALUE" in words and "emb 256, heads 8, depth 12" in words
    assert "positions learned|sinusoidal|rope|alibi" in words and "--model.help LitCharLM" in words


def attribute_docs(cls) -> dict[str, str]:
    """The docstring under each field of a dataclass and of its bases."""
    import ast
    import inspect
    import textwrap

    docs = {}
    for klass in reversed(cls.__mro__[:-1]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for field, doc in zip(body, body[1:], strict=False):
            if isinstance(field, ast.AnnAssign) and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
                docs[field.target.id] = doc.value.value
    return docs


def help_words(capsys, *args) -> str:
    with pytest.raises(SystemExit) as stop:
        build_cli(["fit", *args])
    assert stop.value.code in (0, None)
    return re.sub(r"(\w-) (\w)", r"\1\2", " ".join(capsys.readouterr().out.split()))  # argparse wraps at hyphens


@pytest.mark.parametrize("group,name", [("model", "LMConfig"), ("model", "ClassifierConfig"),
                                        ("model", "MaskedLMConfig"), ("model", "EncoderDecoderConfig"),
                                        ("optim", "OptimConfig")])  # fmt: skip
def test_model_settings_help_works_without_a_config_and_shows_every_description_whole(capsys, group, name):
    from dataclasses import fields

    from transformers_scratch.cli.lightning import CONFIG_CLASSES

    cls = CONFIG_CLASSES[name]
    words = help_words(capsys, f"--model.{group}.help", name)
    docs = attribute_docs(cls)
    for field in fields(cls):
        assert f"--model.{group}.{field.name} " in words
        assert field.name in docs, f"{name}.{field.name} has no description"
        assert " ".join(docs[field.name].split()) in words  # whole, not cut


@pytest.mark.slow
def test_the_modules_and_data_modules_help_show_their_own_descriptions_whole(capsys):
    from docstring_parser import parse

    from transformers_scratch import data, training

    for group, cls in [("model", training.LitCharLM), ("model", training.LitClassifier),
                       ("model", training.LitMaskedLM), ("model", training.LitSeq2Seq),
                       ("data", data.TextDataModule), ("data", data.IMDbDataModule),
                       ("data", data.IMDbMLMDataModule), ("data", data.TransductionDataModule)]:  # fmt: skip
        words = help_words(capsys, f"--{group}.help", cls.__name__)
        for param in parse(cls.__init__.__doc__ or cls.__doc__).params:
            assert " ".join(param.description.split()) in words, (cls.__name__, param.arg_name)


def test_the_settings_bounded_to_keep_every_run_resumable_say_why_in_their_help(capsys):
    """The trainer's and the checkpoint's settings whose type admits one value (or two) give the reason."""
    from docstring_parser import parse

    from transformers_scratch.cli.lightning import BoundedTrainer
    from transformers_scratch.training.callbacks import SafeModelCheckpoint

    words = help_words(capsys, "--help")
    for cls, names in [(SafeModelCheckpoint, ("save_last", "save_weights_only")),
                       (BoundedTrainer, ("barebones", "enable_checkpointing"))]:  # fmt: skip
        reasons = {p.arg_name: " ".join((p.description or "").split()) for p in parse(cls.__init__.__doc__).params}
        for name in names:
            assert reasons[name].startswith(("Never", "Always")) and reasons[name] in words, (cls.__name__, name)


def test_model_settings_help_names_the_classes_it_knows():
    with pytest.raises(ValueError, match="not a settings class; use one of LMConfig"):
        build_cli(["fit", "--model.model.help", "os.system"])


def test_context_scores_what_test_scores_by_position(trained):
    """``context``: its mean over every position is test's bits per byte; a table, a CSV and a picture."""
    cwd, data, _ = trained
    ckpt = "checkpoints/tiny_charlm/last.ckpt"
    tested = cli("test", "--config", TINY_LM, "--data.path", str(data), "--data.vocab", "file", "--ckpt_path", ckpt,
                 "--trainer.logger", "false", cwd=cwd)  # fmt: skip
    assert tested.returncode == 0, tested.stderr[-3000:]
    bpc = float(re.search(r"test/bpc\s*│\s*([\d.]+)", tested.stdout)[1])  # type: ignore[index]
    ran = cli("context", "--ckpt_path", ckpt, "--data_path", str(data), "--bins", "4", "--out", "ctx.png",
              "--csv", "tables/ctx.csv", cwd=cwd)  # the CSV's folder is made  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    rows = ran.stdout.splitlines()
    assert rows[0] == "positions\ttiny_charlm" and [r.split("\t")[0] for r in rows[1:]][-1] == "all"
    assert abs(float(rows[-1].split("\t")[1]) - bpc) < 1e-4
    assert (cwd / "ctx.png").stat().st_size > 0
    assert (cwd / "tables/ctx.csv").read_text().startswith("curve,position,bytes")
    refused = cli("context", "--ckpt_path", ckpt, "--data_path", str(data), "--bins", "0", cwd=cwd)
    assert_fails_cleanly(refused, "bins: 0 is not an integer in [1, 16,777,216]")
    refused = cli("context", "--ckpt_path", ckpt, "--data_path", str(data), "--csv", "tables", cwd=cwd)
    assert_fails_cleanly(refused, "--csv 'tables' is a folder; pass a file name, e.g. --csv tables/context.csv")
    assert "all\t" not in refused.stdout  # refused before the scoring, not after it
    refused = cli("context", "--ckpt_path", ckpt, "--data_path", str(data), "--eval_mem_len", "3", cwd=cwd)
    assert_fails_cleanly(refused, "--eval_mem_len is a LitXL's evaluation memory, and no --ckpt_path holds a LitXL")
    refused = cli("context", "--ckpt_path", "[]", "--data_path", str(data), cwd=cwd)
    assert_fails_cleanly(refused, "--ckpt_path names no checkpoint; pass one, or several: --ckpt_path '[a.ckpt, ")
    before = (cwd / ckpt).read_bytes()  # an output named as an input: the checkpoint was replaced by the CSV
    refused = cli("context", "--ckpt_path", ckpt, "--data_path", str(data), "--csv", ckpt, cwd=cwd)
    assert_fails_cleanly(refused, f"--csv '{ckpt}' is a file this command reads (--ckpt_path); pass another name")
    assert (cwd / ckpt).read_bytes() == before
    both = ["--out", "both.png", "--csv", "tables/../both.png"]  # two outputs at one path: the table was drawn over
    refused = cli("context", "--ckpt_path", ckpt, "--data_path", str(data), *both, cwd=cwd)
    assert_fails_cleanly(refused, "--csv 'tables/../both.png' is --out too; pass another name, e.g. --csv context.csv")


def test_context_leaves_blank_the_positions_past_a_shorter_models_context(trained, tmp_path):
    cwd, data, _ = trained
    short = cli("fit", "--config", TINY_LM, "--data.path", str(data), "--data.vocab", "file", "--data.context", "8",
                *FAST, cwd=tmp_path)  # fmt: skip
    assert short.returncode == 0, short.stderr[-3000:]
    both = f"[{cwd / 'checkpoints/tiny_charlm/last.ckpt'}, {tmp_path / 'checkpoints/tiny_charlm/last.ckpt'}]"
    ran = cli("context", "--ckpt_path", both, "--data_path", str(data), "--bins", "4", cwd=cwd)
    assert ran.returncode == 0, ran.stderr[-3000:]
    rows = [row.split("\t") for row in ran.stdout.splitlines()[1:]]
    past = [row for row in rows if row[0] != "all" and int(row[0].split("-")[0]) > 8]
    assert past and all(row[2] == "-" and row[1] != "-" for row in past)  # no bytes there: not 0.0 bits


def test_ctrl_c_outside_a_fit_is_one_line_and_status_130(monkeypatch, capsys):
    """Ctrl-C in a command other than fit (sample, test, the bench) ends it with one line, not a traceback."""
    import transformers_scratch.cli as cli
    from transformers_scratch.experiments import bench
    from transformers_scratch.training.console import INTERRUPTED

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.delenv("TS_DEBUG", raising=False)
    monkeypatch.setattr(cli, "run_function", interrupted)
    monkeypatch.setattr(bench, "bench", interrupted)
    for command in (lambda: cli.main(["sample", "--ckpt_path", "x.ckpt"]), lambda: bench.main([])):
        try:
            command()
        except BaseException as e:  # without the handler, the KeyboardInterrupt itself: a failure, not pytest's stop
            ended = e
        assert isinstance(ended, SystemExit) and ended.code == 130 and capsys.readouterr().err == INTERRUPTED + "\n"


def test_ts_debug_set_to_0_or_false_keeps_the_one_line(monkeypatch, capsys, tmp_path):
    """TS_DEBUG=0 gave the traceback, as any value did."""
    import transformers_scratch.cli as cli

    args = ["sample", "--ckpt_path", str(tmp_path / "gone.ckpt"), "--prompt", "a"]
    for off in ("0", "false", "", "Off"):
        monkeypatch.setenv("TS_DEBUG", off)
        with pytest.raises(SystemExit):
            cli.main(args)
        assert capsys.readouterr().err.startswith("error: --ckpt_path")
    monkeypatch.setenv("TS_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        cli.main(args)


@pytest.mark.slow
def test_a_run_on_a_machine_of_many_cores_gives_no_advice_to_add_workers(tmp_path, monkeypatch):
    """Lightning advises num_workers=15 on 16 cores for every loader of fewer than 2 workers; the configs set theirs
    on purpose. A quiet run leaves the advice out, --verbose shows it."""
    monkeypatch.setattr("lightning.pytorch.trainer.connectors.data_connector.suggested_max_num_workers", lambda n: 15)
    data = ["--data.path", str(corpus(tmp_path / "t.txt")), "--data.num_workers", "0", "--trainer.max_steps", "2"]
    quiet = lm_fit(tmp_path, *data)
    loud = lm_fit(tmp_path, *data, "--name", "loud", "--verbose", "true")
    assert quiet.returncode == loud.returncode == 0, quiet.stderr[-2000:] + loud.stderr[-2000:]
    assert "does not have many workers" not in quiet.stderr
    assert "'train_dataloader' does not have many workers" in loud.stderr


def test_a_quiet_run_leaves_out_the_hubs_retries_of_a_request(monkeypatch):
    """With no network, the Hugging Face Hub's client said ten lines of retries before the one error line."""
    import logging

    from huggingface_hub.utils import logging as hub_logging

    from transformers_scratch.training.console import quiet

    for name in ("HF_HUB_VERBOSITY", "WANDB_SILENT"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # restored afterwards, whatever quiet() sets
    names = ["huggingface_hub", "lightning.pytorch", "lightning.fabric", "lightning"]
    levels = [logging.getLogger(name).level for name in names]
    try:
        monkeypatch.delenv("HF_HUB_VERBOSITY")
        quiet()
        said = hub_logging.get_logger("huggingface_hub.utils._http").isEnabledFor(logging.WARNING)  # its retries'
    finally:
        for name, level in zip(names, levels, strict=True):
            logging.getLogger(name).setLevel(level)
    assert not said

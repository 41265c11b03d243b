"""The benchmark command: what it measures and how it reports, at toy sizes (its numbers are not tested)."""

import argparse
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
from inprocess import run_main

from transformers_scratch.experiments.bench import format_report, run_isolated, run_job, train_job, variants
from transformers_scratch.experiments.endtoend import format_end_to_end

TOY = {"vocab_size": 32, "context": 16, "emb": 16, "heads": 2, "depth": 1}


def bench_in_process(monkeypatch, tmp_path, *argv: str) -> dict:
    """The bench command's report (``--json``), run in this process with each measurement in it too: a child
    process a measurement costs seconds of imports, and its isolation is held by
    :func:`test_a_failed_measurement_is_reported_not_raised`."""
    from transformers_scratch.experiments import bench

    monkeypatch.setattr(bench, "run_isolated", lambda job, memory_cap_gb=None, timeout=900: run_job(job))
    ran = run_main(bench.main, *argv, "--json", cwd=tmp_path, prog="bench.py")
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads(ran.stdout)


def test_a_training_job_reports_throughput_and_memory():
    result = run_job(train_job("cpu", TOY, batch=2, context=16, steps=2, warmup=1, precision="32-true"))
    assert result["tokens_per_s"] > 0
    assert math.isclose(result["tokens_per_s"], 2 * 16 / (result["step_ms"] / 1000))
    assert result["peak_rss_gb"] > 0
    assert "mfu" not in result  # no MFU without a GPU's known peak


def test_generation_jobs_time_new_tokens():
    for cache in (True, False):
        job = {"kind": "generate", "device": "cpu", "batch": 1, "context": 16, "cache": cache, "new_tokens": 20,
               "model": TOY}  # fmt: skip
        assert run_job(job)["tokens_per_s"] > 0


def test_nanogpt_runs_the_same_step_from_its_model_file(tmp_path):
    """--nanogpt loads GPT and GPTConfig from a model.py by path and trains them with the same step. A
    stand-in with nanoGPT's interface takes the place of the real file, which is not a dependency."""
    (tmp_path / "model.py").write_text(
        textwrap.dedent("""
        from dataclasses import dataclass
        import torch.nn.functional as F
        from torch import nn

        @dataclass
        class GPTConfig:
            block_size: int = 1024
            vocab_size: int = 50304
            n_layer: int = 12
            n_head: int = 12
            n_embd: int = 768
            dropout: float = 0.0
            bias: bool = True

        class GPT(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.config = config
                self.wte = nn.Embedding(config.vocab_size, config.n_embd)
                self.head = nn.Linear(config.n_embd, config.vocab_size)

            def forward(self, idx, targets=None):
                assert idx.is_contiguous() and targets.is_contiguous()  # nanoGPT views its targets
                logits = self.head(self.wte(idx))
                return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        """)
    )
    job = train_job("cpu", TOY, batch=2, context=16, steps=1, warmup=1, precision="32-true")
    assert run_job({**job, "nanogpt": str(tmp_path / "model.py")})["tokens_per_s"] > 0


def test_cuda_graphs_are_a_gpu_variant_of_the_compiled_step():
    """``--model.compile reduce-overhead``'s step: compiled and replayed as CUDA graphs, measured on a GPU only."""
    gpu = dict(variants("cuda", compile_=True))
    assert gpu["torch.compile + CUDA graphs"] == {**gpu["torch.compile"], "cuda_graphs": True}
    assert not any(v["cuda_graphs"] for v in dict(variants("cpu", compile_=True)).values())
    assert not any(v["cuda_graphs"] for v in dict(variants("cuda", compile_=False)).values())


@pytest.mark.slow
def test_a_failed_measurement_is_reported_not_raised():
    job = train_job("cpu", {**TOY, "emb": 4096, "context": 4096}, batch=64, context=4096, steps=1, warmup=0,
                    precision="32-true")  # fmt: skip
    result = run_isolated(job, memory_cap_gb=1.0, timeout=120)  # far past a 1 GB heap
    assert result.keys() == {"error", "printed"} and "allocate" in result["error"] and result["printed"] == []


def test_the_command_prints_a_table_and_json(monkeypatch, tmp_path):
    report = bench_in_process(monkeypatch, tmp_path, "--depth", "1", "--emb", "16", "--heads", "2", "--context", "16",
                              "--batch", "2", "--steps", "1", "--warmup", "0", "--no-compile", "--new-tokens", "4",
                              "--seq2seq")  # fmt: skip
    assert [row["variant"] for row in report["train"]] == [
        "fused (default)",
        "reference attention",
        "activation checkpointing",
    ]
    assert all(row["tokens_per_s"] > 0 for row in report["train"] + report["generate"] + report["seq2seq"])
    assert [row["cache"] for row in report["seq2seq"]] == [True, False]
    table = format_report(report)
    assert "fused / reference attention:" in table and "KV cache speed-up:" in table
    assert "decoder cache speed-up (4 tokens):" in table
    assert report["hardware"].startswith("CPU") and report["date"] in table


def test_the_profile_names_where_the_step_goes():
    job = {**train_job("cpu", TOY, batch=2, context=16, steps=1, warmup=1, precision="32-true"), "profile": True}
    result = run_job(job)
    prof = result["profile"]
    assert prof["busy"] is None  # a GPU's busy share only: on a CPU the host is the device
    assert prof["top"] and all(ms > 0 and 0 < share <= 1 for _, ms, share in prof["top"])
    assert sum(share for *_, share in prof["top"]) <= 1 + 1e-6
    assert any("mm" in name for name, *_ in prof["top"])  # a transformer step is matmuls
    table = format_report({"hardware": "CPU", "torch": "x", "date": "d", "model": {**TOY, "vocab_size": 32},
                           "context": 16, "batch": 2, "train": [{"variant": "fused (default)", **result}],
                           "generate": []})  # fmt: skip
    assert "profile of fused (default): most time per step:" in table


STAND_IN_WRAPPING_OURS = """
from dataclasses import dataclass
import torch.nn.functional as F
from torch import nn
from transformers_scratch import CausalLM, LMConfig

@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 0
    n_layer: int = 1
    n_head: int = 2
    n_embd: int = 16
    dropout: float = 0.0
    bias: bool = False

class GPT(nn.Module):  # nanoGPT's interface around this project's model
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.inner = CausalLM(LMConfig(vocab_size=config.vocab_size, context=config.block_size,
                                       emb=config.n_embd, heads=config.n_head, depth=config.n_layer))

    def forward(self, idx, targets=None):
        logits = self.inner(idx)
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())
"""


@pytest.mark.slow
def test_a_nanogpt_checkpoint_is_scored_as_cli_test_scores_the_project(tmp_path, capsys):
    """``python -m transformers_scratch.experiments.nanogpt`` gives the number that ``cli.py test`` gives for the same
    model on the same file: the same windows, every test byte once. A stand-in model.py wraps this project's
    model in nanoGPT's interface, and its checkpoint is written as nanoGPT's train.py writes a compiled one."""
    import torch

    from transformers_scratch.data import TextDataModule
    from transformers_scratch.experiments.nanogpt import main
    from transformers_scratch.training.modules import LitCharLM

    (tmp_path / "model.py").write_text(STAND_IN_WRAPPING_OURS)
    text = tmp_path / "text.txt"
    g = torch.Generator().manual_seed(0)
    text.write_bytes(bytes((97 + torch.randint(20, (6000,), generator=g)).tolist()))  # 20 letters
    args = {"block_size": 16, "vocab_size": 20, "n_layer": 1, "n_head": 2, "n_embd": 16, "dropout": 0.0,
            "bias": False}  # fmt: skip
    lit = LitCharLM({"vocab_size": 20, "context": 16, "emb": 16, "heads": 2, "depth": 1}).eval()
    weights = {f"_orig_mod.inner.{k}": v for k, v in lit.model.state_dict().items()}
    torch.save({"model": weights, "model_args": args, "iter_num": 0, "best_val_loss": torch.tensor(9.0)},
               tmp_path / "ckpt.pt")  # fmt: skip

    data = TextDataModule(str(text), context=16, batch_size=8, vocab="file")
    data.setup("test")
    with torch.no_grad():
        parts = [lit.scored_bits(batch) for batch in data.test_dataloader()]
    expected_bpc = sum(b for b, _ in parts).item() / sum(n for _, n in parts).item()

    argv = ["--model_py", str(tmp_path / "model.py"), "--ckpt", str(tmp_path / "ckpt.pt"), "--data.path",
            str(text), "--context", "16", "--batch_size", "8", "--device", "cpu"]  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "transformers_scratch.experiments.nanogpt", *argv], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    reported = float(out.stdout.rsplit("test/bpc", 1)[1])
    assert math.isclose(reported, expected_bpc, abs_tol=1e-4), (reported, expected_bpc)

    other = tmp_path / "other.txt"
    other.write_bytes(bytes((97 + torch.randint(26, (6000,), generator=g)).tolist()))  # 26 letters
    assert main([*argv[:4], "--data.path", str(other), *argv[6:]]) == 2
    assert "the checkpoint has a vocabulary of 20 characters" in capsys.readouterr().err
    assert main([*argv[:6], "--context", "32", "--device", "cpu"]) == 2
    assert "--context 32 is longer than the checkpoint's block_size 16" in capsys.readouterr().err


STAND_IN_TRAIN_PY = """
# nanoGPT's train.py as the end-to-end benchmark reads it: its flags, its lines, its checkpoint.
import os, pickle, sys, time
import torch
from model import GPT, GPTConfig

flags = dict(a[2:].split("=", 1) for a in sys.argv[2:])
steps, every = int(flags["max_iters"]), int(flags["eval_interval"])
meta = pickle.load(open("data/shakespeare_char/meta.pkl", "rb"))
args = dict(block_size=int(flags["block_size"]), vocab_size=meta["vocab_size"], n_layer=int(flags["n_layer"]),
            n_head=int(flags["n_head"]), n_embd=int(flags["n_embd"]))
seed_offset = 0
torch.manual_seed(1337 + seed_offset)
model = GPT(GPTConfig(**args))
print("using fused AdamW: False")
max_iters, eval_interval = steps, every
iter_num = local_iter_num = 0
while True:
    if iter_num % eval_interval == 0:
        time.sleep(float(os.environ.get("STAND_IN_LAST_EVAL_S", 0.3)) if iter_num else 0.3)  # an evaluation
        print(f"step {iter_num}: train loss 4.0, val loss 4.0")
        if iter_num:
            os.makedirs(flags["out_dir"], exist_ok=True)
            torch.save({"model": model.state_dict(), "model_args": args}, os.path.join(flags["out_dir"], "ckpt.pt"))
    time.sleep(0.01)  # a step
    print(f"iter {iter_num}: loss 4.0, time 10.00ms, mfu -100.00%")
    iter_num += 1
    local_iter_num += 1

    if iter_num > max_iters:
        break
"""

STAND_IN_PREPARE_PY = """
import os, pickle
here = os.path.dirname(__file__)
chars = sorted(set(open(os.path.join(here, "input.txt")).read()))
pickle.dump({"vocab_size": len(chars)}, open(os.path.join(here, "meta.pkl"), "wb"))
"""


def stand_in_nanogpt(tmp_path):
    """A stand-in nanoGPT checkout under tmp_path: the files the benchmark copies, as it reads them."""
    checkout = tmp_path / "nanoGPT"
    for name, code in {"train.py": STAND_IN_TRAIN_PY, "model.py": STAND_IN_WRAPPING_OURS, "configurator.py": "",
                       "config/train_shakespeare_char.py": "", "data/shakespeare_char/prepare.py": STAND_IN_PREPARE_PY
                       }.items():  # fmt: skip
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text(code)
    return checkout


@pytest.mark.slow
def test_end_to_end_reports_every_field_for_fit_and_nanogpt(tmp_path):
    """--end-to-end runs the real fit and a train.py given by path, alternating, and reports wall, CPU,
    start-up, training, validation, samples, the rest and the held-out loss for each. A stand-in nanoGPT
    checkout (its file names, flags, output lines and checkpoint) takes the place of the real one."""
    import torch

    checkout = stand_in_nanogpt(tmp_path)
    text = tmp_path / "input.txt"
    g = torch.Generator().manual_seed(0)
    text.write_bytes(bytes((97 + torch.randint(20, (20000,), generator=g)).tolist()))
    argv = ["--end-to-end", "--data.path", str(text), "--nanogpt-train", str(checkout / "train.py"),
            "--max-steps", "4", "--json", "--fit-args",
            "--data.batches_per_epoch 2 --trainer.limit_val_batches 2 --sample.length 8"]  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "transformers_scratch.experiments.bench", *argv],
                         capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    fit, nano = report["runs"]
    assert (fit["run"], nano["run"]) == ("fit", "nanoGPT train.py")
    fields = ("wall_s", "cpu_s", "startup_s", "train_s", "val_s", "sample_s", "other_s", "heldout_nats", "load")
    for row in (fit, nano):
        assert all(isinstance(row[f], float) for f in fields), row
        assert 0 < row["startup_s"] < row["wall_s"] and row["train_s"] > 0 and row["cpu_s"] > 0
        assert math.isclose(row["heldout_bpc"], row["heldout_nats"] / math.log(2))
        assert 2.0 < row["heldout_nats"] < 4.0  # an untrained model over 20 letters: about ln 20 = 3.0
    assert fit["sample_s"] > 0 and fit["val_s"] > 0  # two validations with samples, and the final full one
    assert nano["val_s"] >= 0.6  # two evaluations of 0.3 s each
    assert "fit / nanoGPT train.py wall time" in "\n".join(format_end_to_end(report))


@pytest.mark.slow
def test_a_speedrun_reports_every_field_and_never_trains_on_the_held_out_bytes(tmp_path):
    """A tiny budget, 2 seeds, fit alternating with a stand-in nanoGPT: every field is there; each nanoGPT run gets
    its seed; and the held-out bytes lie past every training window. How close to its budget a run ends is the
    bench's to report, not a test's to assert (a loaded machine decides it): the deadline's arithmetic is held on
    a simulated clock below and in tests/test_lit.py."""
    import yaml

    from transformers_scratch.data import TextDataModule
    from transformers_scratch.data.text import split_bounds
    from transformers_scratch.experiments.endtoend import ROOT, SPEEDRUN, speedrun

    checkout = stand_in_nanogpt(tmp_path)
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on a mat while one dog ran far away to see its friend. " * 1500)
    budget, nanogpt_budget = 14.0, 5.0  # each program its own budget: time to a loss
    report = speedrun(str(text), budget, str(checkout / "train.py"), seeds=2, threads=None,
                      workdir=str(tmp_path / "work"), nanogpt_budget=nanogpt_budget)  # fmt: skip
    assert [(r["run"], r.get("seed")) for r in report["runs"]] == [
        ("fit", 0), ("nanoGPT train.py", 0), ("fit", 1), ("nanoGPT train.py", 1)]  # fmt: skip
    assert (report["budget_s"], report["nanogpt_budget_s"]) == (budget, nanogpt_budget)
    recipe_batch = yaml.safe_load((ROOT / SPEEDRUN).read_text())["data"]["init_args"]["batch_size"]
    for row in report["runs"]:
        assert "error" not in row, row.get("error")
        limit = budget if row["run"] == "fit" else nanogpt_budget
        assert row["within_budget"] == (limit - 5.0 <= row["wall_s"] <= limit), row
        for field in ("wall_s", "startup_s", "steps", "tokens", "context", "heldout_nats", "load"):
            assert isinstance(row[field], (int, float)) and row[field] > 0, (field, row)
        batch = recipe_batch if row["run"] == "fit" else 12  # the recipe's batches, and nanoGPT's CPU recipe's
        assert row["tokens"] == row["steps"] * batch * row["context"] and row["context"] == 64
    assert set(report["nanogpt_pace"]) == {"startup_s", "iter_s", "other_s", "end_s"}
    assert report["nanogpt_pace"]["end_s"] > 0.3  # its last evaluation (0.3 s), save, iteration and exit
    nano = [r for r in report["runs"] if r["run"] != "fit"]
    assert nano[0]["heldout_nats"] != nano[1]["heldout_nats"]  # the stand-in's weights follow its seed
    assert all(r["steps"] > 1 for r in nano)  # its max_iters was fitted to its own budget, not left at one
    means = [
        sum(r["heldout_nats"] for r in report["runs"] if r["run"] == run) / 2 for run in ("fit", "nanoGPT train.py")
    ]
    assert report["verdict"]["fit_mean_nats"] == means[0] and report["verdict"]["nanogpt_mean_nats"] == means[1]
    assert report["verdict"]["fit_below_nanogpt"] == (means[0] < means[1])
    seeded = (tmp_path / "work" / "nanoGPT" / "train.py").read_text()
    assert "int(os.environ.get('NANOGPT_SEED', '0'))" in seeded

    size = len(text.read_bytes())
    bounds = split_bounds(size)
    assert bounds["train"][1] <= bounds["test"][0] and bounds["test"] == (bounds["test"][0], size)
    assert bounds["test"][0] >= int(0.95 * size) - 1  # the last 5 %: training windows end before it
    module = TextDataModule(str(text), context=64, vocab="file")
    module.setup()
    assert len(module.splits["train"]) == bounds["train"][1] - bounds["train"][0]


def test_the_speedrun_verdict_compares_the_means_at_each_programs_own_budget():
    """Time to a loss: the recipe's mean at its budget against nanoGPT's at its own; no verdict while a run failed."""
    from transformers_scratch.experiments.endtoend import verdict

    rows = [{"run": "fit", "heldout_nats": 1.60}, {"run": "nanoGPT train.py", "heldout_nats": 1.70},
            {"run": "fit", "heldout_nats": 1.70}, {"run": "nanoGPT train.py", "heldout_nats": 1.64}]  # fmt: skip
    said = verdict(rows, 100, 300)
    assert said["fit_below_nanogpt"] is True and abs(said["fit_mean_nats"] - 1.65) < 1e-12
    assert said["said"] == "the recipe in 100 s: 1.6500 nats/char, below nanoGPT's 1.6700 in 300 s (+0.0200)"
    rows[0]["heldout_nats"] = 1.80
    assert verdict(rows, 100, 300)["fit_below_nanogpt"] is False
    assert verdict([*rows[1:], {"run": "fit", "error": "exit code 1"}], 100, 300)["fit_below_nanogpt"] is None


@pytest.mark.slow
@pytest.mark.parametrize("wrong", [3.0, 1 / 3], ids=["pace-too-fast", "pace-too-slow"])
def test_nanogpt_fits_its_iterations_to_the_bench_deadline_when_its_pace_was_wrong(tmp_path, wrong):
    """A pace three times too fast sets three times the iterations that fit; one three times too slow, a third.
    Either way the scratch copy refits its iterations to the deadline as it runs (it stops before max_iters, or
    goes past it), with the model of its last iteration saved and scored. How near the budget it ends is the
    bench's to report: a loaded machine decides it, and no test asserts a duration."""
    from transformers_scratch.experiments.endtoend import heldout, nanogpt_copy, speedrun_nanogpt

    text = tmp_path / "text.txt"
    text.write_text("the cat sat on a mat while one dog ran far away to see its friend. " * 300)
    copy = nanogpt_copy(str(stand_in_nanogpt(tmp_path) / "train.py"), str(text), tmp_path / "work")
    budget, iter_s = 8.0, 0.0105 / wrong  # a stand-in iteration takes 0.0105 s
    pace = {"startup_s": 1.0, "iter_s": iter_s, "other_s": 1.5, "end_s": 1.0}
    row = speedrun_nanogpt(copy, budget, 0, None, pace)
    assert "error" not in row, row["error"]
    assert row["max_iters"] == int((budget - 2.5) / iter_s) and row["steps"] > 0
    assert (row["steps"] < row["max_iters"]) if wrong > 1 else (row["steps"] > row["max_iters"])
    assert row["tokens"] == row["steps"] * 12 * 64
    assert 2.0 < heldout(row, str(text), copy / "model.py") < 4.0  # the saved model, scored


@pytest.mark.slow
def test_nanogpt_keeps_the_longest_end_it_has_seen_in_reserve(tmp_path, monkeypatch):
    """A run's end (last evaluation, save, exit) can take longer than the rest of its wall time suggests, here an
    evaluation of 2.5 s against 0.3 s for the first. The deadline keeps the longest end seen in reserve; the pace
    it hands on keeps that end, not the run's own if shorter."""
    from transformers_scratch.experiments.endtoend import nanogpt_copy, speedrun_nanogpt

    text = tmp_path / "text.txt"
    text.write_text("the cat sat on a mat while one dog ran far away to see its friend. " * 300)
    copy = nanogpt_copy(str(stand_in_nanogpt(tmp_path) / "train.py"), str(text), tmp_path / "work")
    monkeypatch.setenv("STAND_IN_LAST_EVAL_S", "2.5")
    budget = 8.0
    pace = {"startup_s": 1.0, "iter_s": 0.0105, "other_s": 1.5, "end_s": 3.0}  # other_s: a 2.5 s reserve, too short
    row = speedrun_nanogpt(copy, budget, 0, None, pace)
    assert "error" not in row, row["error"]
    assert pace["end_s"] > 2.5  # this run's end (its evaluation alone sleeps 2.5 s), or the 3.0 s it was handed
    monkeypatch.setenv("STAND_IN_LAST_EVAL_S", "0.3")
    speedrun_nanogpt(copy, budget, 1, None, pace)
    assert pace["end_s"] > 2.5  # a shorter end does not shrink the reserve


def test_a_nanogpt_checkout_the_speedrun_cannot_patch_gets_one_error_line(tmp_path):
    """A train.py without the lines its scratch copy patches (the seed, the end of an iteration), or a path with no
    checkout, ends the bench with one line that names the path and what to pass."""
    from transformers_scratch.experiments import bench

    text = tmp_path / "text.txt"
    text.write_text("some text to train on. " * 100)
    checkout = stand_in_nanogpt(tmp_path)
    train = checkout / "train.py"
    train.write_text(train.read_text().replace("    local_iter_num += 1\n", ""))
    for path, says in ((train, " does not end an iteration with 'local_iter_num += 1'"),
                       (tmp_path / "none" / "train.py", ": its checkout has no train.py")):  # fmt: skip
        out = run_main(bench.main, "--speedrun", "--budget", "5", "--data.path", str(text), "--nanogpt-train",
                       str(path), cwd=tmp_path, prog="bench.py")  # fmt: skip
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
        want = f"error: --nanogpt-train {str(path)!r}{says}; pass train.py of a karpathy/nanoGPT checkout"
        assert out.stderr.strip().splitlines() == [want]


# ---- long context: attention and model steps over the context, dense and sparse ------------------------
def test_an_attention_job_times_one_pass_and_its_memory_for_every_kernel():
    from transformers_scratch.experiments.scaling import KERNELS, attention_job

    for kernel in KERNELS:
        job = {"kind": "attention", "device": "cpu", "kernel": kernel, "context": 256, "batch": 1, "heads": 2,
               "head_width": 8}  # fmt: skip
        result = run_job(job)
        assert result["seconds"] > 0 and result["added_mb"] >= 0, kernel
    assert attention_job({**job, "kernel": "sdpa"}).keys() == {"seconds", "added_mb"}


@pytest.mark.slow
def test_a_gpu_sweep_measures_every_context_in_one_process_and_keeps_the_points_before_a_failure():
    """On a GPU one child process measures a kernel at every context; here the same job on a CPU, where the
    explicit matrix at 2^20 positions (4 TiB) fails in the child after the first point is printed."""
    from transformers_scratch.experiments.scaling import attention_points

    job = {"kind": "attention_sweep", "device": "cpu", "kernel": "explicit", "batch": 1, "heads": 1, "head_width": 4}
    assert [p["context"] for p in run_job({**job, "contexts": [64, 128]})["points"]] == [64, 128]
    failed = run_isolated({**job, "contexts": [64, 2**20]}, timeout=120)
    assert [p["context"] for p in failed["printed"]] == [64] and "error" in failed
    args = argparse.Namespace(attn_heads=1, attn_head_width=4, timeout=60, memory_budget_gb=None)
    points = list(attention_points("explicit", [64, 2**20, 2**21], args, "cuda", lambda job, cap, timeout: failed))
    assert [t for t, _ in points] == [64, 2**20] and points[0][1]["seconds"] > 0
    assert points[1][1] == {"error": failed["error"]}


def test_the_scaling_report_fits_exponents_and_draws_a_log_log_picture(tmp_path):
    from transformers_scratch.experiments.scaling import block_for, draw_scaling, exponent, format_scaling

    assert [block_for(t) for t in (1024, 4096, 16384, 65536)] == [32, 64, 128, 256]
    assert exponent([(1024, 9.0), (4096, 1.0), (8192, 4.0), (16384, 16.0)]) == pytest.approx(2.0)  # from 4096 up
    assert exponent([(4096, 1.0)]) is None
    points = lambda p: [{"context": t, "seconds": (t / 4096) ** p, "added_mb": t / 1000} for t in (4096, 8192)]  # noqa: E731
    rows = [{"kernel": k, "points": points(p), "exponent": p} for k, p in (("sdpa", 2), ("explicit", 2),
                                                                             ("fixed/split", 1.5))]  # fmt: skip
    model = [{"kernel": k, "points": [{"context": 4096, "tokens_per_s": v}]}
             for k, v in (("sdpa", 10), ("fixed/split", 30))]  # fmt: skip
    report = {"contexts": [4096, 8192], "attention": rows, "model": model, "summary": 4,
              "attention_shape": "batch 1, 4 heads of 32"}  # fmt: skip
    text = "\n".join(format_scaling(report, {"depth": 6, "emb": 256, "heads": 8}))
    assert "fixed/split over SDPA: 1.0x at 4,096, 1.4x at 8,192; faster from 8,192" in text  # a tie is no win
    assert "fixed/split over SDPA: 3.0x at 4,096" in text and " 2.00" in text and " 1.50" in text
    fig = draw_scaling(report, str(tmp_path / "s.png"))
    assert (tmp_path / "s.png").stat().st_size > 0
    fig.canvas.draw()  # the log axes' numbers (2^12, 10^-2, in math text) drawn as numbers, not as their markup
    ticks = [t for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    assert ticks and all(t.get_window_extent().width < 5 * t.get_fontsize() for t in ticks)


def test_the_long_context_command_measures_every_kernel_and_a_model_step(tmp_path, monkeypatch):
    report = bench_in_process(monkeypatch, tmp_path, "--long-context", "--start-context", "64", "--max-context", "128",
                              "--depth", "1", "--emb", "32", "--heads", "2", "--attn-heads", "2", "--attn-head-width",
                              "8", "--model-steps", "1", "--plot", str(tmp_path / "s.png"))["scaling"]  # fmt: skip
    assert [row["kernel"] for row in report["attention"]][:2] == ["sdpa", "explicit"]
    assert all(len(row["points"]) == 2 for row in report["attention"] + report["model"])
    assert (tmp_path / "s.png").stat().st_size > 0


def test_the_long_context_tables_measure_the_kernels_they_are_given(tmp_path, monkeypatch):
    report = bench_in_process(monkeypatch, tmp_path, "--long-context", "--start-context", "64", "--max-context", "64",
                              "--kernels", "fixed/split", "sdpa", "--attn-heads", "2", "--attn-head-width", "8",
                              "--model-steps", "0")["scaling"]  # fmt: skip
    assert [row["kernel"] for row in report["attention"]] == ["fixed/split", "sdpa"] and report["model"] == []
    report = bench_in_process(monkeypatch, tmp_path, "--long-context", "--start-context", "64", "--max-context", "64",
                              "--kernels", "sdpa", "--model-kernels", "strided/alternate", "--depth", "2", "--emb",
                              "16", "--heads", "2", "--model-steps", "1")["scaling"]  # fmt: skip
    assert [row["kernel"] for row in report["model"]] == ["strided/alternate"] and report["model"][0]["points"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--depth", "0"], "error: argument --depth: 0 is not an integer in [1, 1,000]; see "),
        (["--batch", "-1"], "error: argument --batch: -1 is not an integer in [1, 16,777,216]; see "),
        (["--speedrun", "--budget", "0"], "error: argument --budget: 0.0 is not a positive number; see "),
        (["--heads", "3", "--emb", "16"], "error: model emb=16 is not divisible by heads=3"),
        (["--config", "none.yaml"], "error: --config 'none.yaml': No such file or directory; pass one of configs/"),
        (["--config", "text.txt"], "error: --config 'text.txt' is not a project config (YAML with model.init_args)"),
        (
            ["--long-context", "--start-context", "4096", "--max-context", "1024"],
            "error: --start-context 4096 is past --max-context 1024",
        ),  # fmt: skip
        (["--plot", "scaling.png"], "error: --plot is a setting of --long-context runs, and does nothing without"),
        (["--data.path", "text.txt"], "error: --data.path is a setting of --end-to-end or --speedrun runs"),
        (["--speedrun"], "error: --speedrun needs --data.path, the text to train on and score"),
        (["--end-to-end", "--data.path", "/dev/null"], "error: --data.path '/dev/null' is not a regular file; pass"),
        (["--speedrun", "--data.path", "."], "error: --data.path '.' is a folder; pass the text to train on"),
        (
            ["--long-context", "--nanogpt", "model.py"],
            "error: --nanogpt is a setting of the default run, which --long-context replaces; leave it out",
        ),  # fmt: skip
        (["--nanogpt", "none.py"], "error: --nanogpt 'none.py' is no Python file; pass model.py of a karpathy/nanoGPT"),
        (["--nanogpt", "text.txt"], "error: --nanogpt 'text.txt' is no Python file; pass model.py"),  # measured first
        (["--long-context", "--plot", "."], "error: --plot '.' is a folder; pass a file name, e.g. --plot scaling.png"),
        (["--long-context", "--plot", "new/"], "error: --plot 'new/' is a folder; pass a file name, e.g. --plot new/"),
        (["--long-context", "--plot", "s.xyz"], "error: --plot 's.xyz' ends in '.xyz', which is no picture format"),
        (
            ["--long-context", "--plot", "text.txt/s.png"],
            "error: --plot 'text.txt': File exists; a file of that name stands where a folder is to be made",
        ),  # fmt: skip
        (["--long-context", "--search", "--plot", "s.png"], "error: --plot draws the sweep over contexts, which --"),
        (["--long-context", "--max-context", "1024", "--plot", "/proc/s.png"], "error: --plot '/proc/s.png': "),
    ],
)
def test_a_bad_flag_or_config_ends_the_bench_with_one_line_before_any_measurement(tmp_path, argv, says):
    """Bounds are declared on the flags' types (those of :mod:`transformers_scratch.bounds`); a model the sizes
    cannot build, a config that is no project config, or contexts in the wrong order are refused the same way."""
    from transformers_scratch.experiments import bench

    (tmp_path / "text.txt").write_text("not: [a config\n")
    out = run_main(bench.main, *argv, "--no-compile", cwd=tmp_path, prog="bench.py")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith(says), out.stderr
    assert not out.stdout, out.stdout  # nothing measured (a folder that takes no file was refused after the sweep)


@pytest.mark.slow
def test_a_report_into_a_pipe_whose_reader_is_gone_ends_quietly(tmp_path):
    """``bench ... | head`` ends as ``cli.py`` does when the reader stops: SIGPIPE's status (141), no traceback."""
    script = "from transformers_scratch.experiments import bench; bench.bench = lambda _: print('x'); bench.main([])"
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    with os.fdopen(write, "wb") as gone:
        done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, stdout=gone, stderr=subprocess.PIPE,
                              text=True, timeout=300)  # fmt: skip
    assert (done.returncode, done.stderr) == (141, ""), done.stderr[-2000:]

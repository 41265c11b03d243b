"""The benchmark command: what it measures and how it reports, at toy sizes (its numbers are not tested)."""

import json
import math
import subprocess
import sys
import textwrap

from transformers_scratch.bench import format_report, run_isolated, run_job, train_job

TOY = {"vocab_size": 32, "context": 16, "emb": 16, "heads": 2, "depth": 1}


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


def test_a_failed_measurement_is_reported_not_raised():
    job = train_job("cpu", {**TOY, "emb": 4096, "context": 4096}, batch=64, context=4096, steps=1, warmup=0,
                    precision="32-true")  # fmt: skip
    result = run_isolated(job, memory_cap_gb=1.0, timeout=120)  # far past a 1 GB heap
    assert set(result) == {"error"} and "allocate" in result["error"]


def test_the_command_prints_a_table_and_json(tmp_path):
    argv = [sys.executable, "-m", "transformers_scratch.bench", "--depth", "1", "--emb", "16", "--heads", "2",
            "--context", "16", "--batch", "2", "--steps", "1", "--warmup", "0", "--no-compile", "--new-tokens", "4",
            "--json"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True).stdout
    report = json.loads(out)
    assert [row["variant"] for row in report["train"]] == [
        "fused (default)",
        "reference attention",
        "activation checkpointing",
    ]
    assert all(row["tokens_per_s"] > 0 for row in report["train"] + report["generate"])
    table = format_report(report)
    assert "fused / reference attention:" in table and "KV cache speed-up:" in table
    assert report["hardware"].startswith("CPU") and report["date"] in table

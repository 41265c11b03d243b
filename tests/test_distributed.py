"""Multi-device training is the same training: DDP on 2 CPU processes vs one process, same global batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

SCRIPT = Path(__file__).with_name("ddp_script.py")


def run(mode: str, out: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(SCRIPT), mode, str(out)], env=env, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs the gloo backend")
def test_ddp_matches_one_process_and_only_rank_0_writes_checkpoints(tmp_path):
    run("single", tmp_path / "single")
    run("ddp", tmp_path / "ddp")

    single = json.loads((tmp_path / "single" / "losses_rank0.json").read_text())
    ranks = [json.loads((tmp_path / "ddp" / f"losses_rank{r}.json").read_text()) for r in (0, 1)]
    assert len(single) == len(ranks[0]) == len(ranks[1]) == 5
    assert ranks[0] != ranks[1]  # the ranks saw different halves of the batch
    # Equal halves: the global batch's mean loss is the mean of the two ranks' means, at every step.
    assert_close(torch.tensor(single), (torch.tensor(ranks[0]) + torch.tensor(ranks[1])) / 2, rtol=1e-5, atol=1e-6)

    # Averaged gradients make the same updates: the weights agree after training.
    a = torch.load(tmp_path / "single" / "final.pt")
    b = torch.load(tmp_path / "ddp" / "final.pt")
    for name in a:
        assert_close(b[name], a[name], rtol=1e-4, atol=1e-5, msg=name)

    writes = tmp_path / "ddp" / "writes_rank0.txt"
    assert writes.exists() and not (tmp_path / "ddp" / "writes_rank1.txt").exists()  # rank 1 wrote nothing
    files = sorted(p.name for p in (tmp_path / "ddp" / "ckpt").iterdir())
    assert "last.ckpt" in files and not any(name.endswith(".tmp") for name in files)

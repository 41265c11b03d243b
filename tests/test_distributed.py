"""Multi-device training is the same training: DDP and FSDP on 2 CPU processes vs one process, same global
batch. Lightning's FSDP strategy runs on CPU here through two small shims in distributed_script.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from distributed_script import MODEL
from torch.testing import assert_close

from transformers_scratch.training.modules import LitCharLM

SCRIPT = Path(__file__).with_name("distributed_script.py")
pytestmark = pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs the gloo backend")


def run(mode: str, out: Path) -> Path:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(SCRIPT), mode, str(out)], env=env, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    return run("single", tmp_path_factory.mktemp("single"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ddp", "fsdp", "fsdp-checkpointing", "fsdp-compile"])
def test_two_processes_match_one_and_only_rank_0_writes_checkpoints(single, mode, tmp_path):
    out = run(mode, tmp_path)
    one = json.loads((single / "losses_rank0.json").read_text())
    ranks = [json.loads((out / f"losses_rank{r}.json").read_text()) for r in (0, 1)]
    assert len(one) == len(ranks[0]) == len(ranks[1]) == 5
    assert ranks[0] != ranks[1]  # the ranks saw different halves of the batch
    # Equal halves: the global batch's mean loss is the mean of the two ranks' means, at every step.
    assert_close(torch.tensor(one), (torch.tensor(ranks[0]) + torch.tensor(ranks[1])) / 2, rtol=1e-5, atol=1e-6)

    # Averaged gradients (and, under FSDP, the norm clipped across shards) make the same updates: the weights
    # in the last checkpoint agree, and a plain module loads them, with no sharding left in their names.
    a = torch.load(single / "ckpt" / "last.ckpt", weights_only=True)["state_dict"]
    b = torch.load(out / "ckpt" / "last.ckpt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys()
    for name in a:
        assert_close(b[name], a[name], rtol=1e-4, atol=1e-5, msg=name)
    LitCharLM(MODEL).load_state_dict(b)

    writes = out / "writes_rank0.txt"
    assert writes.exists() and not (out / "writes_rank1.txt").exists()  # rank 1 wrote nothing
    files = sorted(p.name for p in (out / "ckpt").iterdir())
    assert "last.ckpt" in files and not any(name.endswith(".tmp") for name in files)
    if mode.startswith("fsdp"):  # each block a shard unit; the root unit: embeddings, final norm, output layer
        report = json.loads((out / "fsdp.json").read_text())
        assert report["units"] == ["LitCharLM", "TransformerBlock", "TransformerBlock"]
        assert report["compiled"] == (mode == "fsdp-compile")


@pytest.mark.slow
def test_a_spawned_run_pickles_its_settings_and_resumes_through_the_cli(tmp_path):
    """``ddp_spawn`` sends the trainer to the processes it starts, pickled: the settings' bound types went by a name
    the module lacked (a PicklingError), and the main process, which trains nothing, said it wrote no checkpoint."""
    from inprocess import run_process
    from test_cli import corpus

    cli = str(Path(__file__).resolve().parents[1] / "cli.py")
    args = [cli, "fit", "--config", str(Path(cli).with_name("configs") / "tiny_charlm.yaml"), "--data.path",
            str(corpus(tmp_path / "text.txt")), "--trainer.strategy", "ddp_spawn", "--trainer.devices", "2",
            "--trainer.logger", "false", "--sample.length", "0", "--trainer.limit_val_batches", "1"]  # fmt: skip
    env = {"OMP_NUM_THREADS": "1"}
    first = run_process(*args, "--trainer.max_steps", "2", cwd=tmp_path, env=env)
    assert first.returncode == 0 and "trained no step" not in first.stderr, first.stderr[-3000:]
    again = run_process(*args, "--trainer.max_steps", "4", "--ckpt_path", "last", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert torch.load(tmp_path / "checkpoints" / "tiny_charlm" / "last.ckpt", weights_only=True)["global_step"] == 4


@pytest.mark.slow
def test_a_refusal_under_ddp_or_ddp_spawn_is_one_line_and_a_refused_data_read_leaves_no_folder(tmp_path):
    """The processes that ddp_spawn starts hand on only a traceback, as text: a refusal in one of them was a
    traceback of torch's, and a data file refused there had left the main process's log folders behind."""
    from inprocess import run_process
    from test_cli import corpus

    cli = str(Path(__file__).resolve().parents[1] / "cli.py")
    config = ["--config", str(Path(cli).with_name("configs") / "tiny_charlm.yaml"), "--trainer.devices", "2"]
    args = [cli, "fit", *config, "--trainer.strategy", "ddp_spawn", "--sample.length", "0", "--trainer.max_steps", "3"]
    env = {"OMP_NUM_THREADS": "1"}
    ddp = [*config, "--trainer.strategy", "ddp"]  # every process runs the command: each printed the line
    for command in (args, [cli, "fit", *ddp], [cli, "test", *ddp]):
        missing = run_process(*command, "--data.path", str(tmp_path / "missing.txt"), cwd=tmp_path, env=env)
        assert missing.returncode == 1 and "Traceback" not in missing.stderr, missing.stderr[-3000:]
        assert missing.stderr.count("error: ") == 1 and "error: data.path" in missing.stderr, missing.stderr[-3000:]
        assert not (tmp_path / "logs").exists() and not (tmp_path / "checkpoints").exists()
    text = str(corpus(tmp_path / "text.txt"))
    diverged = run_process(*args, "--data.path", text, "--model.optim.lr", "1e10", "--trainer.gradient_clip_val", "0",
                           "--trainer.logger", "false", cwd=tmp_path, env=env)  # fmt: skip
    assert diverged.returncode == 1 and "Traceback" not in diverged.stderr, diverged.stderr[-3000:]
    said = ("error: the weights became NaN or infinite", "error: a process of this run stopped")  # torch: the first
    assert diverged.stderr.count("error: ") == 1 and any(s in diverged.stderr for s in said), diverged.stderr[-3000:]
    assert "Terminating process" not in diverged.stderr  # torch's word on the other process it stopped


def test_an_error_that_ends_a_spawned_processs_run_leaves_no_signal_handler_of_lightnings(monkeypatch):
    """A process that ddp_spawn starts runs the fit with no handling of its error, so Lightning does not tear it down:
    its SIGTERM handler stayed, and the launcher's SIGTERM to the process ran it, a broadcast to processes already
    gone, whose traceback came under the refusal's one line (the test above, under load)."""
    import signal

    import lightning as L
    from lightning.pytorch.demos.boring_classes import BoringModel
    from lightning.pytorch.trainer import call

    from transformers_scratch.training.callbacks import StopOnSignal

    class Refuses(L.Callback):
        def on_train_end(self, trainer, module):
            raise ValueError("refused at the end")

    monkeypatch.setattr(call, "_call_and_handle_interrupt", lambda trainer, fn, *args, **kwargs: fn(*args, **kwargs))
    before = signal.getsignal(signal.SIGTERM)
    trainer = L.Trainer(max_steps=1, callbacks=[StopOnSignal(), Refuses()], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")  # fmt: skip
    with pytest.raises(ValueError, match="refused at the end"):
        trainer.fit(BoringModel())
    assert signal.getsignal(signal.SIGTERM) is before


SIGNAL_TO_RANK_0 = """
import os, signal, sys
import lightning as L
import transformers_scratch.cli.lightning as cli
from transformers_scratch.cli import main

class Send(L.Callback):  # SIGTERM to rank 0's process alone, as `kill PID` of the launching process sends it
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_rank == 0 and trainer.global_step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

def with_sender(self, before=cli.CLI.before_fit):
    before(self)
    self.trainer.callbacks.append(Send())

cli.CLI.before_fit = with_sender
main()  # the command line as given: Lightning starts rank 1 with it
"""


@pytest.mark.slow
def test_a_signal_to_rank_0_alone_stops_every_rank_at_the_same_step_and_saves_it(tmp_path):
    """A rank that stopped alone (rank 0, saving) left the other waiting in the next step's all-reduce for ever."""
    from test_cli import corpus

    (script := tmp_path / "signalled.py").write_text(SIGNAL_TO_RANK_0)  # a file: each rank runs it again
    root = Path(__file__).resolve().parents[1]
    args = ["fit", "--config", str(root / "configs" / "tiny_charlm.yaml"), "--data.path",
            str(corpus(tmp_path / "text.txt")), "--trainer.strategy", "ddp", "--trainer.devices", "2",
            "--trainer.logger", "false", "--sample.length", "0", "--trainer.max_steps", "50"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root), "HOME": str(tmp_path)}
    ran = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=180)  # fmt: skip
    assert ran.returncode == 143, ran.stderr[-3000:]
    assert "SIGTERM at step 4: saved" in ran.stderr, ran.stderr[-3000:]  # sent after step 3's check: the next step's
    assert torch.load(tmp_path / "checkpoints/tiny_charlm/last.ckpt", weights_only=True)["global_step"] == 4


FAILING_RANK = """
import os
import lightning as L
import transformers_scratch.cli.lightning as cli
from transformers_scratch.cli import main

class Refuse(L.Callback):  # a refusal on one rank alone, as an out-of-memory error on one device is
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_rank == int(os.environ["RANK_AT_FAULT"]) and trainer.global_step == 3:
            raise ValueError("a refusal on one rank")

def with_refusal(self, before=cli.CLI.before_fit):
    before(self)
    self.trainer.callbacks.append(Refuse())

cli.CLI.before_fit = with_refusal
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("at_fault", [0, 1])
def test_a_refusal_on_one_rank_is_its_line_and_the_others_say_so_in_one(tmp_path, at_fault):
    """The other rank's collective fails (gloo: the connection closed by its peer): that was a traceback beside the
    one line that said why."""
    from test_cli import corpus

    (script := tmp_path / "refusing.py").write_text(FAILING_RANK)
    root = Path(__file__).resolve().parents[1]
    args = ["fit", "--config", str(root / "configs" / "tiny_charlm.yaml"), "--data.path",
            str(corpus(tmp_path / "text.txt")), "--trainer.strategy", "ddp", "--trainer.devices", "2",
            "--trainer.logger", "false", "--sample.length", "0", "--trainer.max_steps", "50"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root), "HOME": str(tmp_path),
           "RANK_AT_FAULT": str(at_fault)}  # fmt: skip
    ran = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=180)  # fmt: skip
    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr[-3000:]
    assert "error: a refusal on one rank" in ran.stderr, ran.stderr[-3000:]
    assert f"error: rank {1 - at_fault}: another process of this run stopped" in ran.stderr, ran.stderr[-3000:]
    assert ran.stderr.count("the LearningRateMonitor callback is left out") == 1  # rank 0's note alone


@pytest.mark.slow
def test_predict_on_two_processes_writes_what_one_writes(tmp_path):
    """Under DDP each process scored its share of the windows, and rank 0 wrote its own half alone."""
    from inprocess import run_process
    from test_cli import corpus
    from test_reliability import TINY, write_checkpoint

    text = str(corpus(tmp_path / "text.txt", 6_000))
    ckpt = write_checkpoint(tmp_path / "lm.ckpt", LitCharLM(TINY), {"vocab_symbols": None})
    cli = str(Path(__file__).resolve().parents[1] / "cli.py")
    args = [cli, "predict", "--config", str(Path(cli).with_name("configs") / "tiny_charlm.yaml"), "--data.path", text,
            "--data.context", "16", "--ckpt_path", str(ckpt), "--data.predict_path", text]  # fmt: skip
    outputs = []
    for devices, strategy in (("1", "auto"), ("2", "ddp")):
        ran = run_process(*args, "--trainer.devices", devices, "--trainer.strategy", strategy, cwd=tmp_path,
                          env={"OMP_NUM_THREADS": "1"})  # fmt: skip
        assert ran.returncode == 0, ran.stderr[-3000:]
        outputs.append(ran.stdout.strip().splitlines()[-1])
    assert outputs[0] == outputs[1] and "bits per byte over 5,999 bytes" in outputs[0], outputs

"""What a hostile or unlucky user meets: bad settings, configs that name code, checkpoints that are not data,
runs that diverge, are killed and resumed. Each test fails when its guard is removed."""

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from test_cli import corpus
from test_data import make_aclimdb
from torch.utils.data import DataLoader, TensorDataset

from transformers_scratch import LMConfig
from transformers_scratch.callbacks import SafeModelCheckpoint, SampleText, TrainingDiverged
from transformers_scratch.cli import build_cli, main
from transformers_scratch.data.vocab import ByteVocab
from transformers_scratch.lit import LitCharLM, OptimConfig

ROOT = Path(__file__).resolve().parents[1]
TINY_LM = str(ROOT / "configs" / "tiny_charlm.yaml")
TINY_IMDB = str(ROOT / "configs" / "tiny_imdb.yaml")
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
TINY = LMConfig(vocab_size=256, context=16, emb=32, heads=4, depth=2)


def fails(capsys, *args: str, message: str) -> str:
    """main(args) exits non-zero with one ``error:`` line that contains message, and no traceback."""
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    assert exit_.value.code not in (0, None)
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error:") == 1, err[-3000:]
    assert message in err, err[-3000:]
    return err


@pytest.fixture
def text(tmp_path, monkeypatch) -> Path:
    """A small text file, and the working directory a run writes its logs and checkpoints into."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "text.txt"
    path.write_text("the cat sat on a mat while one dog ran far away to see its friend. " * 800)
    return path


# ---- settings: the project's own message, on one line ------------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (["--model.model.heads", "3"], "emb=128 is not divisible by heads=3"),
        (["--model.model.depth", "0"], "depth=0 must be a positive integer"),
        (["--data.batch_size", "0"], "data.batch_size=0 must be a positive integer"),
        (["--data.context", "0"], "data.context=0 must be a positive integer"),
        (["--trainer.max_steps", "-5"], "max_steps"),
        (["--bogus", "3"], "unrecognized arguments: --bogus"),
    ],
    ids=["heads", "depth", "batch-size", "context", "max-steps", "unknown"],
)
def test_out_of_range_settings_get_one_line(capsys, text, args, message):
    err = fails(capsys, "fit", "--config", TINY_LM, "--data.path", str(text), *args, message=message)
    assert "Does not validate" not in err and "usage:" not in err


# ---- the optimizer is the project's ---------------------------------------------------------------------
@pytest.mark.parametrize("flag", [["--optimizer", "AdamW"], ["--lr_scheduler=StepLR"], ["--optimizer.lr", "1"]])
def test_optimizer_flags_are_refused_with_the_settings_to_use(capsys, text, flag):
    fails(capsys, "fit", "--config", TINY_LM, "--data.path", str(text), *flag, message="--model.optim.lr")


def test_optimizer_in_a_config_is_refused(capsys, text, tmp_path):
    config = tmp_path / "opt.yaml"
    config.write_text("optimizer:\n  class_path: torch.optim.SGD\n  init_args: {lr: 0.1}\n")
    fails(capsys, "fit", "--config", TINY_LM, "--config", str(config), "--data.path", str(text), message="optimizer")


# ---- configs name only the project, torch and lightning ----------------------------------------------
HOSTILE = {
    "print-hook": "trainer:\n  callbacks:\n  - class_path: lightning.pytorch.callbacks.LambdaCallback\n"
    "    init_args: {on_fit_start: builtins.print}\n",
    "system-hook": "trainer:\n  callbacks:\n  - class_path: lightning.pytorch.callbacks.LambdaCallback\n"
    "    init_args: {on_fit_start: os.system}\n",
    "eval-hook": "trainer:\n  callbacks:\n  - class_path: lightning.pytorch.callbacks.LambdaCallback\n"
    "    init_args: {on_fit_start: builtins.eval}\n",
    "popen": "trainer:\n  callbacks:\n  - class_path: subprocess.Popen\n    init_args: {args: [touch, pwned]}\n",
    "module": "trainer:\n  callbacks:\n  - class_path: sideeffect.Callback\n",
    "model": "model:\n  class_path: sideeffect.Module\n",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_config_naming_code_outside_the_project_is_refused_before_import(capsys, text, tmp_path, name, monkeypatch):
    # A module whose import alone would leave a trace.
    (tmp_path / "sideeffect.py").write_text("open('imported', 'w').close()\nCallback = Module = object\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("sideeffect", None)
    config = tmp_path / f"{name}.yaml"
    config.write_text(HOSTILE[name])
    fails(capsys, "fit", "--config", TINY_LM, "--config", str(config), "--data.path", str(text),
          "--trainer.max_steps", "1", message="is refused")  # fmt: skip
    assert not (tmp_path / "imported").exists() and "sideeffect" not in sys.modules
    assert not (tmp_path / "pwned").exists()


def test_lightnings_own_callbacks_still_load(text, tmp_path):
    config = tmp_path / "ok.yaml"
    config.write_text(
        "trainer:\n  callbacks:\n  - class_path: lightning.pytorch.callbacks.EarlyStopping\n"
        "    init_args: {monitor: val/bpc}\n  - class_path: lightning.pytorch.callbacks.LambdaCallback\n"
        "    init_args: {on_fit_start: torch.manual_seed}\n"
    )
    run = build_cli(["--config", TINY_LM, "--config", str(config), "--data.path", str(text)], run=False)
    names = [type(c).__name__ for c in run.trainer.callbacks]
    assert "EarlyStopping" in names and "LambdaCallback" in names


# ---- divergence is caught at the step it happens ------------------------------------------------------
class GoesNaN(LitCharLM):
    """Its training loss is NaN from optimizer step ``at`` (0-based) on, as an overflow would make it."""

    at = 3

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        return loss * float("nan") if self.trainer.global_step >= self.at else loss


def windows(n: int = 64) -> DataLoader:
    data = torch.randint(0, 256, (n, 17), generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(data[:, :-1], data[:, 1:]), batch_size=4)


def test_a_nan_loss_stops_training_at_the_next_logging_step_naming_the_last_good_checkpoint(tmp_path):
    ckpt = SafeModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_last=True)
    module = GoesNaN(TINY, OptimConfig(warmup_steps=1))
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        max_steps=30, log_every_n_steps=5, callbacks=[ckpt], default_root_dir=tmp_path)  # fmt: skip
    with pytest.raises(TrainingDiverged) as error:
        trainer.fit(module, windows(), windows(8))
    message = str(error.value)
    assert "at step 4 (checked at step 5)" in message  # the 4th step's loss, read on the logging step
    assert f"Last good checkpoint: {tmp_path / 'ckpt' / 'last.ckpt'}" in message
    assert trainer.global_step == 5
    good = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    assert good["global_step"] == 3 and all(torch.isfinite(w).all() for w in good["state_dict"].values())


def test_validation_never_runs_on_a_diverged_model(tmp_path):
    """A validation between logging steps would sample from NaN logits (torch.multinomial raises on them)."""
    module = GoesNaN(TINY, OptimConfig(warmup_steps=1))
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        max_steps=30, log_every_n_steps=50, val_check_interval=6, limit_val_batches=1,
                        callbacks=[SafeModelCheckpoint(dirpath=tmp_path)], default_root_dir=tmp_path)  # fmt: skip
    with pytest.raises(TrainingDiverged, match="at step 4 \\(checked at step 6\\)"):
        trainer.fit(module, windows(), windows(8))


def test_no_sample_from_non_finite_weights(caplog):
    class Data:
        vocab = ByteVocab()

        def seed_text(self, length, generator=None):
            return torch.zeros(1, length, dtype=torch.long)

    module = LitCharLM(TINY)
    with torch.no_grad():
        module.model.head.weight.fill_(float("nan"))
    trainer = SimpleNamespace(datamodule=Data(), sanity_checking=False, strategy=None, is_global_zero=True,
                              global_step=7, loggers=[])  # fmt: skip
    with caplog.at_level(logging.INFO):
        SampleText(length=5).on_validation_epoch_end(trainer, module)
    assert "no sample at step 7: the weights are not finite" in caplog.text


# ---- exact resume --------------------------------------------------------------------------------------
KILLED_RUN = """
import os, signal, sys
from lightning.pytorch.callbacks import Callback
from transformers_scratch.cli import build_cli

class Kill(Callback):  # SIGKILL, as an out-of-memory killer or a pre-empted node would
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == int(os.environ["KILL_AT"]):
            os.kill(os.getpid(), signal.SIGKILL)

run = build_cli(sys.argv[1:], run=False)
run.trainer.callbacks.append(Kill())
run.trainer.fit(run.model, datamodule=run.datamodule)
"""


def python(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    clean.update(HOME=str(cwd), PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=clean, capture_output=True, text=True, timeout=600)


def small_imdb(tmp_path: Path) -> Path:
    """24 training reviews: 8 held out for validation, 16 in 4 batches of 4."""
    return make_aclimdb(tmp_path / "imdb", per_class=12)


def same_training_state(a: dict, b: dict) -> None:
    """Bitwise: step, weights, AdamW moments and step counts, learning rates, schedule."""
    assert a["global_step"] == b["global_step"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for name in a["state_dict"]:
        assert torch.equal(a["state_dict"][name], b["state_dict"][name]), name
    (oa,), (ob,) = a["optimizer_states"], b["optimizer_states"]
    assert oa["param_groups"] == ob["param_groups"]
    for i in oa["state"]:
        for key in oa["state"][i]:
            assert torch.equal(oa["state"][i][key], ob["state"][i][key]), (i, key)
    assert a["lr_schedulers"] == b["lr_schedulers"]


@pytest.mark.parametrize(
    "kind, every, kill",
    [("charlm", 3, 7), ("charlm", 4, 9), ("imdb", 3, 7)],
    ids=["charlm", "charlm-epoch-end", "imdb"],
)
def test_a_killed_run_resumed_from_its_last_checkpoint_equals_the_uninterrupted_run(tmp_path, kind, every, kill):
    """Epochs of 4 batches, checkpoints every ``every`` steps, SIGKILL at step ``kill``: resumed from step 6
    (part-way through the second epoch) or step 8 (its end). Dropout is on, so the random stream must continue
    too, and validation samples text in between."""
    if kind == "charlm":
        data = ["--config", TINY_LM, "--data.path", str(corpus(tmp_path / "text.txt")), "--data.batches_per_epoch",
                "4", "--trainer.limit_val_batches", "2", "--sample.length", "5"]  # fmt: skip
    else:
        data = ["--config", TINY_IMDB, "--data.path", str(small_imdb(tmp_path)), "--data.batch_size", "4",
                "--data.val_size", "8", "--data.data_dir", str(tmp_path / "cache")]  # fmt: skip
    args = [*data, "--model.model.dropout", "0.1", "--trainer.max_steps", "12", "--trainer.max_epochs", "-1",
            "--model.optim.warmup_steps", "2", "--checkpoint.every_n_train_steps", str(every),
            "--trainer.logger", "false", "--trainer.deterministic", "true",
            "--trainer.enable_progress_bar", "false"]  # fmt: skip
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole.mkdir(), killed.mkdir()
    done = python(str(ROOT / "cli.py"), "fit", *args, cwd=whole)
    assert done.returncode == 0, done.stderr[-3000:]
    cut = python("-c", KILLED_RUN, *args, cwd=killed, env={"KILL_AT": str(kill)})
    assert cut.returncode == -signal.SIGKILL, cut.stderr[-3000:]
    name = Path(args[1]).stem
    assert torch.load(killed / "checkpoints" / name / "last.ckpt", weights_only=True)["global_step"] == kill - 1
    resumed = python(str(ROOT / "cli.py"), "fit", *args, "--ckpt_path", "last", cwd=killed)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = torch.load(whole / "checkpoints" / name / "last.ckpt", weights_only=True)
    b = torch.load(killed / "checkpoints" / name / "last.ckpt", weights_only=True)
    assert a["global_step"] == 12
    same_training_state(a, b)

"""What a hostile or unlucky user meets: bad settings, configs that name code, checkpoints that are not data,
runs that diverge, are killed and resumed. Each test fails when its guard is removed."""

import sys
from pathlib import Path

import pytest

from transformers_scratch.cli import build_cli, main

ROOT = Path(__file__).resolve().parents[1]
TINY_LM = str(ROOT / "configs" / "tiny_charlm.yaml")
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


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

"""Export: a model leaves the project as model.safetensors + config.json and comes back identical, with one
call and without Lightning."""

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from transformers_scratch import (
    CausalLM,
    ClassifierConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
    LMConfig,
    SequenceClassifier,
    from_pretrained,
    save_pretrained,
)

SIZES = dict(vocab_size=40, context=16, emb=32, heads=4, depth=2)
MODELS = {
    "lm": lambda: CausalLM(LMConfig(**SIZES, positions="sinusoidal")),
    "lm-tied": lambda: CausalLM(LMConfig(**SIZES, tie_weights=True)),
    "lm-rope": lambda: CausalLM(LMConfig(**SIZES, positions="rope")),
    "classifier-alibi": lambda: SequenceClassifier(ClassifierConfig(**SIZES, positions="alibi")),
    "classifier-cls": lambda: SequenceClassifier(ClassifierConfig(**SIZES, num_classes=3, pool="cls")),
    "enc-dec-shared": lambda: EncoderDecoder(EncoderDecoderConfig(**SIZES)),
    "enc-dec": lambda: EncoderDecoder(EncoderDecoderConfig(**SIZES, tgt_vocab_size=30, decoder_depth=1)),
}


def logits(model, kind: str) -> torch.Tensor:
    x = torch.arange(24).remainder(30).view(2, 12)
    with torch.no_grad():
        return model(x, x[:, :7]) if kind.startswith("enc-dec") else model(x)


def trained_a_little(kind: str):
    """Weights that differ from a fresh init: a round trip must carry them, not rebuild them."""
    torch.manual_seed(0)
    model = MODELS[kind]()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


@pytest.mark.parametrize("kind", MODELS)
def test_an_exported_model_loads_back_with_identical_logits(tmp_path, kind):
    model = trained_a_little(kind)
    save_pretrained(model, tmp_path / "out")
    loaded = from_pretrained(tmp_path / "out")
    assert type(loaded) is type(model) and loaded.cfg == model.cfg and not loaded.training
    assert torch.equal(logits(loaded, kind), logits(model, kind))


def test_a_model_of_no_exportable_class_is_refused_naming_those_that_are(tmp_path):
    with pytest.raises(ValueError, match="cannot export a Linear; exportable models: CausalLM, "):
        save_pretrained(torch.nn.Linear(2, 2), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_config_json_too_large_to_be_one_is_refused_before_it_is_parsed(tmp_path):
    folder = save_pretrained(MODELS["lm"](), tmp_path / "lm")
    (folder / "config.json").write_text(" " * 1_000_001)
    with pytest.raises(ValueError, match=r"config.json' holds 1,000,001 bytes, more than 1,000,000"):
        from_pretrained(folder)


def test_a_hugging_face_folder_is_sent_to_from_hf(tmp_path):
    folder = save_pretrained(MODELS["lm"](), tmp_path / "lm")
    (folder / "config.json").write_text('{"model_type": "gpt2", "n_embd": 32}')  # what save_hf writes
    with pytest.raises(ValueError, match="config.json' holds no model config of this project's; it is a Hugging Face"):
        from_pretrained(folder)


def test_a_tied_matrix_is_stored_once_and_stays_tied(tmp_path):
    model = trained_a_little("lm-tied")
    save_pretrained(model, tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert len(list(f.keys())) == len(list(model.parameters()))  # parameters() lists a shared tensor once
    loaded = from_pretrained(tmp_path)
    assert loaded.head.weight is loaded.embed.tokens.weight


@pytest.mark.slow
def test_loading_needs_no_lightning(tmp_path):
    model = trained_a_little("classifier-cls")
    save_pretrained(model, tmp_path / "out")
    torch.save(logits(model, "classifier-cls"), tmp_path / "expected.pt")
    script = (
        "import sys, torch\n"
        "sys.modules['lightning'] = None  # importing it would fail\n"
        "import transformers_scratch\n"
        f"model = transformers_scratch.from_pretrained({str(tmp_path / 'out')!r})\n"
        "x = torch.arange(24).remainder(30).view(2, 12)\n"
        f"assert torch.equal(model(x).detach(), torch.load({str(tmp_path / 'expected.pt')!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_export_never_overwrites_and_reading_checks_the_folder(tmp_path):
    save_pretrained(trained_a_little("lm"), tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()
    with pytest.raises(FileExistsError, match="already holds model.safetensors and config.json; pass another"):
        save_pretrained(trained_a_little("lm-tied"), tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(FileNotFoundError, match="holds no config.json"):
        from_pretrained(tmp_path / "nowhere")
    config = json.loads((tmp_path / "config.json").read_text())
    for model, named in [("Mystery", "'Mystery'"), (["CausalLM"], "\\['CausalLM'\\]"), ({}, "{}")]:  # no name
        (tmp_path / "config.json").write_text(json.dumps({**config, "model": model}))
        with pytest.raises(ValueError, match=f"model {named}; this version reads format 1 of CausalLM"):
            from_pretrained(tmp_path)


@pytest.mark.parametrize("change, message", [
    ({"emb": 10**9}, "emb=1000000000 is not an integer in"), ({"depth": 10**6}, "depth=1000000 is not an integer in"),
    ({"vocab_size": 10**10}, "vocab_size=10000000000 is not an integer in"), ({"depth": 500}, "declares"),
    ({"context": 10**10}, "context=10000000000 is not an integer in"), ({"emb": -8}, "emb=-8 is not an integer in"),
    ({"emb": 64, "heads": 4}, "does not match its weights"), ({"depth": 3}, "does not fit config.json"),
    ({"width": 3}, "setting 'width' that this version's LMConfig lacks"),
    ({"emb": 10**40 - 1}, "emb=9{40} is not an integer in"),
    ({"positions": "mearned"}, "positions='mearned' is not one of learned\\|"),
    ({"context": 2**21}, "declares context 2,097,152, more than 1,048,576: the config does not match its weights"),
])  # fmt: skip
def test_an_export_is_untrusted_its_sizes_checked_before_anything_is_allocated(tmp_path, change, message):
    """A config.json that declares a model its weights cannot hold is refused in one line, before the model is
    built (emb 10^9 would be a terabyte); one whose sizes are plausible but wrong is refused by the weights."""
    save_pretrained(trained_a_little("lm"), tmp_path / "out")
    path = tmp_path / "out" / "config.json"
    config = json.loads(path.read_text())
    config["config"].update(change)
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message) as refused:
        from_pretrained(tmp_path / "out")
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 600


# the last: nested past what Python reads (a RecursionError)
@pytest.mark.parametrize("content", [b"\x00\x01\x02", b"[1, 2]", b'{"format": 1, "model": "CausalLM"}',
                                     b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"])  # fmt: skip
def test_an_export_whose_config_is_not_one_is_refused(tmp_path, content):
    save_pretrained(trained_a_little("lm"), tmp_path / "out")
    (tmp_path / "out" / "config.json").write_bytes(content)
    with pytest.raises(ValueError, match="export the model again"):
        from_pretrained(tmp_path / "out")


@pytest.mark.parametrize(
    "break_it",
    [lambda b: b[: len(b) // 2], lambda b: (2**62).to_bytes(8, "little") + b[8:]],
    ids=["truncated", "header-length-2**62"],
)
def test_a_broken_safetensors_file_is_refused_naming_it_and_the_fix(tmp_path, break_it):
    """safetensors' own SafetensorError named neither the file nor the fix."""
    save_pretrained(trained_a_little("lm"), tmp_path / "out")
    weights = tmp_path / "out" / "model.safetensors"
    weights.write_bytes(break_it(weights.read_bytes()))
    with pytest.raises(ValueError, match="is not a readable safetensors file .*; export the model again") as e:
        from_pretrained(tmp_path / "out")
    assert str(weights) in str(e.value)


def test_an_export_of_nan_or_inf_weights_is_refused_naming_its_file(tmp_path):
    """An export is untrusted: weights of NaN or inf, which no trained model has, are a damaged file."""
    model = trained_a_little("lm")
    model.stack.blocks[1].ff[0].weight.data[2, 3] = float("nan")
    save_pretrained(model, tmp_path / "out")
    with pytest.raises(ValueError, match=r"model.safetensors' holds weights that are not finite \('stack.blocks.1.ff"):
        from_pretrained(tmp_path / "out")


def test_an_export_of_integer_weights_is_refused_naming_its_file(tmp_path):
    """An integer tensor was read into the float weights, each weight cut to a whole number: a damaged file."""
    from safetensors.torch import load_file, save_file

    save_pretrained(trained_a_little("lm"), tmp_path / "out")
    weights = tmp_path / "out" / "model.safetensors"
    state = load_file(weights)
    save_file({**state, "stack.blocks.1.ff.0.weight": state["stack.blocks.1.ff.0.weight"].long()}, weights)
    with pytest.raises(ValueError, match=r"model.safetensors' holds 'stack.blocks.1.ff.0.weight' as I64, not as weig"):
        from_pretrained(tmp_path / "out")


def test_the_project_export_carries_the_pretrained_family_options(tmp_path):
    """A Llama-layout model (RMSNorm, SwiGLU with its own width, grouped-query attention, no biases) goes out
    and back through this project's own format with the same logits."""
    from transformers_scratch import CausalLM, LMConfig, from_pretrained, save_pretrained

    cfg = LMConfig(vocab_size=200, context=48, emb=32, heads=4, kv_heads=2, depth=2, positions="rope", norm="rms",
                   activation="swiglu", bias=False, ff_hidden=40, rope_base=500.0)  # fmt: skip
    model = CausalLM(cfg).eval()
    save_pretrained(model, tmp_path / "out")
    again = from_pretrained(tmp_path / "out")
    ids = torch.randint(0, 200, (2, 12))
    assert again.cfg == cfg and torch.equal(again(ids), model(ids))


def test_a_tensor_file_that_the_disk_refuses_is_an_oserror_naming_it():
    """torch.save's own writer, on a full disk, raised a RuntimeError that named no file ('unexpected pos')."""
    from transformers_scratch.atomic import saved_whole

    with pytest.raises(RuntimeError):
        torch.save({"x": torch.zeros(4096)}, "/dev/full")
    with pytest.raises(OSError) as caught:
        saved_whole({"x": torch.zeros(4096)}, Path("/dev/full"))  # a device: written in place
    assert caught.value.errno == 28 and caught.value.filename == "/dev/full"


def test_a_file_is_written_whole_and_a_pipe_in_place(tmp_path):
    """A write that fails leaves the old file, and no temporary one; a pipe or a device (``/dev/stdout``) is written
    to, not replaced by a regular file, which the rename did (as root, /dev/stdout itself)."""
    from transformers_scratch.atomic import written_whole

    target = tmp_path / "a.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), written_whole(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]
    fifo, got = tmp_path / "pipe", []
    os.mkfifo(fifo)
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    with written_whole(fifo) as tmp:
        tmp.write_text("through")
    reader.join(10)
    assert got == ["through"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_an_export_that_the_disk_refuses_names_its_file_and_leaves_no_part_of_it(tmp_path, monkeypatch):
    """safetensors reports a failed write (a full disk) with an error type of its own, which was a traceback: it is
    an OSError naming the file, as Python's own, and the error path names the flag that gave its folder."""
    import safetensors.torch
    from safetensors import SafetensorError

    from transformers_scratch.cli.errors import error_line
    from transformers_scratch.model.hf import save_hf

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_model", full)
    monkeypatch.setattr(safetensors.torch, "save_file", full)
    for save, folder in ((save_pretrained, tmp_path / "ours"), (save_hf, tmp_path / "hf")):
        with pytest.raises(OSError) as caught:
            save(MODELS["lm-tied"](), folder)  # learned positions: GPT-2 takes it too
        assert caught.value.filename == str(folder / "model.safetensors") and not any(folder.iterdir())
        line = error_line(caught.value, ["export", "--out", str(folder)])
        assert line.startswith(f"--out '{folder}/model.safetensors': Error while serializing"), line
        assert line.endswith("check that disk (full, or failing), or pass a path on another one"), line

"""Every door fuzzed: generated and mutated inputs for each file the project reads, and hostile values for every
command's flags (Hypothesis). The property is the same at every door:

- the command exits 0, or exits non-zero with exactly one line that starts with ``error:``, names the file or the
  flag, and is followed by nothing but the hint to set TS_DEBUG; no traceback;
- the Python API (``from_hf``, ``from_pretrained``) returns a model or raises ``ValueError``/``OSError`` naming
  the folder;
- no example runs longer than :data:`SECONDS`, the process's peak resident memory during it stays under
  :data:`PEAK_MB` (and its address space grows by at most :data:`ROOM_MB`, so that a runaway allocation fails
  inside the example that made it rather than in the kernel's out-of-memory killer),
  no file that existed before the example is changed, and no code in a pickle runs.

The suite runs :data:`FAST` examples a door; the deep run, ``TS_FUZZ_SLOW=1 python -m pytest tests/test_fuzz.py``
(outside the suite: minutes), runs :data:`MANY` a door. Examples come from a
fixed seed (the same every run, ``TS_FUZZ_SEED`` to draw others), so a failure replays; every failure found became
a fixed example below (``@example``)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import resource
import signal
import struct
import zipfile
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, seed, settings
from hypothesis import strategies as st
from inprocess import finish_wandb

from transformers_scratch.bounds import MAX_COUNT, MAX_SAMPLE
from transformers_scratch.cli import main
from transformers_scratch.model.config import memory_bytes

ROOT = Path(__file__).resolve().parents[1]
TINY_LM = str(ROOT / "configs" / "tiny_charlm.yaml")
SECONDS = 60  # one example, at most
PEAK_MB = 4096  # the resident memory one example may add to the test process at its peak, at most
ROOM_MB = 6144  # address space an example may add to the test process (RLIMIT_AS), so a runaway read fails in it
FAST, MANY = 4, 300  # examples a door: the suite, and the deep run (9 doors: 2,700 in all)
SEED = int(os.environ.get("TS_FUZZ_SEED", "0"))  # the examples' seed: TS_FUZZ_SEED=1 and on draw new ones
TINY = ["--model.model.emb", "32", "--model.model.heads", "2", "--model.model.depth", "1", "--data.context", "16",
        "--data.batch_size", "4"]  # fmt: skip
SHORT = ["--trainer.max_steps", "1", "--data.batches_per_epoch", "1", "--trainer.limit_val_batches", "1",
         "--sample.length", "0", "--trainer.logger", "false", "--final_validation", "false"]  # fmt: skip
MARKER = "pickle-ran"  # a file that only code from a pickle would write


def fuzz(n_slow: int = MANY):
    """Hypothesis settings for one door: a few examples in the suite, many with ``TS_FUZZ_SLOW=1``. Examples
    come from one fixed seed, :data:`SEED`, not from the test's source (Hypothesis's ``derandomize``), so that a
    door's examples stay the same when its test is edited (an ``@example`` more); another seed explores further."""
    slow = os.environ.get("TS_FUZZ_SLOW") == "1"
    chosen = settings(max_examples=n_slow if slow else FAST, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck), print_blob=True)  # fmt: skip
    return lambda test: seed(SEED)(chosen(test))


@contextlib.contextmanager
def inside(folder: Path):
    """The working folder, for a block (contextlib.chdir from Python 3.11 on)."""
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


# ---- the property ------------------------------------------------------------------------------------------
class Hung(Exception):  # an Exception, so that Hypothesis shrinks and reports the example
    pass


def _alarm(*_):
    raise Hung(f"an example ran past {SECONDS} s")


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.md5(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def reset_peak() -> None:
    """The kernel's record of this process's peak resident set (VmHWM) set back to the present one, so that the
    peak read after an example is that example's (getrusage's ru_maxrss only ever grows)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def vm_size_mb() -> float:
    """This process's address space now, in MB."""
    return resource.getpagesize() * int(Path("/proc/self/statm").read_text().split()[0]) / 2**20


def rss_mb(field: str = "VmHWM") -> float:
    """The peak resident set since :func:`reset_peak` (``VmRSS``: the present one), in MB; where /proc has none,
    the process's whole life's peak."""
    with contextlib.suppress(OSError, StopIteration):
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith(f"{field}:")).split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@contextlib.contextmanager
def bounded(folder: Path):
    """Time, memory, files and pickles, around one example."""
    before = snapshot(folder)
    reset_peak()
    resident = rss_mb("VmRSS")  # what the examples and tests before left (garbage not yet collected): not this one's
    previous = signal.signal(signal.SIGALRM, _alarm)
    limits = resource.getrlimit(resource.RLIMIT_AS)
    room = int((vm_size_mb() + ROOM_MB) * 2**20)  # past it an allocation fails in Python, not in the kernel's killer
    resource.setrlimit(resource.RLIMIT_AS, (room if limits[1] == resource.RLIM_INFINITY else min(room, limits[1]),
                                            limits[1]))  # fmt: skip
    signal.alarm(SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        resource.setrlimit(resource.RLIMIT_AS, limits)
        signal.signal(signal.SIGALRM, previous)
    added_mb = rss_mb() - resident
    assert added_mb < PEAK_MB, f"peak resident memory {added_mb:,.0f} MB above the {resident:,.0f} MB before it"
    after = snapshot(folder)
    changed = [p for p, digest in before.items() if after.get(p, digest) != digest]
    assert not changed, f"files changed: {changed[:3]}"
    assert not list(folder.rglob(MARKER)), "code from a pickle ran"


def assert_cli(args: list[str], folder: Path, names: tuple[str, ...]) -> tuple[int, str]:
    """Asserts the property at a command's door: ``main(args)`` in ``folder`` exits 0, or exits non-zero with one
    ``error:`` line naming one of ``names`` (a file or a flag), within the bounds. Returns the code and the line."""
    out, err = io.StringIO(), io.StringIO()
    with bounded(folder), inside(folder), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    text = err.getvalue()
    if code == 0:
        return 0, text
    assert text.startswith("error:") or "\nerror:" in text, text[-2000:]  # a line of its own in a pipe or file
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]  # what a terminal shows (bars redraw on \r)
    errors = [i for i, line in enumerate(lines) if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in text, text[-2000:]
    assert [line for line in lines[errors[0] + 1 :] if line.strip()] == ["(set TS_DEBUG=1 to see the traceback)"], text
    line = lines[errors[0]]
    assert any(name in line for name in names), f"names none of {names}: {line}"
    assert len(line) < 1000, line
    return code, line


def assert_api(call, folder: Path, names: tuple[str, ...]):
    """Asserts the property at a Python entry point: ``call()`` returns, or raises ValueError/OSError naming one of
    ``names`` in one line, within the bounds. Returns the result or the error."""
    with bounded(folder.parent):
        try:
            return call()
        except (ValueError, OSError) as e:
            assert any(name in str(e) for name in names), f"names none of {names}: {e}"
            assert "\n" not in str(e), str(e)
            return e


# ---- mutations of real files -------------------------------------------------------------------------------
@st.composite
def mutated(draw, original: bytes) -> bytes:
    """A real file with bytes flipped, cut, spliced from elsewhere in it, or inserted."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "splice", "insert"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            data = data[:at]
        elif kind == "splice":
            start = draw(st.integers(0, max(len(original) - 1, 0)))
            data[at:at] = original[start : start + draw(st.integers(1, 256))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=32))
    return bytes(data)


def in_zip(original: bytes):
    """A torch checkpoint (a zip) with one member's bytes mutated: its pickle, or one tensor's storage."""

    @st.composite
    def build(draw) -> bytes:
        source = zipfile.ZipFile(io.BytesIO(original))
        names = source.namelist()
        target = draw(st.sampled_from(names))
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
            for name in names:
                body = source.read(name)
                z.writestr(name, draw(mutated(body)) if name == target else body)
        return out.getvalue()

    return build()


class RunsCode:
    """A pickle that runs code when it is loaded without ``weights_only``."""

    def __reduce__(self):
        return (Path.touch, (Path(MARKER),))


# ---- the files a run leaves, made once ----------------------------------------------------------------------
def steady(path: Path, root: Path) -> None:
    """A checkpoint without what differs from one making to the next (the temporary folder, in its checkpoint
    callback's paths, and the W&B run's id), so that a door's examples mutate the same bytes on every machine and
    a failure found in CI replays anywhere."""

    def relative(value):
        if isinstance(value, str):
            return value.replace(str(root), ".")
        if isinstance(value, dict):
            return type(value)((relative(k), relative(v)) for k, v in value.items())
        return [relative(v) for v in value] if isinstance(value, list) else value

    checkpoint = torch.load(path, weights_only=True)
    checkpoint["callbacks"] = relative(checkpoint["callbacks"])
    checkpoint["run"] = {
        logger: 0 if isinstance(v, int) else "fuzz" for logger, v in (checkpoint.get("run") or {}).items()
    }
    torch.save(checkpoint, path)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A text, a tiny trained character model's checkpoint, its export, a Hugging Face GPT-2 folder, a
    tokenizer.json, a run's metrics.csv and a config, all real, in one folder."""
    from transformers_scratch.model import CausalLM, LMConfig
    from transformers_scratch.model.hf import save_hf

    root = tmp_path_factory.mktemp("made")
    text = "the cat sat on a mat while one dog ran far away to see its friend. " * 300
    (root / "text.txt").write_text(text)
    with inside(root), contextlib.redirect_stderr(io.StringIO()), pytest.MonkeyPatch.context() as env:
        env.setenv("WANDB_MODE", os.environ.get("WANDB_MODE", "offline"))  # for these fits only
        main(["fit", "--config", TINY_LM, "--data.path", "text.txt", *TINY, "--trainer.max_steps", "2",
              "--data.batches_per_epoch", "2", "--trainer.limit_val_batches", "1", "--sample.length", "0",
              "--name", "made"])  # fmt: skip
        steady(root / "checkpoints/made/last.ckpt", root)
        main(["export", "--ckpt_path", "checkpoints/made/last.ckpt", "--out", "export"])
        main(["fit", "--config", str(ROOT / "configs" / "seq2seq_reverse.yaml"), "--model.model.emb", "32",
              "--model.model.heads", "2", "--model.model.depth", "1", "--model.model.decoder_depth", "1",
              "--data.batch_size", "4", "--trainer.max_steps", "2", "--data.batches_per_epoch", "2",
              "--data.val_size", "4", "--data.test_size", "4", "--trainer.limit_val_batches", "1",
              "--trainer.logger", "false", "--final_validation", "false", "--name", "s2s"])  # fmt: skip
        finish_wandb()  # the first fit's W&B run: a later test's logger would take it over
    torch.manual_seed(0)
    save_hf(CausalLM(LMConfig(vocab_size=64, context=16, emb=32, heads=2, depth=1)), root / "hf")
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers

        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.train_from_iterator([text], trainers.BpeTrainer(vocab_size=300))
        (root / "tok").mkdir()
        tokenizer.save(str(root / "tok" / "tokenizer.json"))
    except ImportError:
        pass
    (root / "metrics.csv").write_bytes(next(root.glob("logs/made/version_*/metrics.csv")).read_bytes())
    torch.save({"state_dict": RunsCode()}, root / "runs_code.ckpt", _use_new_zipfile_serialization=True)
    weights = torch.load(root / "checkpoints/made/last.ckpt", weights_only=True)["state_dict"]
    torch.save({k.removeprefix("model."): v for k, v in weights.items()}, root / "state_dict.pt")
    return root


def fresh(made: Path, tmp_path_factory) -> Path:
    """An empty working folder for one example, beside the made files."""
    return Path(tmp_path_factory.mktemp("example", numbered=True))


# ---- YAML configs --------------------------------------------------------------------------------------------
KEYS = ["trainer", "model", "data", "init_args", "class_path", "max_steps", "emb", "heads", "depth", "context",
        "batch_size", "callbacks", "checkpoint", "name", "seed_everything", "lr", "optim", "path",
        "sample"]  # fmt: skip
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=40),
    st.sampled_from(["transformers_scratch.training.LitCharLM", "os.system", "/dev/zero", ".", ""]),
)
yaml_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=4)
), max_leaves=12)  # fmt: skip


def yaml_text(value) -> bytes:
    import yaml

    return yaml.safe_dump(value, allow_unicode=True).encode()


# YAML's own forms, which safe_dump never writes: other types' tags, keys that are lists, anchors and merge keys
FORMS = ["!!set {a, b}", "!!omap [{a: 1}]", "!!pairs [{a: 1}]", "!!binary aGk=", "!!timestamp 2001-12-14", "2026-11-27",
         "{? [a]: 1}", "{? {a: 1}: 1}", "&x {a: 1}", "{<<: {max_steps: 2}, max_steps: 3}", "{<<: 1}", "!x 1",
         "!!python/name:os.system", "!!str 1"]  # fmt: skip


def nested(keys: list[str], form: str) -> bytes:
    """``form`` as the value of the dotted key ``keys``, one key a line."""
    return "".join(
        f"{'  ' * i}{key}:{f' {form}' if i == len(keys) - 1 else ''}\n" for i, key in enumerate(keys)
    ).encode()


yaml_forms = st.builds(nested, st.lists(st.sampled_from(KEYS), min_size=1, max_size=3), st.sampled_from(FORMS))


@fuzz()
@given(config=st.one_of(yaml_values.map(yaml_text), mutated((ROOT / "configs" / "tiny_charlm.yaml").read_bytes()),
                        st.binary(max_size=200), yaml_forms))  # fmt: skip
@example(config=b"data:\n  init_args:\n    path: /dev/zero\n")
@example(config=b"? ''\n: null\n")  # found: jsonargparse's "Empty nested key" named no file
@example(config=b"checkpoint: null\n")  # found: jsonargparse took a null group, and cfg.checkpoint.monitor raised
@example(config=b"trainer:\n  accelerator: c\n")  # found: Lightning's refusal named neither trainer nor the file
@example(config=b'"\\x1E": null\n')  # found: a key holding a line separator cut the one line short
@example(config=b"model: ''\n")  # found: an empty class name was a TypeError in the error path
@example(config=b"trainer:\n  ? ''\n  : null\n")  # found: an empty key below the top named no file
@example(config=b"init_args: null\n")  # found: init_args at the top, not a class's, named no file
@example(config=b"trainer:\n  1: 2\n")  # a key below the top that is no text named no file
@example(config=b"odel:\n  init_args:\n    model:\n      p# a: 1\n")  # found: a key with a space, the same
@example(config=b"checkpoint: false\n")  # found: one value for a group was an AttributeError
@example(config=b'"\\n": null\n')  # found: a key holding a line break cut the line before the file
@example(config=b"data:\n  class_path: null\n")  # jsonargparse failed inside, in Python's words
@example(config=b"trainer: !!set {max_steps}\n")  # found: a set for a group was read as no settings at all
@example(config=b"? [a, b]\n: 1\n")  # found: a list as a key was a TypeError in the duplicate-key check
@example(config=b"init_args:\n  max_steps:\n    class_path: x\n")  # found: init_args at the top, below it, no file
def test_a_config_file(made, tmp_path_factory, config):
    folder = fresh(made, tmp_path_factory)
    (folder / "fuzz.yaml").write_bytes(config)
    assert_cli(["fit", "--config", TINY_LM, "--config", "fuzz.yaml", "--data.path", str(made / "text.txt"), *TINY,
             *SHORT], folder, ("fuzz.yaml", "--", "model", "data", "trainer", "checkpoint", "sample"))  # fmt: skip


# ---- text files: --data.path, --prompt_file, --input_file, --text_file ----------------------------------------
TEXT = ("the cat sat on a mat. " * 40).encode()
texts = st.one_of(st.binary(max_size=2000), st.text(max_size=2000).map(str.encode), mutated(TEXT))


@fuzz()
@given(data=texts)
def test_a_data_file(made, tmp_path_factory, data):
    folder = fresh(made, tmp_path_factory)
    (folder / "fuzz.txt").write_bytes(data)
    assert_cli(["fit", "--config", TINY_LM, "--data.path", "fuzz.txt", *TINY, *SHORT], folder, ("fuzz.txt",))


@fuzz()
@given(data=texts, flag=st.sampled_from(["sample --prompt_file", "attention --text_file", "decode --input_file"]))
@example(data=b":", flag="decode --input_file")  # found: a character outside the alphabet named no file
@example(data=b"the cat sat on a mat. " * 60, flag="decode --input_file")  # found: the whole long line quoted
def test_a_prompt_or_text_file(made, tmp_path_factory, data, flag):
    folder = fresh(made, tmp_path_factory)
    (folder / "fuzz.txt").write_bytes(data)
    name, option = flag.split()
    extra = {"sample": ["--length", "5"], "attention": ["--out", "a.png"], "decode": []}[name]
    checkpoint = made / ("checkpoints/s2s/last.ckpt" if name == "decode" else "checkpoints/made/last.ckpt")
    assert_cli([name, "--ckpt_path", str(checkpoint), option, "fuzz.txt", *extra], folder, (option, "fuzz.txt"))


@fuzz()
@given(data=st.data())
def test_a_state_dict_file(made, tmp_path_factory, data):
    """convert_xl's input: a file of tensors (torch.save of a state_dict), mutated whole or member by member."""
    folder = fresh(made, tmp_path_factory)
    original = (made / "state_dict.pt").read_bytes()
    body = data.draw(st.one_of(mutated(original[:4096]).map(lambda head: head + original[4096:]), in_zip(original)))
    (folder / "fuzz.pt").write_bytes(body)
    assert_cli(["convert_xl", "--state_dict", "fuzz.pt", "--out", "out.ckpt"], folder, ("fuzz.pt", "--state_dict"))


# ---- checkpoints: torch zip archives, mutated whole and member by member --------------------------------------
@fuzz()
@given(
    blob=st.sampled_from(["real", "runs_code"]),
    how=st.sampled_from(["whole", "member"]),
    data=st.data(),
    name=st.sampled_from(["sample", "test", "export"]),
)
def test_a_checkpoint(made, tmp_path_factory, blob, how, data, name):
    folder = fresh(made, tmp_path_factory)
    original = (made / ("checkpoints/made/last.ckpt" if blob == "real" else "runs_code.ckpt")).read_bytes()
    if how == "whole":
        body = data.draw(mutated(original[:4096])) + original[4096:]  # the zip's header and the pickle's start
    else:
        body = data.draw(in_zip(original))
    (folder / "fuzz.ckpt").write_bytes(body)
    test = ["--config", TINY_LM, "--data.path", str(made / "text.txt"), *TINY, "--trainer.logger", "false",
            "--trainer.limit_test_batches", "1"]  # fmt: skip
    extra = {"sample": ["--prompt", "the", "--length", "5"], "test": test, "export": ["--out", "out"]}[name]
    assert_cli([name, "--ckpt_path", "fuzz.ckpt", *extra], folder, ("fuzz.ckpt", "--ckpt_path"))


# ---- Hugging Face folders: config.json, safetensors headers and bodies ---------------------------------------
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=False),
                         st.text(max_size=20))  # fmt: skip
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip


@fuzz()
@given(data=st.data(), part=st.sampled_from(["config", "header", "body", "header-length"]))
def test_a_hugging_face_folder(made, tmp_path_factory, data, part):
    from transformers_scratch.model.hf import from_hf

    folder = fresh(made, tmp_path_factory) / "hf"
    folder.mkdir()
    config, weights = (made / "hf" / "config.json").read_bytes(), (made / "hf" / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", weights[:8])[0]
    if part == "config":
        hf = json.loads(config)
        key = data.draw(st.sampled_from(sorted(hf)))
        hf[key] = data.draw(json_values)
        config = json.dumps(hf).encode() if data.draw(st.booleans()) else data.draw(mutated(config))
    elif part == "header":
        weights = weights[:8] + data.draw(mutated(weights[8 : 8 + n])).ljust(n)[:n] + weights[8 + n :]
    elif part == "body":
        weights = data.draw(mutated(weights))
    else:
        weights = struct.pack("<Q", data.draw(st.integers(0, 2**64 - 1))) + weights[8:]
    (folder / "config.json").write_bytes(config)
    (folder / "model.safetensors").write_bytes(weights)
    assert_api(lambda: from_hf(folder), folder, (str(folder),))


# ---- the project's own exports ------------------------------------------------------------------------------
@fuzz()
@given(data=st.data(), part=st.sampled_from(["config.json", "model.safetensors"]))
def test_an_export_folder(made, tmp_path_factory, data, part):
    from transformers_scratch import from_pretrained

    folder = fresh(made, tmp_path_factory) / "export"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        body = (made / "export" / name).read_bytes()
        (folder / name).write_bytes(data.draw(mutated(body)) if name == part else body)
    assert_api(lambda: from_pretrained(folder), folder, (str(folder),))


def test_an_export_folder_with_a_flipped_bit_in_a_choice(made, tmp_path_factory):
    """Found by the export door (``@example`` cannot replay ``st.data()``): one flipped bit makes positions
    'mearned', and ``from_pretrained`` raised the layer table's KeyError."""
    from transformers_scratch import from_pretrained

    folder = fresh(made, tmp_path_factory) / "export"
    folder.mkdir()
    config = (made / "export" / "config.json").read_bytes()
    assert b'"positions": "learned"' in config
    (folder / "config.json").write_bytes(config.replace(b'"learned"', b'"mearned"'))
    (folder / "model.safetensors").write_bytes((made / "export" / "model.safetensors").read_bytes())
    refused = assert_api(lambda: from_pretrained(folder), folder, (str(folder),))
    assert isinstance(refused, ValueError) and "mearned" in str(refused)


# ---- tokenizer.json -----------------------------------------------------------------------------------------
@fuzz()
@given(data=st.data())
def test_a_tokenizer(made, tmp_path_factory, data):
    if not (made / "tok").exists():
        pytest.skip("tokenizers is not installed (the hf extra)")
    folder = fresh(made, tmp_path_factory)
    (folder / "fuzztok").mkdir()
    body = (made / "tok" / "tokenizer.json").read_bytes()
    if data.draw(st.booleans()):
        tokenizer = json.loads(body)
        key = data.draw(st.sampled_from(sorted(tokenizer)))
        tokenizer[key] = data.draw(json_values)
        body = json.dumps(tokenizer).encode()
    else:
        body = data.draw(mutated(body))
    (folder / "fuzztok" / "tokenizer.json").write_bytes(body)
    assert_cli(["fit", "--config", TINY_LM, "--data.path", str(made / "text.txt"), "--data.tokenizer", "fuzztok", *TINY,
             *SHORT], folder, ("fuzztok", "--data.tokenizer"))  # fmt: skip


# ---- metrics.csv --------------------------------------------------------------------------------------------
@fuzz()
@given(data=st.data())
def test_a_metrics_file(made, tmp_path_factory, data):
    folder = fresh(made, tmp_path_factory)
    real = (made / "metrics.csv").read_bytes()
    rows = st.lists(st.lists(st.text(max_size=8) | st.floats().map(str), min_size=1, max_size=5), max_size=6)
    generated = rows.map(lambda r: "\n".join(",".join(cells) for cells in r).encode())
    (folder / "metrics.csv").write_bytes(data.draw(st.one_of(mutated(real), generated)))
    assert_cli(["plot", "metrics.csv", "--out", "out.png"], folder, ("metrics.csv",))


# ---- command-line values --------------------------------------------------------------------------------------
VALUES = st.one_of(
    st.sampled_from(["", "-1", "0", "1e309", "nan", "-inf", "2**70", "9" * 40, "x" * 5000, "/dev/zero", ".", "..",
                     "\x00", "é", "--", "null", "[1, 2]", "{a: 1}", "&a [*a]"]),
    st.integers(-(2**64), 2**64).map(str),
    st.floats().map(str),
    st.text(max_size=30),
)  # fmt: skip
FLAGS = {
    "sample": ["--prompt", "--length", "--num_samples", "--temperature", "--top_k", "--top_p", "--seed", "--cache"],
    "attention": ["--text", "--out", "--max_tokens", "--dpi"],
    "export": ["--out", "--format"],
    "fit": ["--name", "--data.context", "--data.batch_size", "--data.batches_per_epoch", "--model.model.heads",
            "--model.model.emb", "--model.model.depth", "--model.model.dropout", "--model.optim.lr",
            "--model.optim.warmup_steps", "--model.optim.beta2", "--trainer.max_steps", "--model.model.positions",
            "--checkpoint.every_n_train_steps", "--seed_everything", "--trainer.accumulate_grad_batches",
            "--sample.length", "--sample.temperature", "--trainer.val_check_interval", "--trainer.log_every_n_steps",
            "--trainer.accelerator", "--trainer.max_time"],
    "plot": ["--out", "--dpi"],
    "decode": ["--input", "--batch_size"],
    "predict": ["--data.predict_path", "--data.eval_stride", "--trainer.limit_predict_batches", "--data.context"],
    "test": ["--data.eval_stride", "--trainer.limit_test_batches", "--data.batch_size", "--ckpt_path"],
    "context": ["--data_path", "--batch_size", "--limit_batches", "--bins", "--split", "--csv", "--eval_mem_len"],
}  # fmt: skip


@pytest.mark.slow
@fuzz()
@given(flag=st.sampled_from(sorted((name, flag) for name, flags in FLAGS.items() for flag in flags)), value=VALUES)
@example(flag=("fit", "--model.optim.lr"), value="9" * 40)  # found: a traceback, the float32 update overflowing
@example(flag=("fit", "--data.batch_size"), value="9" * 40)  # found: islice's own error, naming no flag
@example(flag=("predict", "--data.predict_path"), value="")  # found: named data.path, not data.predict_path
@example(flag=("predict", "--data.predict_path"), value="/dev/zero")  # found: read without end, killed for memory
@example(flag=("fit", "--seed_everything"), value="-1")  # found: numpy's "-1 is not in bounds", naming no flag
@example(flag=("attention", "--out"), value="0.0")  # found: matplotlib's "Format '0' is not supported"
@example(flag=("fit", "--model.model.depth"), value="100000000")  # a model no memory holds: refused before it is built
@example(flag=("fit", "--model.model.depth"), value="20000")  # found: minutes to build; at most 1,000 blocks now
@example(flag=("fit", "--sample.length"), value="100000000")  # found: an hour's sample at each validation
@example(flag=("fit", "--trainer.accumulate_grad_batches"), value="9" * 40)  # found: Lightning's OverflowError
@example(flag=("attention", "--dpi"), value="9" * 40)  # found: matplotlib's renderer refusing the picture's size
@example(flag=("attention", "--dpi"), value="1")  # found: FreeType's RuntimeError on a label under a pixel high
@example(flag=("fit", "--trainer.max_steps"), value="9" * 40)  # a run without end: its max_time stops it
@example(flag=("fit", "--model.model.emb"), value="9" * 40)  # found: minutes seeking a divisor of 40 digits
@example(flag=("fit", "--data.batch_size"), value="null")  # found: "'<=' not supported ... 'NoneType'", no flag
@example(flag=("sample", "--length"), value="9" * 40)  # past the bound on a call's characters: refused at once
@example(flag=("fit", "--trainer.val_check_interval"), value="{a: 1}")  # found: a time no timedelta takes, no flag
def test_a_command_line_value(made, tmp_path_factory, flag, value):
    folder = fresh(made, tmp_path_factory)
    name, flag = flag
    if "\x00" in value:  # no command line can carry a NUL byte
        value = value.replace("\x00", "")
    try:  # a long sample asked for takes its time (about 1 ms a character here): the time bound is for hangs
        assume(not (flag == "--length" and 20_000 < float(value) <= MAX_SAMPLE))
        # and a wide model or a large batch its memory (4 GB to train one block 3,470 wide, 5.2 GB for a batch of
        # 78,021 windows here), up to what is refused at once: the memory bound is for runaways
        low, high = {"--model.model.emb": (2_000, (memory_bytes() / 48) ** 0.5),  # weights past the machine's
                     "--data.batch_size": (20_000, MAX_COUNT)}.get(flag, (0, -1))  # fmt: skip
        assume(not low < float(value) <= high)
    except ValueError:
        pass
    scoring = ["--config", TINY_LM, "--data.path", str(made / "text.txt"), *TINY, "--trainer.logger", "false",
               "--ckpt_path", str(made / "checkpoints/made/last.ckpt"), "--trainer.limit_test_batches", "1",
               "--trainer.limit_predict_batches", "1"]  # fmt: skip
    base = {
        "sample": ["--ckpt_path", str(made / "checkpoints/made/last.ckpt"), "--prompt", "the", "--length", "5"],
        "attention": ["--ckpt_path", str(made / "checkpoints/made/last.ckpt"), "--text", "the cat", "--out", "a.png"],
        "export": ["--ckpt_path", str(made / "checkpoints/made/last.ckpt"), "--out", "out"],
        "fit": [
            "--config",
            TINY_LM,
            "--data.path",
            str(made / "text.txt"),
            *TINY,
            *SHORT,
            "--trainer.max_time",
            "00:00:00:20",
        ],  # a huge max_steps asks for a run without end, as the speedrun's 1,000,000 does
        "plot": [str(made / "metrics.csv"), "--out", "out.png"],
        "decode": ["--ckpt_path", str(made / "checkpoints/s2s/last.ckpt"), "--input", "123"],
        "predict": [*scoring, "--data.predict_path", str(made / "text.txt")],
        "test": scoring,
        "context": ["--ckpt_path", str(made / "checkpoints/made/last.ckpt"), "--data_path", str(made / "text.txt")],
    }[name]
    named = (flag, flag.lstrip("-"), flag.rsplit(".", 1)[-1], *([value[:20]] if len(value) >= 8 else []))
    assert_cli([name, *base, flag, value], folder, named)  # the flag, or a long value itself (shortened)


def test_the_pickle_that_runs_code_is_refused_and_runs_nothing(made, tmp_path_factory):
    """The seed of the checkpoint door's hostile half: loaded unsafely it would write MARKER."""
    folder = fresh(made, tmp_path_factory)
    (folder / "fuzz.ckpt").write_bytes((made / "runs_code.ckpt").read_bytes())
    code, line = assert_cli(
        ["sample", "--ckpt_path", "fuzz.ckpt", "--prompt", "the", "--length", "5"], folder, ("fuzz.ckpt",)
    )
    assert code != 0 and not (folder / MARKER).exists()
    with inside(folder):  # the guard is real: an unsafe load runs it
        torch.load("fuzz.ckpt", weights_only=False)
    assert (folder / MARKER).exists()


def test_a_tokenizer_that_makes_tokenizers_panic_gets_one_line(made, tmp_path_factory):
    """Found by the tokenizer door: tokenizers' Rust code panics (a BaseException) on some broken files."""
    if not (made / "tok").exists():
        pytest.skip("tokenizers is not installed (the hf extra)")
    folder = fresh(made, tmp_path_factory)
    tokenizer = json.loads((made / "tok" / "tokenizer.json").read_bytes())
    tokenizer["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": ""}
    (folder / "fuzztok").mkdir()
    (folder / "fuzztok" / "tokenizer.json").write_text(json.dumps(tokenizer))
    code, line = assert_cli(["fit", "--config", TINY_LM, "--data.path", str(made / "text.txt"), "--data.tokenizer",
                          "fuzztok", *TINY, *SHORT], folder, ("fuzztok",))  # fmt: skip
    assert code != 0 and "is not a tokenizer.json" in line


@pytest.mark.parametrize("top, refused", [(5000, False), (2**31, True)])
def test_a_tokenizer_whose_ids_leave_gaps(made, tmp_path_factory, top, refused):
    """A tokenizer.json whose ids leave gaps (one token's id raised) gets an embedding row for every id it gives,
    up to a bound; past it, one line. Found by the tokenizer door: the id reached the embedding's IndexError."""
    if not (made / "tok").exists():
        pytest.skip("tokenizers is not installed (the hf extra)")
    folder = fresh(made, tmp_path_factory)
    tokenizer = json.loads((made / "tok" / "tokenizer.json").read_bytes())
    from tokenizers import Tokenizer

    common = Counter(Tokenizer.from_file(str(made / "tok" / "tokenizer.json")).encode(TEXT.decode()).tokens)
    tokenizer["model"]["vocab"][common.most_common(1)[0][0]] = top  # a token that every batch holds
    (folder / "fuzztok").mkdir()
    (folder / "fuzztok" / "tokenizer.json").write_text(json.dumps(tokenizer))
    code, line = assert_cli(["fit", "--config", TINY_LM, "--data.path", str(made / "text.txt"), "--data.tokenizer",
                             "fuzztok", *TINY, *SHORT], folder, ("fuzztok",))  # fmt: skip
    assert (code != 0) == refused
    assert not refused or f"the id {top:,}, past 16,777,216" in line


def test_an_id_past_the_tokenizers_vocabulary_is_refused_before_the_embedding(made):
    from transformers_scratch.data import DataError
    from transformers_scratch.data.vocab import TokenizerVocab

    if not (made / "tok").exists():
        pytest.skip("tokenizers is not installed (the hf extra)")
    vocab = TokenizerVocab.from_file(str(made / "tok"))
    assert vocab.encode(b"the cat").max() < vocab.size
    vocab.size = 3  # as a tokenizer whose model gives ids its vocabulary does not list
    with pytest.raises(DataError, match=r"gave the id [\d,]+, past its vocabulary of 3"):
        vocab.encode(b"the cat")

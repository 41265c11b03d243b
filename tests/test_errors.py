"""The one error path (cli/errors.py) against the installed jsonargparse: each message it reads is produced here by
the real library, so a release that rewords one fails this file instead of a user's run."""

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
import torch
from jsonargparse import ActionConfigFile, ArgumentError, ArgumentParser, set_parsing_settings

from transformers_scratch.bounds import Count, Rate, register
from transformers_scratch.cli.errors import ALLOWED_IMPORTS, error_line

register()


@pytest.fixture(autouse=True)
def this_module_may_be_named():
    """The CLI's allow-list (set when cli/lightning.py is imported), with this file's classes added; put back."""
    set_parsing_settings(import_path_denylist=["*"], import_path_allowlist=[*ALLOWED_IMPORTS, "test_errors"])
    yield
    set_parsing_settings(import_path_denylist=["*"], import_path_allowlist=ALLOWED_IMPORTS)


@dataclass
class Sizes:
    emb: Count = 8
    kv_heads: Count | None = None
    dropout: Rate = 0.0
    kind: Literal["a", "b"] = "a"


class Model:
    def __init__(self, sizes: Sizes | None = None, note: str = "") -> None:
        self.sizes = sizes


class Watcher(Model):
    def __init__(self, monitor: str, sizes: Sizes | None = None) -> None:
        super().__init__(sizes)


class Writer(Model):
    def __init__(self, folder: str | Path = ".") -> None:  # as a logger's save_dir
        super().__init__()


def parser() -> ArgumentParser:
    made = ArgumentParser(exit_on_error=False)
    made.add_argument("--config", action=ActionConfigFile)
    made.add_argument("--model", type=Model | None)  # a class by class_path: jsonargparse's nested union report
    made.add_argument("--trainer.models", type=Model | list[Model] | None)  # each type of a union reports the key
    made.add_argument("--trainer.max_steps", type=int, default=1)
    made.add_argument("--length", type=Count, default=1)
    made.add_argument("--precision", type=Literal[16, 32] | Literal["16", "bf16-mixed"] | None, default=None)
    made.add_argument("--seed", type=bool | Count, default=True)  # a union with an interval type
    made.add_argument("--mems", type=Count | list[Count] | None, default=None)  # a union with a list
    made.add_argument("--cache", type=bool, default=True)
    return made


def refusal(*argv: str) -> str:
    with pytest.raises(ArgumentError) as caught:
        parser().parse_args(list(argv))
    line = error_line(caught.value, list(argv))
    assert "\n" not in line
    return line


MODEL = ["--model", "test_errors.Model"]


def test_an_interval_type_names_the_flag_the_value_and_the_bound():
    assert refusal("--length", "0") == "length: 0 is not an integer in [1, 16,777,216]"


def test_a_nested_union_report_is_cut_to_its_key_and_reason():
    line = refusal(*MODEL, "--model.sizes.dropout", "1.5")
    assert line == "model.sizes.dropout: 1.5 is not a number in [0.0, 1.0)", line


def test_a_key_reported_once_for_each_type_of_a_union_is_named_once():
    """``trainer.logger`` is a logger or a list of them: jsonargparse reports the inner key under each."""
    line = refusal("--trainer.models", "test_errors.Model", "--trainer.models.note", "[1]")
    assert line.startswith("trainer.models.note: [1] is not text"), line


def test_a_value_of_no_type_that_a_setting_takes_is_named_with_those_types_in_words():
    """jsonargparse writes the types as Python shows them (``Expected a <class 'int'>``): in words, every type
    of the one union refused, and not the types of a union around it (the model group may be null)."""
    assert refusal("--trainer.max_steps", "abc") == "trainer.max_steps: abc is not an integer"
    assert refusal("--precision", "13") == "precision: 13 is not one of: 16, 32, bf16-mixed, null"  # 16 and "16": once
    assert refusal(*MODEL, "--model.sizes.kind", "c") == "model.sizes.kind: c is not one of: a, b"
    assert refusal("--seed", "0") == "seed: 0 is not one of: true, false, an integer in [1, 16,777,216]"


@pytest.mark.parametrize("value", ["a", "of", "type", "in", "0", "1,"])
def test_a_value_that_jsonargparse_cuts_out_of_its_own_words_is_named_with_every_type(value):
    """jsonargparse removes the value, between spaces, from a union's errors (``a``: "Expected <class 'bool'>";
    ``of``: "Not type"; ``0``: "a time of at least (DD:..."), which then named no type or lost one."""
    assert refusal("--seed", value) == f"seed: {value} is not one of: true, false, an integer in [1, 16,777,216]"
    assert refusal("--precision", value) == f"precision: {value} is not one of: 16, 32, bf16-mixed, null"
    line = refusal(*MODEL, "--model.sizes.kv_heads", value)
    assert line.startswith("model.sizes.kv_heads: ") and value in line and "an integer in [1, 16,777,216]" in line, line


@pytest.mark.parametrize("value", ["of", "type"])
def test_a_value_cut_out_of_a_unions_words_beside_a_list_is_named_with_its_type(value):
    """A union with a list names no plain list of its types: the error's own line is read, less the word cut out."""
    assert refusal("--mems", value) == f"mems: '{value}' is not an integer in [1, 16,777,216]"


def test_an_empty_value_is_named_as_empty():
    """jsonargparse's "Got value:" with nothing after it was its line, not the project's."""
    assert refusal("--cache", "") == "cache: '' is not true, false"
    assert refusal(*MODEL, "--model.sizes.kind", "") == "model.sizes.kind: '' is not one of: a, b"
    assert refusal(*MODEL, "--model.sizes", "").startswith("model.sizes: '' is no class it takes")  # not Model's name


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--model", "{class_path: test_errors.Writer, init_args: {folder: 3}}"),
        ("--trainer.models", "[{class_path: test_errors.Writer, init_args: {folder: 3}}]"),
    ],
)
def test_a_value_inside_a_class_is_named_as_itself_not_as_the_class_around_it(flag, value):
    """A report of nested unions gives each "Given value" below its reasons; the outer one is the whole class."""
    assert refusal(flag, value) == f"{flag[2:]}.folder: 3 is not one of: text, Path"


def test_the_value_an_optional_interval_hides_is_put_back():
    line = refusal(*MODEL, "--model.sizes.kv_heads", "0")
    assert line.endswith("kv_heads: 0 is not an integer in [1, 16,777,216]"), line


def test_a_class_by_a_name_that_none_has_is_named_with_where_to_look(tmp_path):
    """jsonargparse's "Expected a path but NAME either not accessible or invalid" (a flag) and "Expected a dot
    import path string: NAME" (a config) say nothing of classes: a misspelt callback's name read as a file's."""
    fix = "is no class it takes, nor a file of its settings; name a class by its name or import path (--"
    assert refusal("--model", "Modle") == f"model: 'Modle' {fix}model.help CLASS shows one's settings)"
    (tmp_path / "c.yaml").write_text("trainer:\n  models:\n    - class_path: Modle\n")
    assert refusal("--config", str(tmp_path / "c.yaml")).endswith(f"'Modle' {fix}trainer.models.help CLASS shows "
                                                                 "one's settings)")  # fmt: skip


@pytest.mark.parametrize("path", ["test_errors.Nope", "test_errors.nomod.X", "test_errors.Sizes"])
def test_a_class_by_an_import_path_that_names_none_or_another_kind_is_named_with_where_to_look(tmp_path, path):
    """jsonargparse's "module 'test_errors' has no attribute 'Nope'" and "Import path does not correspond to a
    subclass of Model" named no fix, where a bare name that none has did."""
    fix = "is no class it takes, nor a file of its settings; name a class by its name or import path (--model.help"
    assert refusal("--model", path).startswith(f"model: '{path}' {fix}")
    config = tmp_path / "c.yaml"
    config.write_text(f"model:\n  class_path: {path}\n")
    assert refusal("--config", str(config)).startswith(f"--config '{config}': model: '{path}' {fix}")


@pytest.mark.parametrize("value, says", [
    ("3", "--sizes '3' is no file, nor a mapping of its settings; pass a YAML file or a mapping of them (--sizes "
     "'{NAME: VALUE}'), or one at a time (--sizes.NAME VALUE)"),
    (".", "--sizes '.' is a folder, not a file of its settings; pass a YAML file or a mapping"),
    ("{emb: 0}", "--sizes '{emb: 0}': sizes.emb: 0 is not an integer in [1, 16,777,216]"),
    ("{{", "--sizes '{{' is not valid YAML (while parsing a flow node"),
])  # fmt: skip
def test_a_groups_one_value_that_jsonargparse_cannot_load_is_named_with_the_flag(value, says):
    """jsonargparse's "Unable to load config '3'" for a group's flag (``--trainer 3``) named no fix, and put the
    reason of a value it did load (a setting refused) on a line below."""
    made = parser()
    made.add_class_arguments(Sizes, "sizes")
    with pytest.raises(ArgumentError) as caught:
        made.parse_args(["--sizes", value])
    assert error_line(caught.value, ["--sizes", value]).startswith(says)


def test_a_configs_key_that_no_group_has_is_told_the_nearest_setting(tmp_path):
    """A group's key that no setting is: the whole key is read from "Group 'trainer' does not accept option"."""
    made = ArgumentParser(exit_on_error=False)
    made.add_argument("--config", action=ActionConfigFile)
    made.add_class_arguments(Model, "trainer")  # a group, as the Trainer's settings are
    (tmp_path / "c.yaml").write_text("trainer:\n  notes: x\n")
    argv = ["--config", str(tmp_path / "c.yaml")]
    with pytest.raises(ArgumentError) as caught:
        made.parse_args(argv)
    line = error_line(caught.value, ["fit", *argv])
    assert line.startswith(f"--config {str(tmp_path / 'c.yaml')!r}: ") and "'notes'; " in line, line
    assert line.endswith("fit --help lists its options"), line


def test_a_flag_with_no_value_is_named():
    assert refusal("--length") == "--length needs a value, and nothing follows it; pass one, e.g. --length VALUE " \
        "(or --length=VALUE)"  # fmt: skip


def test_an_unknown_flag_is_named_as_the_command_lines_not_a_configs(tmp_path):
    (tmp_path / "c.yaml").write_text("trainer:\n  max_steps: 3\n")  # sets the group the misspelt flag names
    argv = ["--config", str(tmp_path / "c.yaml"), "--trainer.max_stepz", "3"]
    with pytest.raises(ArgumentError) as caught:
        parser().parse_args(argv)
    line = error_line(caught.value, ["fit", *argv])  # as main() gives it: the command first
    assert line == "unrecognized arguments: --trainer.max_stepz 3; did you mean --trainer.max_steps? fit --help " \
        "lists its options", line  # fmt: skip
    caught.value.options = ["ckpt_path", "temperature"]  # a command's own (cli.run_function): no --trainer.* there
    assert error_line(caught.value, ["sample", *argv]).endswith(" 3; sample --help lists its options")


def test_a_config_that_is_no_mapping_is_named(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    line = refusal("--config", str(tmp_path / "list.yaml"))
    assert line.startswith(f"--config {str(tmp_path / 'list.yaml')!r} holds no mapping of settings"), line


def test_a_config_that_is_no_file_is_named_with_the_fix(tmp_path):
    for given, why in (("nothing.yaml", "File does not exist"), (".", "Path is not a file")):
        line = refusal("--config", str(tmp_path / given))
        assert line == f"--config: {why}: {str((tmp_path / given).resolve())!r}; pass a config such as " \
            "configs/first_run.yaml", line  # fmt: skip


@pytest.mark.parametrize("content", ["trainer:\n  max_stepz: 3\n", "model:\n  class_path: test_errors.Model\n  "
                                     "init_args:\n    sizes:\n      emb: -4\n",
                                     "init_args:\n  max_stepz:\n    class_path: x\n"])  # fmt: skip
def test_of_several_configs_the_one_at_fault_is_named(tmp_path, content):
    (tmp_path / "a.yaml").write_text("trainer:\n  max_steps: 2\nlength: 3\n")
    (tmp_path / "bad.yaml").write_text(content)
    line = refusal("--config", str(tmp_path / "a.yaml"), "--config", str(tmp_path / "bad.yaml"))
    assert line.startswith(f"--config {str(tmp_path / 'bad.yaml')!r}: "), line
    assert "max_stepz" in line or "emb: -4 is not an integer" in line, line


def test_a_piped_config_at_fault_is_named(tmp_path):
    """A pipe (``--config <(...)``) is read once, by jsonargparse; a regular file that sets another key of the
    same group was named instead, as the file that set the longest key the report names."""
    (tmp_path / "a.yaml").write_text("trainer:\n  models: null\n")
    read, write = os.pipe()
    os.write(write, b"trainer:\n  max_steps: x\n")
    os.close(write)
    try:
        line = refusal("--config", str(tmp_path / "a.yaml"), "--config", f"/dev/fd/{read}")
    finally:
        os.close(read)
    assert line.startswith(f"--config '/dev/fd/{read}': trainer.max_steps: "), line


def test_a_value_set_by_a_flag_names_no_config(tmp_path):
    (tmp_path / "a.yaml").write_text("length: 3\n")
    assert refusal("--config", str(tmp_path / "a.yaml"), "--length", "0").startswith("length: 0 is not")


def test_a_flag_that_gives_the_group_or_appends_to_the_list_names_no_config(tmp_path):
    """``--model.sizes '{emb: 0}'`` sets the group that holds the key at fault; ``--models+=CLASS`` appends to the
    list the report names: the command line is at fault, not a config that sets other keys of its section."""
    (tmp_path / "a.yaml").write_text("model:\n  class_path: test_errors.Model\n  init_args: {note: x}\ntrainer:\n  "
                                     "max_steps: 3\n")  # fmt: skip
    config = ["--config", str(tmp_path / "a.yaml")]
    assert refusal(*config, "--model.sizes", "{emb: 0}").startswith("model.sizes.emb: 0 is not an integer")
    line = refusal(*config, "--trainer.models+=test_errors.Watcher")
    assert line == "trainer.models: the following arguments are required: monitor", line


def test_a_class_given_by_its_class_path_flag_names_no_config_that_sets_its_group(tmp_path):
    (tmp_path / "a.yaml").write_text("model:\n  class_path: test_errors.Model\n  init_args: {note: x}\n")
    line = refusal("--config", str(tmp_path / "a.yaml"), "--model.class_path", "{")
    assert line.startswith("model: '{' is no class it takes"), line


def test_an_unknown_option_given_by_a_flag_names_no_config_that_sets_its_group(tmp_path):
    (tmp_path / "a.yaml").write_text("model:\n  class_path: test_errors.Model\n  init_args: {sizes: {emb: 4}}\n")
    assert refusal("--config", str(tmp_path / "a.yaml"), "--model.sizes.embb", "3") == (
        "model.sizes: Option 'embb' is not accepted; did you mean --model.sizes.emb? --model.sizes.help Sizes lists "
        "the settings it takes"
    )  # the class as jsonargparse's report names it, and its setting nearest the one given


def test_a_value_given_below_a_key_that_takes_one_is_the_flags_not_the_configs(tmp_path):
    """``--model.sizes.emb.x 3``: jsonargparse reports the value as its own repr (``NestedArg(...)``), for the key
    a config sets too, which was blamed."""
    (tmp_path / "a.yaml").write_text("model:\n  class_path: test_errors.Model\n  init_args: {sizes: {emb: 4}}\n")
    line = refusal("--config", str(tmp_path / "a.yaml"), "--model.sizes.emb.x", "3")
    assert line == "model.sizes.emb: {x: 3} is not an integer in [1, 16,777,216]", line


def test_a_class_outside_the_allowed_packages_is_named():
    line = refusal("--model", "os.system")
    assert "'os.system' is refused: a config may name classes and functions from" in line, line


def test_a_refusal_of_lightnings_trainer_is_named_as_the_trainers():
    from lightning import Trainer

    from transformers_scratch.cli.errors import named_as

    with pytest.raises(Exception) as caught:
        Trainer(accelerator="c")
    assert named_as("trainer", caught.value).startswith("trainer.accelerator: You selected an invalid accelerator")
    with pytest.raises(Exception) as caught:
        Trainer(devices="0", accelerator="cpu")
    assert named_as("trainer", caught.value).startswith("trainer.devices: `Trainer(devices='0')` value is not a valid")
    with pytest.raises(Exception) as caught:
        Trainer(limit_train_batches=1.5)  # named in its words, not in backquotes
    assert named_as("trainer", caught.value).startswith("trainer.limit_train_batches: You have passed invalid value")
    if importlib.util.find_spec("deepspeed") is None:
        with pytest.raises(Exception) as caught:
            Trainer(strategy="deepspeed")  # named by its value, which the words quote
        assert named_as("trainer", caught.value, {"strategy": "deepspeed"}).startswith("trainer.strategy: To use the")
    assert named_as("trainer", ValueError("trainer.callbacks lists one")) == "trainer.callbacks lists one"


@pytest.mark.parametrize("value", [10**400, float("inf"), float("nan"), True, "x", [1], None, -1])
def test_an_interval_refuses_what_lies_outside_it_with_a_value_error(value):
    """Whatever a config, a checkpoint or a flag holds: a ValueError that jsonargparse and the settings report
    (an integer of hundreds of digits is no OverflowError; infinity and NaN lie in no interval, and are said to be
    no finite number: "inf is not a non-negative number" reads as false)."""
    from transformers_scratch.bounds import NonNegativeFloat

    said = "is not finite: pass a non-negative number" if value != value or value == float("inf") else "is not a non"
    with pytest.raises(ValueError, match=said):
        NonNegativeFloat.check(value)


def test_out_of_memory_is_read_from_torchs_own_error():
    """torch's CPU allocator raises a plain RuntimeError: its words are read here, so a release that rewords them
    fails this test. 2**50 bytes lie past any machine's address space, so the allocation fails wherever it runs."""
    from transformers_scratch.cli.errors import refused

    with pytest.raises(RuntimeError) as caught:
        torch.empty(2**50, dtype=torch.uint8)
    assert refused(caught.value)
    line = error_line(caught.value, ["fit"])
    assert line.startswith("out of memory: this machine (") and "could not allocate 1,125,899.9 GB at once" in line
    assert "data.batch_size" in line
    assert "--batch_size" in error_line(MemoryError(), ["sample"])
    assert not refused(RuntimeError("a fault of the project's own")) and not refused(KeyError("x"))


def test_a_system_error_on_a_path_names_the_flag_that_gave_it(tmp_path):
    """The system's own OSError ('[Errno 2] No such file or directory: ...') names no flag and no fix."""
    missing = str(tmp_path / "no" / "folder")
    with pytest.raises(OSError) as caught:
        open(missing + "/x")
    line = error_line(caught.value, ["fit", "--checkpoint.dirpath", missing])
    assert (
        line == f"--checkpoint.dirpath '{missing}/x': No such file or directory; pass a path that exists and this "
        "user may read and write, or create it"
    )
    assert error_line(caught.value, ["fit", f"--data.data_dir={missing}"]).startswith(f"--data.data_dir '{missing}/x'")
    assert error_line(FileNotFoundError("the project's own line"), ["fit"]) == "the project's own line"
    folder = IsADirectoryError(21, "Is a directory", "data")  # the flag that gave it, before one whose path holds it
    assert error_line(folder, ["context", "--data_path", "data/text.txt", "--csv", "data"]).startswith("--csv 'data'")
    full = OSError(28, "No space left on device", "/tmp/tmpab12", None, "ck/.last.ckpt.1f.tmp")  # a move's
    assert error_line(full, ["fit", "--checkpoint.dirpath", "ck"]) == "--checkpoint.dirpath 'ck/.last.ckpt.1f.tmp': " \
        "No space left on device; free space on that disk, or pass a path on another one"  # fmt: skip
    read_only = OSError(30, "Read-only file system", "/mnt/ck")
    line = error_line(read_only, ["fit", "--checkpoint.dirpath", "/mnt/ck"])
    assert line.endswith("; that disk is mounted read-only; pass a path on a writable one"), line
    assert error_line(OSError(28, "No space left on device"), ["fit"]) == "No space left on device; free space " \
        "on that disk, or pass a path on another one"  # a write's own error names no file: the fix, still  # fmt: skip


def test_a_file_where_a_folder_is_to_be_made_is_named_with_its_flag_given_relative(tmp_path, monkeypatch):
    """Lightning makes a checkpoint folder absolute: the flag gave it relative. A file in the way of a folder is
    said so, not 'pass a path that exists'."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("a file")
    for path, fix in (("notes.txt", "a file of that name stands where a folder is to be made"),
                      ("notes.txt/run", "a part of the path is a file, not a folder")):  # fmt: skip
        with pytest.raises(OSError) as caught:
            os.makedirs(tmp_path / path)
        line = error_line(caught.value, ["fit", "--checkpoint.dirpath", path])
        assert line.startswith(f"--checkpoint.dirpath '{tmp_path / path}': ") and f"; {fix}; pass another path" in line
    line = error_line(caught.value, ["fit", "--data.path", "notes.txt", "--checkpoint.dirpath", "notes.txt"])
    assert line.startswith("--data.path and --checkpoint.dirpath '"), line  # not the first alone: either may be meant


def test_text_that_is_not_utf8_is_blamed_on_a_piped_config_only_where_one_was_given(tmp_path):
    """jsonargparse decodes a piped config itself (a regular file is read, and named, before it parses):
    its UnicodeDecodeError names that pipe, and no --config where none was piped."""
    read, write = os.pipe()
    os.write(write, "name: caf\xe9\n".encode("latin-1"))
    os.close(write)
    piped = ["fit", "--config", f"/dev/fd/{read}"]
    with pytest.raises(UnicodeDecodeError) as caught:
        with open(piped[2], encoding="utf-8") as f:
            f.read()
    os.close(read)
    assert error_line(caught.value, piped) == (
        f"--config '/dev/fd/{read}' is not UTF-8 text (byte 9); pass a config such as configs/first_run.yaml"
    )
    (tmp_path / "a.yaml").write_text("name: a\n")
    line = error_line(caught.value, ["fit", "--config", str(tmp_path / "a.yaml")])
    assert line == "a file this command read is not UTF-8 text (byte 9); pass it in UTF-8"


def test_a_module_that_is_not_installed_is_refused_with_the_fix():
    """A package that a setting needs and this machine lacks (a Lightning callback's, ``transformers`` for
    ``export --format hf``) was a traceback; Lightning's own message names the package to install, and is kept."""
    from transformers_scratch.cli.errors import refused

    missing = ModuleNotFoundError("No module named 'psutil'", name="psutil")
    assert refused(missing)
    assert error_line(missing, ["fit"]) == (
        "this command needs the module 'psutil', which is not installed; pip install its package"
    )
    assert not refused(ModuleNotFoundError("No module named ...", name="transformers_scratch.gone"))  # a fault
    lightnings = ModuleNotFoundError("`DeviceStatsMonitor` cannot log CPU stats as `psutil` is not installed.")
    assert error_line(lightnings, ["fit"]) == str(lightnings)


def test_a_name_that_a_config_given_as_text_sets_at_the_top_names_that_config():
    """A ``--config`` that is no file is read as YAML text (``--config 'a: 1'``, or a path of ``{`` and ``: ``)."""
    made = ArgumentParser(exit_on_error=False)
    fit = ArgumentParser(exit_on_error=False)
    fit.add_argument("--config", action=ActionConfigFile)
    fit.add_argument("--length", type=Count, default=1)
    made.add_subcommands().add_subcommand("fit", fit)
    for text in ("a: 1", "runs/{a: 1}"):
        argv = ["fit", "--config", text]
        with pytest.raises(ArgumentError) as caught:
            made.parse_args(argv)
        line = error_line(caught.value, argv)
        assert line.startswith(f"--config {text!r}: ") and f"'{text.split(':')[0]}'" in line, line


@pytest.mark.parametrize("value", ["3", "[1]", "true"])
def test_a_class_given_a_value_of_no_type_it_takes_is_named_with_where_to_look(tmp_path, value):
    """jsonargparse's report of ``model: 3`` holds only scaffolding (no type it takes, no reason): its first line
    was all that was left (``Parser key "model":``)."""
    (tmp_path / "a.yaml").write_text("model:\n  class_path: test_errors.Model\n")
    for config in (f"model: {value}", f"model: {{init_args: {{sizes: {value}}}}}"):  # the later config, as text
        line = refusal("--config", str(tmp_path / "a.yaml"), "--config", config)
        key = "model" if config.count(":") == 1 else "model.sizes"
        assert line.startswith(f"--config {config!r}: {key}: ") and f"is no class name, nor a mapping of a class's " \
            f"settings; name a class by its name or import path (--{key}.help CLASS" in line, line  # fmt: skip

"""The one error path: a refusal (the project's, jsonargparse's, Lightning's, or out of memory) becomes one
``error:`` line naming the flag or ``--config`` file at fault, the value and the fix. The only module that reads
another library's messages; tests/test_errors.py runs each reading against the installed versions."""

from __future__ import annotations

import builtins
import difflib
import errno
import importlib
import inspect
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import torch
import yaml
from jsonargparse import ArgumentError
from lightning import Trainer
from lightning.fabric.accelerators import Accelerator
from lightning.fabric.plugins.precision import Precision
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.strategies import Strategy
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from .. import data, training
from ..atomic import output_unwritable
from ..bounds import BOUNDED
from ..data import DataError
from ..data.files import flag_of, path_refused, printable, shortened
from ..model.config import memory_bytes
from ..training.callbacks import CALLBACK_GROUPS, TrainingDiverged
from .config_files import ConfigError, config_paths, load, no_mapping, not_yaml, read_config

REFUSALS = (ValueError, OSError, TrainingDiverged, DataError, ArgumentError, MisconfigurationException,
            ModuleNotFoundError)  # fmt: skip
"""What the user's input, files or machine refuse: one line each."""

ALLOWED_IMPORTS = ["transformers_scratch", "torch", "lightning"]  # what a config may name by import path
PROJECT = __name__.partition(".")[0]

# jsonargparse's nested report of a value that fits none of a union's types: its scaffolding, around the reasons
SCAFFOLDING = (
    "Parser key", "Does not validate", "Subtypes:", "Errors:", "Given value", "Expected a <class 'NoneType'>",
    "Not a valid subclass", "Subclass types expect", "a class path", "a dict", "Problem with given class_path",
)  # fmt: skip


# jsonargparse's report of a value that is not of a plain type, a choice or an interval type (of a union's or one),
# and those types in words
EXPECTED = re.compile(r"(?:Expected a (?:<class '(\w+)'>|typing\.Literal\[(.*)\])(?:\. Got value: ?(.*))?"
                      r"|Not (?:of type|type|of) (.+?): .*)$")  # fmt: skip  # "of" or "type" cut out as a value
# jsonargparse's reports of a class named by a name that no class has, by a path that imports none, or of another kind
CLASS_NAMED = re.compile(r"Expected a path but (.*) either not accessible or invalid|Expected a dot import path "
                         r"string: ?(.*)|module '[\w.]+' has no attribute '\w+'|Import path (?:([\w.]+) )?does not "
                         r"correspond to a subclass of \w+")  # fmt: skip
BASES = ("LightningModule", "LightningDataModule", "LitTransformer")  # what jsonargparse takes where none is named
GROUPS = {"LitTransformer": "model", "LightningDataModule": "data"}  # the project's classes' bases, and their keys
FLAG_GROUPS = {"trainer": Trainer, **CALLBACK_GROUPS}  # a class whose settings are flags: --trainer.max_steps
# fit's own flags, beside its groups (tests/test_cli.py reads them from its help)
TOP_FLAGS = ("config", "print_config", "seed_everything", "ckpt_path", "weights_only", "name", "verbose",
             "final_validation")  # fmt: skip
KINDS = {"int": "an integer", "float": "a number", "bool": "true, false", "str": "text", "NoneType": "null"}
YAML = {"True": "true", "False": "false", "None": "null", "": "''"}  # a choice of Literal[...] as a config writes it


def refused(e: BaseException) -> bool:
    """Whether ``e`` refuses the user's input, files or machine (one line), rather than showing a fault (a
    traceback): a module of the project's own that is missing is a fault."""
    own = isinstance(e, ModuleNotFoundError) and (e.name or "").partition(".")[0] == PROJECT
    elsewhere = at_fault(e) is not None or peer_stopped(e) or spawned(e) is not None  # a callback's, another process's
    return (isinstance(e, REFUSALS) and not own) or out_of_memory(e) or elsewhere


def spawned(e: BaseException) -> str | None:
    """A refusal in a process ddp_spawn started, whose traceback torch hands on as text: ``module.Class: message``."""
    if type(e).__name__ != "ProcessRaisedException":
        return None
    name, _, line = (str(e).strip().splitlines() or [""])[-1].partition(": ")
    if name == "RuntimeError" and any(words in line for words in PEER_GONE):  # torch names the first to end alone
        return "a process of this run stopped, and the others cannot go on without it; --trainer.devices 1 shows why"
    try:
        cls = class_at(name) if name.partition(".")[0] in ALLOWED_IMPORTS else getattr(builtins, name)
    except (ImportError, AttributeError, ValueError):
        return None
    return line if isinstance(cls, type) and issubclass(cls, (*REFUSALS, MemoryError, torch.OutOfMemoryError)) else None


# how a collective of torch's fails when another process of the run has ended (gloo's words, which
# tests/test_distributed.py meets, then NCCL's)
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing", "remote process exited")


def peer_stopped(e: BaseException) -> bool:
    """A collective that failed because another process of this run ended: that one says why, in its own line."""
    joined = torch.distributed.is_available() and torch.distributed.is_initialized()
    return joined and isinstance(e, RuntimeError) and any(words in str(e) for words in PEER_GONE)


def at_fault(e: BaseException) -> str | None:
    """``trainer.callbacks: CLASS`` (or ``trainer.logger: CLASS``) where ``e`` or its cause was raised in the
    ``__init__`` of a callback or logger not of the project's, or in the code of a callback a config added."""
    for cause in causes(e):
        tb = cause.__traceback__
        while tb is not None:
            obj = tb.tb_frame.f_locals.get("self")  # a frame's self may be anything: only theirs are asked
            built = tb.tb_frame.f_code.co_name == "__init__" and not type(obj).__module__.startswith(PROJECT)
            if isinstance(obj, Callback | Logger) and (built or getattr(obj, "from_config", False)):
                return f"trainer.{'logger' if isinstance(obj, Logger) else 'callbacks'}: {type(obj).__name__}"
            tb = tb.tb_next
    return None


def out_of_memory(e: BaseException) -> bool:
    """An allocation that failed (torch's CPU allocator raises a RuntimeError)."""
    return isinstance(e, MemoryError | torch.OutOfMemoryError) or (
        isinstance(e, RuntimeError) and "can't allocate memory" in str(e)
    )


def error_line(e: BaseException, argv: list[str]) -> str:
    """The one line that a refused input gets, unprintable characters escaped; ``argv``: after the command."""
    return printable(_line(e, argv))


def _line(e: BaseException, argv: list[str]) -> str:
    if line := spawned(e):
        return line
    if peer_stopped(e):
        return (f"rank {torch.distributed.get_rank()}: another process of this run stopped, and this one cannot go on "
                "without it; that one's own line says why")  # fmt: skip
    if not isinstance(e, REFUSALS) and (where := at_fault(e)):
        reason = (str(e).splitlines() or [""])[0][:200]
        return (f"{where} failed ({type(e).__name__}: {reason}); it does not fit this run: correct its settings, or "
                "leave it out")  # fmt: skip
    if isinstance(e, OSError) and e.errno == errno.ENAMETOOLONG:
        path, flag = shortened(str(e.filename or "")), flag_of(str(e.filename), argv) if e.filename else None
        where = f"{flag} {path!r}: the path" if flag else f"the path {path!r}"
        return (f"{where} is longer than this system allows (255 bytes a name, {os.pathconf('/', 'PC_PATH_MAX'):,} a "
                "path); pass a shorter path")  # fmt: skip
    if out_of_memory(e):
        return memory_line(e, argv)
    if isinstance(e, ModuleNotFoundError) and e.name:  # Python's own; Lightning's name the package to install
        return f"this command needs the module {e.name!r}, which is not installed; pip install its package"
    if unwritable := output_unwritable(e):
        return unwritable
    if isinstance(e, OSError) and (line := path_refused(e, argv)):
        return line
    # a piped config (regular files are read, and named, before parsing), or a flag's YAML, that the loader refused
    piped = " or ".join(repr(path) for path in config_paths(argv) if not os.path.isfile(path))
    if isinstance(e, UnicodeEncodeError):  # the output's encoding: a C locale's ascii, a Windows code page
        return (f"the output's encoding, {e.encoding}, cannot write {e.object[e.start : e.end][:8]!r}; use a UTF-8 "
                "locale (LANG=C.UTF-8), or set PYTHONIOENCODING=utf-8")  # fmt: skip
    if line := settings_file(e, argv):
        return line
    if isinstance(e, UnicodeDecodeError):
        if not piped:  # every file the project reads is named where it is read: this one was not
            return f"a file this command read is not UTF-8 text (byte {e.start:,}); pass it in UTF-8"
        return f"--config {piped} is not UTF-8 text (byte {e.start:,}); pass a config such as configs/first_run.yaml"
    if loaded := next((c for c in causes(e) if isinstance(c, ConfigError) and c.text), None):
        flag = flag_of(loaded.text, argv)
        where = f"{flag} {shortened(loaded.text)!r}" if flag else f"--config {piped}" if piped else "a value"
        return f"{where}: {loaded}"
    message = str(e)
    if type(e).__name__ != "ArgumentError":  # jsonargparse's parse errors; its checks at instantiation are ValueErrors
        where = at_fault(e) or trainer_setting(e) or wandb_variable(e)  # Lightning's and W&B's name no flag
        return f"{where}: {brief(message).strip()}" if where else brief(message)
    options = getattr(e, "options", [])  # a command's, where its parser gave them (cli.run_function)
    line = not_a_config(message, argv) or group_unread(e, message) or missing_value(message, argv)
    if line := line or usage_slip(message, argv, options):
        return line
    line = brief(message)
    if variable := variable_at_fault(line, argv):
        return f"{variable}: {line}"
    culprit = config_at_fault(line, argv)
    line = f"{culprit}: {line}" if culprit else line
    if unknown := not_accepted(line):  # a file's key that is no setting's
        line += f"; {guess(f'--{unknown}', options)}{argv[0]} --help lists its options"
    return line


def group_unread(e: BaseException, message: str) -> str | None:
    """A group of settings given one value (``--trainer VALUE``) that jsonargparse could not load as a file or a
    mapping of them: a setting the value holds, refused, named as the value's; or no file or mapping at all."""
    unread = re.match(r"Parser key \"(\w+)\":\nUnable to load config '(.*?)'\n  - (.*)", message, re.S)
    if unread is None:
        return None
    group, value, inner = unread.groups()
    where = f"--{group} {shortened(value)!r}"
    if broken := next((c for c in causes(e) if isinstance(c, yaml.YAMLError)), None):  # a mapping's text: no YAML
        return str(not_yaml(repr(shortened(value)), str(broken), f"--{group}"))
    if not inner.startswith(f'Parser key "{group}": Unable to load config'):  # read: a setting it holds, refused
        return f"{where}: {brief(inner)}"
    cls = f"{FLAG_GROUPS[group].__name__}'s" if group in FLAG_GROUPS else "its"
    what = "is a folder, not a file" if os.path.isdir(value) else "holds no mapping" if os.path.isfile(value) else \
        "is no file, nor a mapping"  # fmt: skip
    return (f"{where} {what} of {cls} settings; pass a YAML file or a mapping of them (--{group} '{{NAME: VALUE}}'), "
            f"or one at a time (--{group}.NAME VALUE)")  # fmt: skip


def settings_file(e: BaseException, argv: list[str]) -> str | None:
    """A flag's file that jsonargparse read as a class's settings (``--model FILE``) and could not: the file whose
    text the failed read holds, refused as a ``--config`` is, naming the flag."""
    read = [c.object if isinstance(c, UnicodeDecodeError) else c.text if isinstance(c, ConfigError) else
            getattr(getattr(c, "problem_mark", None), "buffer", None) for c in causes(e)]  # fmt: skip
    heads = [text.encode() if isinstance(text, str) else bytes(text) for text in read if text]
    for path in dict.fromkeys(arg.rpartition("=")[2] for arg in argv):
        if heads and (flag := flag_of(path, argv)) and path not in config_paths(argv) and os.path.isfile(path):
            with open(path, "rb") as f:
                head = f.read(256)
            try:
                if any(text.startswith(head) for text in heads):
                    read_config(path, flag)
            except ConfigError as refusal:
                return str(refusal)
    return None


@contextmanager
def damaged(ckpt_path: str | None):
    """A model whose scores overflow, named as its checkpoint (None: a fit's own weights, which diverged)."""
    try:
        yield
    except FloatingPointError as e:
        if ckpt_path is None:
            raise ValueError(f"{e}; the run diverged: lower the learning rate or keep gradient clipping on") from None
        raise ValueError(f"--ckpt_path {ckpt_path!r}: {e}; a diverged or damaged model: pass another file") from None


def trainer_setting(e: BaseException, given: dict | None = None) -> str | None:
    """The first of the Trainer's settings that a refusal raised in Lightning's code names in backquotes; as the
    Trainer is built from the settings ``given``, the first it names at all (its settings are all that it reads
    then), else the one whose value it quotes (``deepspeed`` in `To use the DeepSpeedStrategy, ...`)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or not tb.tb_frame.f_globals.get("__name__", "").startswith("lightning.") or str(e)[:7] == "trainer":
        return None
    names = inspect.signature(Trainer.__init__).parameters
    said = re.findall(r"`(\w+)", str(e)) + (re.findall(r"\w+", str(e)) if given is not None else [])
    squashed = re.sub(r"[-_]", "", str(e).lower())  # transformer-engine quoted as transformer_engine
    quoted = [k for k, v in (given or {}).items() if isinstance(v, str) and len(v) > 2 and
              re.sub(r"[-_]", "", v.lower()) in squashed]  # fmt: skip
    owner = tb.tb_frame.f_locals.get("self")  # the accelerator, strategy or precision that refused to be made
    made = [name for name, kind in PARTS.items() if isinstance(owner, kind) and name in (given or {})]
    return next((f"trainer.{name}" for name in said + quoted + made if name in names), None)


PARTS = {"accelerator": Accelerator, "strategy": Strategy, "precision": Precision}  # the Trainer's settings' objects


def wandb_variable(e: BaseException) -> str | None:
    """The ``WANDB_*`` variable whose value, quoted, W&B's refusal to start a run names (WANDB_PROJECT='a/b'), else
    the one it names, or whose name it starts with (WANDB_RUN_ID: `Run ID cannot be empty`)."""
    said = next((str(c) for c in causes(e) if type(c).__module__.startswith("wandb")), "")
    variables = [k for k in os.environ if k.startswith("WANDB_")]
    quoted = (k for k in variables if os.environ[k] and f"'{os.environ[k]}'" in said)
    named = (k for k in variables if k in said or said.lower().startswith(f"{k[6:].replace('_', ' ').lower()} "))
    return next(quoted, None) or next(named, None)


def variable_at_fault(line: str, argv: list[str]) -> str | None:
    """With ``JSONARGPARSE_DEFAULT_ENV=true``, the variable whose value a report refuses (PL_FIT__TRAINER...)."""
    if os.environ.get("JSONARGPARSE_DEFAULT_ENV", "").lower() != "true":
        return None
    parts = [f"PL_{argv[0]}", *line.split(": ", 1)[0].replace("init_args.", "").split(".")]
    names = ["__".join(parts[:n]).upper() for n in range(len(parts), 1, -1)]
    return next((name for name in names if os.environ.get(name) and os.environ[name] in line), None)


def causes(e: BaseException | None):
    """``e`` and the exceptions it was raised from (as a traceback shows them), innermost last."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ if e.__cause__ is not None or e.__suppress_context__ else e.__context__


def memory_line(e: BaseException, argv: list[str]) -> str:
    """Out of memory: how much was asked for, what the machine has, and what to lower."""
    cpu, gpu = re.search(r"allocate (\d+) bytes", str(e)), re.search(r"Tried to allocate ([\d.]+ \w+)", str(e))
    asked = f" {int(cpu[1]) / 1e9:,.1f} GB at once" if cpu else f" {gpu[1]} at once" if gpu else ""
    where = "the GPU" if isinstance(e, torch.OutOfMemoryError) else f"this machine ({memory_bytes() / 1e9:,.1f} GB)"
    run = ("lower data.batch_size (or data.eval_batch_size), data.context or the model's sizes; "
           "trainer.accumulate_grad_batches keeps a batch in smaller pieces")  # fmt: skip
    command = "ask for less at once (fewer or shorter samples, a smaller --batch_size)"
    fix = run if argv[:1] in (["fit"], ["validate"], ["test"], ["predict"]) else command
    return f"out of memory: {where} could not allocate{asked or ' what this command needed'}; {fix}"


def named_as(key: str, e: BaseException, given: dict | None = None) -> str:
    """A refusal of the settings under ``key``, named as the key's unless it names it already (the Trainer's, built
    from the settings ``given``, as the setting it names or quotes, where it does: ``trainer.devices``)."""
    return str(e) if str(e).startswith(key) else f"{key == 'trainer' and trainer_setting(e, given or {}) or key}: {e}"


def brief(message: str) -> str:
    """One line from jsonargparse's nested report: the innermost key and the first real reason."""
    lines = [line.strip().removeprefix("- ") for line in message.split("\n") if line.strip()]
    if len(lines) <= 1:
        return message
    a_class = any(line.startswith(("Problem with given class_path", "Multiple subclasses")) for line in lines)
    skip = SCAFFOLDING + (("Expected a <class 'list'>", "Expected a path but") if a_class else ())  # not meant
    at = next((i for i, line in enumerate(lines) if not line.startswith(skip)), None)
    keys = [line.split('"')[1] for line in lines[:at] if line.startswith('Parser key "')]  # the first reason's
    values = {i: re.sub(r"^NestedArg\(.*val=(.*)\)$", r"\1", line.removeprefix("Given value:").strip()).strip("'")
              for i, line in enumerate(lines) if line.startswith("Given value:")}  # fmt: skip
    below = [v for i, v in values.items() if at is not None and i > at]  # the first reason's value is given below it
    given = below[:1] or list(values.values())  # (the last of the report is a union's outer value: a whole class)
    if at is None:  # a class's place given a value of no type it takes (`model: 3`): the report holds no reason
        if not (keys and given and any(line.startswith("Not a valid subclass") for line in lines)):
            return lines[0]
        key = ".".join(keys)
        return (f"{key}: {shortened(given[0])} is no class name, nor a mapping of a class's settings; name a class "
                f"by its name or import path (--{key}.help CLASS shows one's settings)")  # fmt: skip
    reason = re.sub(r"NestedArg\(key='(.*?)', val='(.*?)'\)", r"{\1: \2}", lines[at].split("callable class: ")[-1])
    expected = [m] if (m := EXPECTED.match(lines[at])) else []  # this line's type (a union's: its Subtypes list)
    kinds = union_kinds(message, at) or [YAML.get(kind, kind.strip("'")) for m in expected
             for kind in ([KINDS.get(m[1], m[1])] if m[1] else m[2].split(", ") if m[2] else [m[4]])]  # fmt: skip
    kinds = choices_of(".".join(keys)) if kinds == [KINDS["bool"]] else kinds  # Literal[True, "link"] says bool
    kinds = sorted(dict.fromkeys(kinds), key=lambda kind: kind == "null")  # once each (16 and "16"), null last
    if expected and expected[0][4] and len(set(kinds) - {"null"}) < 2:  # one interval type, or null too
        reason = reason.split(": ", 1)[-1]  # in a union's report, without the value
        reason = f"{given[-1][:40]} {reason}" if reason.startswith("is not") and given else reason
        reason = f"{given[-1][:40]} is not {kinds[0]}" if kinds and kinds[0] not in reason and given else reason
    elif kinds:
        value = expected and YAML.get(expected[0][3], expected[0][3]) or (given[-1] if given else "the value")
        reason = f"{shortened(value)} is not " + (kinds[0] if len(kinds) == 1 else f"one of: {', '.join(kinds)}")
    paths = [m[1] for line in lines[:at] if (m := re.match(r"Problem with given class_path '([\w.]+)'", line))]
    cls = paths[-1].rsplit(".", 1)[-1] if paths else "CLASS"  # the class the report names, innermost
    if named := re.fullmatch(CLASS_NAMED, reason):  # a class by a name or import path that none has, or another's
        flag, name = ".".join(keys) or "SETTING", next((n for n in named.groups() if n is not None), None)
        name = (paths or given or [""])[-1] if name is None else name  # an empty name ('') is the one given
        base = re.search(rf"(?:Subtypes: \[<class '[\w.]*\.|subclass of )({'|'.join(GROUPS)})\b", message)
        own = base is not None and GROUPS[base[1]] == flag  # model or data itself, not a setting below it
        fix = f"pass one of {', '.join(project_classes(flag))}" if own else "name a class by its name or import path"
        reason = (f"{shortened(name)!r} is no class it takes, nor a file of its settings; {fix} (--{flag}.help CLASS "
                  "shows one's settings)")  # fmt: skip
    reason = denied(reason) or reason
    if keys and cls in BASES and re.match(r"Option '.*' is not accepted|unrecognized arguments", reason):
        reason += f"; no {keys[0]} class is named: pass a config that names one, e.g. --config configs/first_run.yaml"
    elif keys and (unknown := re.fullmatch(r"Option '(.*)' is not accepted", reason)):  # a setting the class lacks
        key, near = ".".join(keys), nearest(unknown[1], settings_of(paths[-1]) if paths else [])
        reason += f"; {near and f'did you mean --{key}.{near}? '}--{key}.help {cls} lists the settings it takes"
    return f"{'.'.join(keys)}: {reason}" if keys else reason


def denied(reason: str) -> str | None:
    """jsonargparse's refusal of an import path that its denylist holds, in the project's words; None: another."""
    if "import path denylist" not in reason:
        return None
    return (f"{reason.split(chr(39))[1]!r} is refused: a config may name classes and functions from "
            f"{', '.join(ALLOWED_IMPORTS)} only (nothing else is imported)")  # fmt: skip


def class_at(class_path: str) -> Any:
    """The class at an import path (one that jsonargparse has imported, and checked against the allowed packages)."""
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def settings_of(cls) -> list[str]:
    """The settings a class (or one at an import path, or a command's function) takes: its parameters' names."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    try:
        signature = inspect.signature(class_at(cls) if isinstance(cls, str) else cls)
    except (ImportError, AttributeError, TypeError, ValueError):  # no class there, or no signature to read
        return []
    return [name for name, p in signature.parameters.items() if p.kind in named]


def nearest(name: str, names: list[str]) -> str:
    """The one of ``names`` nearest a misspelt ``name``, where one is near (else "")."""
    return next(iter(difflib.get_close_matches(name, names, n=1, cutoff=0.75)), "")


def guess(flag: str, options: list[str]) -> str:
    """For a flag that no option is, "did you mean --NAME? " with the nearest of a command's ``options``, or for
    Lightning's commands (no ``options`` given), of a group's settings (--trainer.*, --checkpoint.*, --sample.*,
    --predictions.*) or of the groups; else ""."""
    whole = flag.removeprefix("--").partition("=")[0]
    group, dot, name = whole.partition(".")
    if options:  # --temprature; context's --data_path given as fit's --data.path
        return f"did you mean --{near}? " if (near := nearest(whole, options)) else ""
    if dot and group in FLAG_GROUPS:  # --trainer.max_stesp
        near = nearest(name, settings_of(FLAG_GROUPS[group]))
        return f"did you mean --{group}.{near}? " if near else ""
    if dot and (near := nearest(group, [*FLAG_GROUPS, "model", "data"])) and near != group:  # --chekpoint.save_top_k
        return f"did you mean --{near}.{name}? "
    near = "" if dot else nearest(whole, list(TOP_FLAGS))
    return f"did you mean --{near}? " if near not in ("", whole) else ""  # fit's --final_validation given to test


def choices_of(key: str) -> list[str]:
    """The choices of a group's setting (``checkpoint.save_last``), where its type is a ``Literal``: jsonargparse
    reports a value that is none of them as "Expected a <class 'bool'>" where the choices hold a bool."""
    group, _, name = key.rpartition(".")
    hint = get_type_hints(FLAG_GROUPS[group].__init__).get(name) if group in FLAG_GROUPS else None  # type: ignore[misc]
    return [YAML.get(str(c), str(c)) for c in get_args(hint)] if get_origin(hint) is Literal else [KINDS["bool"]]


def union_kinds(message: str, at: int) -> list[str]:
    """The types, in words, of the union whose error is line ``at``, from its whole "Subtypes:" line (jsonargparse
    cuts the value, between spaces, out of its errors: ``a`` from "Expected a"); empty where that names a class."""
    raw = [line for line in message.split("\n") if line.strip()]
    indent = [len(line) - len(line.lstrip()) for line in raw]
    up = next((i for i in range(at - 1, 0, -1) if indent[i] < indent[at]), 0)
    listed = raw[up - 1].strip().removeprefix("Subtypes: ") if raw[up].strip() == "Errors:" else ""
    names = "|".join(re.escape(repr(t)) for t in sorted(BOUNDED, key=lambda t: -len(repr(t))))
    kind = re.compile(rf"<class '(?:pathlib\.)?(\w+)'>|typing\.Literal\[(.*?)\]|({names})")
    if not listed.startswith("[") or kind.sub("", listed).strip("[], "):  # none, or a type of no plain kind
        return []
    return [k for m in kind.finditer(listed) for k in ([KINDS.get(m[1], m[1])] if m[1] else [m[3]] if m[3] else
            [YAML.get(v, v.strip("'")) for v in m[2].split(", ")])]  # fmt: skip


NO_CONFIG = 'Parser key "config"'


def not_accepted(line: str) -> str | None:
    """The whole key in jsonargparse's report of a config's key that no setting has (``trainer.max_stepz``)."""
    unknown = re.search(r"(?:Subcommand '\w+'|Group '([\w.]+)') does not accept option '(.*)'$", line)
    return ".".join(part for part in unknown.groups() if part) if unknown else None


def not_a_config(message: str, argv: list[str]) -> str | None:
    """jsonargparse's report of a config that is no file, no mapping or no YAML, naming the files given."""
    named = ", ".join(repr(p) for p in config_paths(argv)) or "a config"
    first = message.split("\n")[0]
    if first.startswith(NO_CONFIG):  # no such file, or a folder
        return f"--config{first.removeprefix(NO_CONFIG)}; pass a config such as configs/first_run.yaml"
    if first.startswith("Unexpected config:"):
        return str(no_mapping(named, first.removeprefix("Unexpected config:")))
    if first.startswith("Problems parsing config"):
        return str(not_yaml(named, first.split(":", 1)[-1]))
    return None


def missing_value(message: str, argv: list[str]) -> str | None:
    """argparse's "expected one argument" names the group: the flag with no value after it, named."""
    if "expected one argument" not in message:
        return None
    for i, arg in enumerate(argv):
        if arg.startswith("--") and "=" not in arg and arg != "--" and (i + 1 == len(argv) or argv[i + 1][:1] == "-"):
            after = repr(argv[i + 1]) if i + 1 < len(argv) else "nothing"
            return f"{arg} needs a value, and {after} follows it; pass one, e.g. {arg} VALUE (or {arg}=VALUE)"
    return None


def usage_slip(message: str, argv: list[str], options: list[str]) -> str | None:
    """argparse's "unrecognized arguments" or "arguments are required", with where to look (and the option nearest
    an unknown flag, of ``options``)."""
    first = message.split("\n")[0]
    if first.startswith("the following arguments are required: ") and re.search(rf" {argv[0]}\.(model|data)", first):
        return f"{first}; a config names them, e.g. --config configs/first_run.yaml"
    if first.startswith(("unrecognized arguments", "the following arguments are required")):
        unknown = re.match(r"unrecognized arguments: (--\S+)", first)
        return f"{first}; {guess(unknown[1], options) if unknown else ''}{argv[0]} --help lists its options"
    if odd := re.fullmatch(r'Invalid option "(.*)" for (--\w+)', first):  # --print_config=FLAGS: one that it lacks
        return f"{odd[2]}: {shortened(odd[1])!r} is not one of its flags; {argv[0]} --help lists them"
    if asked := re.match(r"--([\w.]+)\.help: (.*)", first):  # a class it does not take, or may not import
        flag = f"--{asked[1]}.help"
        given = f"{flag}: {shortened(given_to(flag, argv))!r}"
        if asked[1] in ("model", "data"):
            return f"{given} is no class of the project's; pass one of {', '.join(project_classes(asked[1]))}"
        if refusal := denied(asked[2]):  # the name, as jsonargparse quotes it
            return f"{flag}: {refusal}"
        return f"{given} is no class it takes; name one by its name or import path"
    return None


def given_to(flag: str, argv: list[str]) -> str:
    """The value a flag is given (``--flag VALUE`` or ``--flag=VALUE``), else ""."""
    pairs = zip(argv, [*argv[1:], ""], strict=True)
    return next((a.partition("=")[2] or b for a, b in pairs if a.partition("=")[0] == flag), "")


def project_classes(group: str) -> list[str]:
    """The classes of the project's that ``model`` (or ``data``) takes."""
    every = (training if group == "model" else data).__all__
    return [n for n in every if n.endswith("DataModule") or n.startswith("Lit") and n != "LitTransformer"]


def config_at_fault(line: str, argv: list[str]) -> str | None:
    """The ``--config`` file that sets the key a report names (the longest such key; of equals the last, which
    wins), as ``--config 'FILE'``; a group's file where the flag of a group gave it (``--trainer 'FILE'``); None
    where a flag sets it. A pipe, read once, is the one where no file sets the key itself."""
    plain = line.replace("init_args.", "")
    flags = {arg.split("=", 1)[0].removeprefix("--").replace("init_args.", "").rstrip("+") for arg in argv
             if arg[:2] == "--"}  # fmt: skip
    key = plain.split(": ", 1)[0]  # below it: an unknown name, or a value for a key that has none below it
    if top := not_accepted(plain):  # a config's key that no setting has
        key = top
    below = re.search(r"Option '(\w+)' is not accepted|^[\w.]+: \{([\w.]+): ", plain)  # {x: 3}: a flag's (brief)
    if key in flags or f"{key}.class_path" in flags or below and f"{key}.{below[1] or below[2]}" in flags:
        return None
    if group := next((flag for flag in flags if key.startswith(f"{flag}.")), None):  # the group that holds it
        value = given_to(f"--{group}", argv)  # --model.model '{}' names itself; --trainer FILE or '{...}' is named
        return f"--{group} {shortened(value)!r}" if os.path.isfile(value) or value and group in FLAG_GROUPS else None
    best, found, unread = -1, None, []
    for path in config_paths(argv):
        if os.path.exists(path) and not os.path.isfile(path):  # a pipe, read once by jsonargparse: empty now
            unread.append(path)
            continue
        try:
            text = Path(path).read_text(encoding="utf-8") if os.path.isfile(path) else path  # else: read as YAML text
            keys = _keys(load(text))
        except Exception:  # unreadable here (a file gone, or made unreadable): not the one to name
            unread.append(path)
            continue
        longest = max((len(key) for key in keys if _named(key.replace("init_args.", ""), plain)), default=-1)
        if longest >= 0 and longest >= best:
            best, found = longest, path
    if len(unread) == 1 and best < len(key) and (top or re.fullmatch(r"[\w.]+", key)):  # a file sets its group
        found = unread[0]
    return f"--config {found!r}" if found else None


def _keys(settings, prefix: str = "") -> list[str]:
    """Every dotted key of a config's settings, ``init_args`` left out below the top (a class's settings)."""
    if not isinstance(settings, dict):
        return []
    keys = []
    for key, value in settings.items():
        through = key == "init_args" and bool(prefix)
        dotted = prefix if through else f"{prefix}{key}."
        keys += ([] if through else [dotted[:-1]]) + _keys(value, dotted)
    return keys


def _named(key: str, line: str) -> bool:
    """Whether a report names this dotted key: quoted, whole, or its last part as jsonargparse quotes it."""
    last = key.rsplit(".", 1)[-1]
    odd = not last.isidentifier() and f'"{last}"' in line  # an empty key, a key with a space: at any depth
    if f'"{key}"' in line or f"'{last}'" in line or f"got: {last}." in line or odd:
        return True
    return bool(key) and re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", line) is not None

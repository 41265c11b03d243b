"""Config files and values are untrusted: jsonargparse's YAML loader is replaced by one that refuses more than
:data:`MAX_CHARS` characters, nesting deeper than :data:`MAX_DEPTH` and more than :data:`MAX_ALIASES` aliases."""

from __future__ import annotations

import copy
import enum
import os
import stat

import yaml
from jsonargparse import set_dumper, set_loader

from ..data.files import shortened

MAX_CHARS = 1_000_000  # a config file, or one value on the command line
MAX_DEPTH = 64
MAX_ALIASES = 64


class ConfigError(ValueError):
    """A config or value that :func:`load` refuses; ``text``: what it was reading (the error path finds its flag)."""

    text = ""


class GuardedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting the nodes it nests and the aliases it meets while it composes them."""

    depth = aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise ConfigError(f"a config uses more than {MAX_ALIASES} YAML aliases; write its values out instead")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ConfigError(f"a config nests deeper than {MAX_DEPTH} levels; no setting here needs that")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_yaml_int(self, node):
        """A number longer than Python reads (4,300 digits) refused; YAML 1.1's base 60 is text (a time)."""
        if ":" in str(node.value):
            return node.value
        if (digits := sum(c.isdigit() for c in str(node.value))) > 4_300:
            raise ConfigError(f"a number of {digits:,} digits is past every setting's bound; pass a smaller one")
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):
        return node.value if ":" in str(node.value) else super().construct_yaml_float(node)

    def construct_yaml_bool(self, node):
        """YAML 1.1's yes, no, on and off are text, as YAML 1.2 reads them."""
        return super().construct_yaml_bool(node) if str(node.value).lower() in ("true", "false") else node.value

    def construct_mapping(self, node, deep=False):
        """A key set twice in one mapping is refused (PyYAML keeps the last); a merge key's keys give way."""
        lines: dict = {}
        for key, _ in node.value:
            if key.tag == MERGE:
                continue
            name, line = self.construct_object(key, deep=True), key.start_mark.line + 1
            if not isinstance(name, str | int | float | bool):  # a list or a mapping as a key: PyYAML refuses it
                continue
            if name in lines:
                at = f" (lines {lines[name]} and {line})" if lines[name] < line else ""  # a one-line value: none
                raise ConfigError(f"{str(name)[:40]!r} is set twice in one mapping{at}; keep one")
            lines[name] = line
        return super().construct_mapping(node, deep)

    def construct_unplain(self, node):
        """A value of a YAML type that no setting takes (a set, an ordered map, a date)."""
        raise ConfigError(f"!!{node.tag.rpartition(':')[2]} (line {node.start_mark.line + 1}) is a YAML type that no "
                          "setting takes; write a mapping, a list, text or a number")  # fmt: skip


MERGE = "tag:yaml.org,2002:merge"
GuardedLoader.add_constructor("tag:yaml.org,2002:int", GuardedLoader.construct_yaml_int)
GuardedLoader.add_constructor("tag:yaml.org,2002:float", GuardedLoader.construct_yaml_float)
GuardedLoader.add_constructor("tag:yaml.org,2002:bool", GuardedLoader.construct_yaml_bool)
for _tag in ("set", "omap", "pairs", "binary", "timestamp"):
    GuardedLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", GuardedLoader.construct_unplain)
# a value that looks like a date (a run named 2026-11-27) is text, as jsonargparse's own loader reads it
GuardedLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if not tag.endswith(":timestamp")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load(text: str):
    """One config file's text, or one command-line value, as Python data. One of up to 10,000 characters is read
    once (jsonargparse reads each default and value hundreds of times a run), its lists and mappings copied at each
    read; the last 1,000 are kept."""
    if (value := READ.get(text, READ)) is not READ:
        return copy.deepcopy(value)  # a change to one run's settings reaches no other
    if len(text) > MAX_CHARS:
        raise ConfigError(f"a config or value of {len(text):,} characters is longer than {MAX_CHARS:,}; pass less")
    loader = GuardedLoader(text)
    try:
        value = loader.get_single_data()
    except ConfigError as e:
        e.text = text
        raise
    finally:
        loader.dispose()
    if len(text) <= 10_000:
        if len(READ) == 1_000:
            del READ[next(iter(READ))]  # the first read gives way
        READ[text] = copy.deepcopy(value)
    return value


READ: dict[str, object] = {}  # a text: its value, for load


def config_paths(args: list[str]) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--config"] + [
        arg.split("=", 1)[1] for arg in args if arg.startswith("--config=")
    ]


def longest_value(text: str) -> str:
    """Where the longest line of a YAML text is: its keys' dotted path, read from the indentation, or its line."""
    lines = text.splitlines() or [""]
    at = max(range(len(lines)), key=lambda i: len(lines[i]))
    path: list[str] = []
    indent = len(lines[at]) - len(lines[at].lstrip())
    for i in range(at, -1, -1):
        line = lines[i]
        depth = len(line) - len(line.lstrip())
        if line.strip() and (i == at or depth < indent) and ":" in line and not line.lstrip().startswith("#"):
            key = line.strip().removeprefix("- ").split(":", 1)[0].strip()[:40]
            path.insert(0, key)
            indent = depth
            if depth == 0:
                break
    return ".".join(path) if path else f"line {at + 1}"


def check_config_files(args: list[str]) -> list[dict]:
    """Every regular ``--config`` file read with the limits before jsonargparse reads it, so that a refusal names
    the file; its settings returned."""
    read = []
    for path in config_paths(args):
        if found := read_config(path):  # else a pipe (--config <(...)), read once: jsonargparse's read, same limits
            if not isinstance(found[1], dict):
                raise no_mapping(repr(path), found[0])
            check_settings(found[1], f"--config {path!r}: ")
            read.append(found[1])
    return read


def read_config(path: str, flag: str = "--config") -> tuple[str, object] | None:
    """A regular file of settings (a ``--config``, or a flag's: ``--model FILE``) read with the limits, as its text and
    what it holds (None: no regular file); a refusal names ``flag`` and the file."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as f:
            data = f.read(MAX_CHARS * 4 + 1)  # at most 4 bytes a character in UTF-8
    except OSError as e:
        if e.filename is None:  # opened, but the read failed (an I/O error): named here
            e.filename = path
            raise
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if len(data) <= MAX_CHARS * 4 or e.start < MAX_CHARS * 4 - 3:
            raise ConfigError(not_utf8(path, e, flag)) from None
        text = data[: e.start].decode("utf-8")  # a character cut by the read's end
    if len(data) > MAX_CHARS * 4 or len(text) > MAX_CHARS:
        at = longest_value(text[: MAX_CHARS * 2])
        raise ConfigError(f"{flag} {path!r} is longer than {MAX_CHARS:,} characters (the longest value is at {at}); "
                          "a config holds settings, not data: pass less")  # fmt: skip
    try:
        return text, load(text)
    except ConfigError as e:
        raise ConfigError(f"{flag} {path!r}: {e}") from None
    except yaml.YAMLError as e:
        raise not_yaml(repr(path), str(e), flag) from None


def written(value) -> str:
    """A loaded value as a config writes it: null, true, 3, [1] (shortened)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else shortened(str(value))


def check_class_part(label: str, value) -> None:
    """A ``class_path`` that is no text, or ``init_args`` that are no mapping (jsonargparse fails inside)."""
    part, shown = label.rpartition(".")[2], written(value)
    if part == "class_path" and not isinstance(value, str):
        raise ConfigError(f"{label} {shown!r} is no class name; name a class by its name or import path")
    if part == "init_args" and not isinstance(value, dict):
        raise ConfigError(f"{label} {shown!r} is no mapping of the class's settings; give them as NAME: VALUE pairs")


def check_settings(settings: dict, where: str, key: str = "") -> None:
    """A config's keys (printable text) and class parts (:func:`check_class_part`), at every depth."""
    if not isinstance(settings, dict):
        return
    if (odd := next((k for k in settings if isinstance(k, str) and not k.isprintable()), None)) is not None:
        raise ConfigError(f"{where}{key}{odd[:40]!r} holds a line break or control character, which no setting's "
                          "name has; write the key in plain text")  # fmt: skip
    for name in ("class_path", "init_args"):
        if name in settings:
            check_class_part(f"{where}{key}{name}", settings[name])
    for name, value in settings.items():
        for each in value if isinstance(value, list) else [value]:  # a list of classes: loggers, callbacks
            check_settings(each, where, f"{key}{name}.")


def check_values(args: list[str]) -> None:
    """A command-line value longer than :data:`MAX_CHARS`, or a class part that is none, named by its flag."""
    for i, arg in enumerate(args):
        flag, given, value = arg.partition("=") if arg.startswith("--") else (args[i - 1] if i else "", "=", arg)
        name = flag.rpartition(".")[2]
        if given and name in ("class_path", "init_args") and len(value) <= MAX_CHARS:
            try:
                check_class_part(flag, load(value))
            except yaml.YAMLError:  # not YAML: text, which jsonargparse reads as it reads any value
                pass
        if len(value) > MAX_CHARS:
            raise ConfigError(f"the value of {flag or 'an argument'} is {len(value):,} characters, longer than "
                              f"{MAX_CHARS:,}; pass less")  # fmt: skip


def not_yaml(named: str, reason: str, flag: str = "--config") -> ConfigError:
    return ConfigError(f"{flag} {named} is not valid YAML ({' '.join(reason.split())[:80]}); fix it or pass another")


def no_mapping(named: str, text: str) -> ConfigError:
    what = " ".join(text.split())[:40]
    return ConfigError(f"--config {named} holds no mapping of settings (it is empty, a list or plain text: {what!r}); "
                       "pass a YAML file such as configs/first_run.yaml")  # fmt: skip


def not_utf8(path: str, e: UnicodeDecodeError, flag: str = "--config") -> str:
    fix = "a config such as configs/first_run.yaml" if flag == "--config" else "a YAML file of its settings"
    return f"{flag} {path!r} is not a YAML file in UTF-8 (byte {e.start:,} is not text); pass {fix}"


set_loader("yaml", load, exceptions=(yaml.YAMLError,))


class PlainDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """PyYAML's safe dumper, writing an Enum (a default of Lightning's) as its value. libyaml's, where PyYAML has it:
    a run dumps its settings twice, and PyYAML's own writes a line separator (NEL, U+2028) bare in quoted text,
    which reads back as a space."""


PlainDumper.add_multi_representer(enum.Enum, lambda dumper, value: dumper.represent_data(value.value))
set_dumper("yaml", lambda data: yaml.dump(data, Dumper=PlainDumper, default_flow_style=False, allow_unicode=True,
                                          sort_keys=False))  # jsonargparse's own settings for a dump  # fmt: skip

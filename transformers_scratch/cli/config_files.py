"""Config files and values are untrusted input, read with limits: jsonargparse's YAML loader is replaced by one
that refuses more than :data:`MAX_CHARS` characters, nesting deeper than :data:`MAX_DEPTH` and more than
:data:`MAX_ALIASES` aliases (a "billion laughs" file is refused before it is expanded), with one clear line each.
A file that is not UTF-8 text is named by :func:`unreadable_config`."""

from __future__ import annotations

from pathlib import Path

import yaml
from jsonargparse import set_loader

MAX_CHARS = 1_000_000  # a config file, or one value on the command line
MAX_DEPTH = 64
MAX_ALIASES = 64


class ConfigError(ValueError):
    pass


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


def load(text: str):
    """One config file's text, or one command-line value, as Python data."""
    if len(text) > MAX_CHARS:
        raise ConfigError(f"a config or value of {len(text):,} characters is longer than {MAX_CHARS:,}; pass less")
    loader = GuardedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def config_paths(args: list[str]) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--config"] + [
        arg.split("=", 1)[1] for arg in args if arg.startswith("--config=")
    ]


def not_a_config(message: str, args: list[str]) -> str | None:
    """jsonargparse's report of a config that is no mapping of settings, or no YAML, as one line naming the
    config files given; None for any other report."""
    named = ", ".join(repr(p) for p in config_paths(args)) or "a config"
    first = (message.splitlines() or [""])[0]
    if first.startswith("Unexpected config:"):
        what = first.removeprefix("Unexpected config:").strip()[:40]
        return (f"--config {named} holds no mapping of settings (it is empty, a list or plain text: {what!r}); pass "
                "a YAML file such as configs/first_run.yaml")  # fmt: skip
    if first.startswith("Problems parsing config"):
        return f"--config {named} is not valid YAML ({first.split(':', 1)[-1].strip()[:80]}); fix it or pass another"
    return None


def unreadable_config(args: list[str]) -> str | None:
    """The first ``--config`` file in ``args`` that is not UTF-8 text, described; None if there is none."""
    for path in config_paths(args):
        try:
            Path(path).read_bytes()[: MAX_CHARS * 4].decode("utf-8")
        except UnicodeDecodeError as e:
            return (f"--config {path!r} is not a YAML file in UTF-8 (byte {e.start:,} is not text); pass a config "
                    "such as configs/first_run.yaml")  # fmt: skip
        except OSError:
            continue
    return None


set_loader("yaml", load, exceptions=(yaml.YAMLError,))

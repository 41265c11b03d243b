"""Logging: W&B that also works with no account or no network, and CSV files that a resumed run continues (through
private members of Lightning's CSVLogger, pinned by tests/test_reliability.py)."""

from __future__ import annotations

import csv
import netrc
import os
import socket
from pathlib import Path
from typing import Literal, cast

from lightning.pytorch.loggers import CSVLogger as _CSVLogger
from lightning.pytorch.loggers import WandbLogger as _WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_info

from ..bounds import Count, PathName, RunName
from .console import note

WANDB_MODES = ("online", "offline", "dryrun", "disabled", "shared", "run")  # wandb.Settings' mode
RUN = "{run}"  # a logger's name by default: the run's, which the command line puts in; Lightning's default outside it


def _has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None  # written by `wandb login`
    except FileNotFoundError:
        return False
    except (OSError, ValueError, netrc.NetrcParseError) as e:  # a folder, binary or malformed: W&B reads no key either
        note(f"~/.netrc holds no key W&B can read ({e}), so W&B logs offline")
        return False


def _usable_cache() -> bool:
    """Whether the user's cache folder, where W&B's service writes its own log, can hold it (not so with no
    ``HOME``, or one that cannot be written: a container's user)."""
    home = os.environ.get("XDG_CACHE_HOME") or (os.environ.get("HOME") and os.path.join(os.environ["HOME"], ".cache"))
    if not home:
        return False
    try:
        Path(home, "wandb", "logs").mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return True


def _reachable(host: str = "api.wandb.ai", port: int = 443, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class WandbLogger(_WandbLogger):
    """Lightning's ``WandbLogger``, online when it can be (``WANDB_MODE``, else an API key and a reachable
    server), else offline with a note on how to sync."""

    def __init__(self, project: str = "transformers-scratch", save_dir: PathName = "logs", offline: bool | None = None,
                 name: str | None = RUN, **kwargs) -> None:  # fmt: skip
        if (os.environ.get("WANDB_MODE") or "online") not in WANDB_MODES:  # W&B's own refusal names no variable
            raise ValueError(f"WANDB_MODE={os.environ['WANDB_MODE'][:40]!r} is none of W&B's modes "
                             f"({', '.join(WANDB_MODES)}); set one of them, or unset it")  # fmt: skip
        if offline is False and not os.environ.get("WANDB_MODE") and not (_has_credentials() and _reachable()):
            raise ValueError(  # W&B's own refusal would come at the first logged value, as a traceback
                "trainer.logger: WandbLogger offline false logs online, and this machine has no W&B API key (`wandb "
                "login` or WANDB_API_KEY) or cannot reach api.wandb.ai; log in, or leave offline null to log offline "
                "and sync later"
            )
        if offline is None:
            mode = os.environ.get("WANDB_MODE")
            if mode:  # "disabled" stays to wandb itself: Lightning's offline mode would overwrite it with "dryrun"
                offline = mode in ("offline", "dryrun")
            else:
                offline = not (_has_credentials() and _reachable())
                if offline:
                    rank_zero_info(
                        f"W&B: no API key or no network, so this run is logged offline under {save_dir}/wandb; "
                        f"upload it later with `wandb sync {save_dir}/wandb/offline-run-*`"
                    )
        if kwargs.get("id") or kwargs.get("version"):
            kwargs.setdefault("resume", "allow")  # a resumed fit continues its run (offline too)
        disabled = os.environ.get("WANDB_MODE") == "disabled"
        self.mode = "disabled" if disabled else f"offline in {save_dir}/wandb" if offline else "online"
        if disabled or offline:  # passed to each run: W&B reads WANDB_MODE once a process
            kwargs.setdefault("mode", "disabled" if disabled else "offline")
        name = None if name == RUN else name  # W&B names the run
        super().__init__(project=project, save_dir=save_dir, offline=offline, name=name, **kwargs)
        if not kwargs.get("anonymous"):  # W&B warns that the setting is deprecated whenever it is passed at all
            self._wandb_init.pop("anonymous", None)

    @property
    def experiment(self):
        """W&B's run, started the first time it is needed: a command refused before then leaves no run and no
        folder behind."""
        from pydantic import ValidationError  # W&B's settings are checked by pydantic
        from wandb.errors import Error  # here: W&B is imported once a run is started

        if self.save_dir:
            Path(self.save_dir).mkdir(parents=True, exist_ok=True)  # wandb wants its folder to exist
        cache = os.environ.get("XDG_CACHE_HOME")
        moved = self._experiment is None and bool(self.save_dir) and not _usable_cache()  # as the run starts
        try:
            if moved:  # W&B's service would print its own log on stderr, line by line
                os.environ["XDG_CACHE_HOME"] = str(Path(str(self.save_dir), "wandb", "cache").resolve())
            return super().experiment
        except Error as e:  # W&B's refusal (online with no API key or a malformed one, a project name it refuses):
            # its traceback; the error path names the WANDB_* variable that it quotes
            reason = (str(e).splitlines() or ["no reason given"])[0][:200]
            raise ValueError(f"W&B did not start the run ({reason}); correct the setting it names (a WANDB_* variable "
                             "or the WandbLogger's; `wandb login` gives a key), or set WANDB_MODE=offline (no key "
                             "needed) or disabled") from e  # fmt: skip
        except UnicodeDecodeError as e:  # W&B reads its settings file as text, and names no file
            folder = os.environ.get("WANDB_CONFIG_DIR") or "~/.config/wandb"
            raise ValueError(f"W&B could not read its settings file {folder}/settings, which is not UTF-8 text "
                             f"(byte {e.start}); fix or move it, or set WANDB_MODE=disabled") from None  # fmt: skip
        except ValidationError as e:  # a setting W&B's types refuse, such as WANDB_CONSOLE=zzz: named by its variable
            first = e.errors()[0]
            name, given = ".".join(map(str, first["loc"])) or "a setting", str(first.get("input"))
            where = sorted((key for key, value in os.environ.items() if key.startswith("WANDB_") and len(value) > 1
                            and value in given), key=lambda key: -len(os.environ[key]))  # fmt: skip
            raise ValueError(
                f"W&B refuses its setting {name}={given[:40]!r} ({first['msg'][:200]}); correct "
                f"{where[0] if where else f'the WandbLogger setting {name}'}, or unset it"
            ) from None
        finally:  # the service started has read it: the rest of the process sees the user's own
            if moved and cache is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            elif moved:
                os.environ["XDG_CACHE_HOME"] = cache


class _AppendingWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        # Lightning's writer deletes a metrics.csv it finds; a resumed run appends to it instead, under the same
        # columns (new ones rewrite the header, keeping every row).
        # A file this cannot read (Lightning reads every row again when a column is added) is named, and kept.
        if self._fs.isfile(self.metrics_file_path):
            try:
                with self._fs.open(self.metrics_file_path, "r", newline="", encoding="utf-8") as f:
                    rows = csv.reader(f)
                    self.metrics_keys = next(rows, [])
                    sum(1 for _ in rows)  # every row read once
            except (UnicodeDecodeError, csv.Error) as e:
                why = "not UTF-8" if isinstance(e, UnicodeDecodeError) else e
                raise ValueError(f"{self.metrics_file_path!r}, the log this resumed run continues, is no CSV log "
                                 f"({why}); move it aside, or start another run with --name") from None  # fmt: skip


class CSVLogger(_CSVLogger):
    """Lightning's ``CSVLogger``, except that a resumed ``fit`` keeps the rows logged before the interruption."""

    def __init__(self, save_dir: PathName = "logs", name: RunName | Literal["{run}", ""] | None = RUN,
                 version: int | RunName | None = None, prefix: str = "",
                 flush_logs_every_n_steps: Count = 100) -> None:  # fmt: skip  # Lightning's takes a count of 0
        name = "lightning_logs" if name == RUN else name
        super().__init__(save_dir, name, version, prefix, flush_logs_every_n_steps)
        folder = Path(self.log_dir) if version is not None else None  # a resumed run's: it writes there again
        files = sorted(folder.iterdir()) if folder and folder.is_dir() else []
        if links := [p.name for p in files if p.is_symlink() or not (p.is_file() or p.is_dir())]:  # a pipe: waits
            raise ValueError(f"{folder}/ holds links or pipes ({', '.join(links[:3])}), which this run's logs would "
                             "be written through, over the files they name, or wait on for ever; remove them, or "
                             "start another run with --name")  # fmt: skip

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return cast(ExperimentWriter, self._experiment)  # an _AppendingWriter, made here

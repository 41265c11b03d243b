"""Files written whole: a temporary name beside the target, renamed into place once complete, so that a killed
or failed write never leaves half a file (checkpoints, exports, data caches, downloads, predictions). Every layer
writes through it, as every layer declares its bounds in :mod:`.bounds`. Output into a pipe whose reader stopped
(``| head``) ends the command quietly; output that cannot be written (``> /dev/full``) is said so; ``TS_DEBUG``
asks for the traceback instead."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn


@contextmanager
def written_whole(path: Path) -> Iterator[Path]:
    """A temporary name beside ``path`` to write to, of this writer's own, renamed to ``path`` once the block
    ends (atomic on POSIX): a killed or failed write leaves the old file, or none, never half of the new. A
    ``path`` that is a device or a pipe (``/dev/stdout``) is written to itself: a rename would replace it. A
    write's error that names no file (a full disk), or names the temporary one, is raised again naming ``path``."""
    in_place = path.exists() and not path.is_file()
    tmp = path if in_place else path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        yield tmp
        if not in_place:
            os.replace(tmp, path)
    except OSError as e:
        if e.errno is not None and (e.filename is None or str(e.filename) == str(tmp)):
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    finally:
        if not in_place:
            tmp.unlink(missing_ok=True)


def write_whole(path: Path, data: bytes | memoryview | str) -> None:
    """``data`` (text as UTF-8) written whole to ``path``. A writer that streams to a file it opens (``torch.save``,
    matplotlib's) fills a buffer and hands it here: a full disk then raises Python's OSError naming the file, where
    torch's writer raised a RuntimeError naming none and matplotlib's reported success."""
    with written_whole(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)


def saved_whole(obj, path: Path) -> None:
    """``torch.save(obj)`` serialised in memory, then written whole to ``path`` (:func:`write_whole`)."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_whole(path, buffer.getbuffer())


def unfinished(folder: Path, name: str = "*") -> Iterator[Path]:
    """The temporary files that a killed :func:`written_whole` left in ``folder``, of files named ``name`` (a glob)."""
    return folder.glob(f".{name}.*.tmp")


def stopped_reading() -> NoReturn:
    """The output's reader stopped reading (``| head``): the command ends there, quietly, as Unix tools do."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # so that the exit's flush of stdout has nowhere to fail
    sys.exit(141)  # 128 + SIGPIPE, the status of a tool that the signal ended


def output_closed() -> bool:
    """Whether the standard output is a pipe whose reader has closed it (the poll of its writing end says so)."""
    import select

    try:
        poll = select.poll()
        poll.register(1, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, AttributeError):  # no poll (Windows), or no standard output
        return False


def output_unwritable(e: BaseException) -> str | None:
    """The line for ``e`` where it is the standard output's write failing (``> /dev/full``): a write of nothing to
    it fails too (a regular file on a full disk takes one, and stays unnamed). The output then goes to /dev/null,
    where the exit's flush of it cannot fail."""
    if not isinstance(e, OSError) or e.filename is not None or isinstance(e, BrokenPipeError):
        return None
    try:
        os.write(1, b"")
        return None
    except OSError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    return f"the standard output cannot be written ({e.strerror}); send it to a file on a disk with room (> FILE)"


def debugging() -> bool:
    """Whether ``TS_DEBUG`` asks for tracebacks: set, and not empty, 0, false, no or off."""
    return os.environ.get("TS_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")

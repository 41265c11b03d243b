"""One run, one place: a fit holds its checkpoint folder (``checkpoints/NAME/``) for as long as it runs."""

from __future__ import annotations

import atexit
import errno
import os
import stat
from pathlib import Path

from ..atomic import unfinished

LOCK = ".fit.lock"
_HELD: dict[Path, int] = {}  # the run folders this process holds: the open descriptor of each one's lock


def _holder(lock: Path) -> str:
    try:
        return f"process {int(lock.read_text()[:20])}"
    except (OSError, ValueError):
        return "a process starting up"


def claim_run_folder(folder: Path, resuming: bool) -> None:
    """One run, one place: a fit holds its checkpoint folder (the kernel's ``flock`` on its lock file, which ends
    with the process), and a fresh fit never starts in a folder that holds another run's checkpoints."""
    import fcntl  # POSIX: Linux and macOS

    folder.mkdir(parents=True, exist_ok=True)
    key, lock = folder.resolve(), folder / LOCK
    while key not in _HELD:
        folder.mkdir(parents=True, exist_ok=True)  # again: a holder that ended removes the folder it left empty
        try:  # never through a link: the lock file is truncated and written, and another file would be lost
            fd = os.open(lock, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o644)
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise ValueError(f"{lock} is a link, not a fit's lock; remove the link, or give this run its own "
                             "--name") from None  # fmt: skip
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a pipe: no file to truncate and write
            os.close(fd)
            raise ValueError(f"{lock} is a pipe or a device, not a fit's lock; remove it, or give this run its own "
                             "--name")  # fmt: skip
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ValueError(f"{folder}/ is in use by another fit ({_holder(lock)}); wait for it to end, or give this "
                             "run its own --name") from None  # fmt: skip
        try:
            current = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if not current:  # its holder ended and removed it between our open and our lock: a file no one sees
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        _HELD[key] = fd
        atexit.register(release_run_folder, folder)
    if not resuming and (found := sorted(p.name for p in folder.glob("*.ckpt"))):
        release_run_folder(folder)
        raise ValueError(
            f"{folder}/ already holds a run ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}); resume it "
            "with --ckpt_path last, start another with --name NAME, or move that folder away"
        )
    for stale in unfinished(folder, "*.ckpt"):  # an interrupted checkpoint write (the folder is ours now)
        stale.unlink(missing_ok=True)


def release_run_folder(folder: Path) -> None:
    """Give the folder back; a run that wrote nothing there leaves no empty folder (nor an empty parent)."""
    try:
        fd = _HELD.pop(folder.resolve(), None)
    except OSError:
        return
    if fd is None:
        return
    try:
        (folder / LOCK).unlink(missing_ok=True)  # while still held: no one locks a file that is being removed
        for empty in (folder, folder.parent):
            if not any(empty.iterdir()):
                empty.rmdir()
    except OSError:
        pass
    finally:
        os.close(fd)

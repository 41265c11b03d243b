"""Reading and fetching data files, with errors that say what to do."""

from __future__ import annotations

import codecs
import errno
import gzip
import hashlib
import os
import sys
import urllib.request
import zipfile
import zlib
from pathlib import Path

from ..atomic import unfinished, written_whole
from ..model.config import memory_bytes


class DataError(ValueError):
    """A data file is missing, unreadable, corrupt or too small; the message says how to fix it."""


def utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text after an optional byte-order mark (as Notepad and spreadsheets save), or a refusal
    that names ``where`` it came from and the first byte that is not, with its offset."""
    mark = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[mark:].decode("utf-8")
    except UnicodeDecodeError as e:
        at = mark + e.start  # in the file
        raise DataError(f"{where} is not UTF-8 text (byte {data[at]:#04x} at {at:,}); convert it, e.g. with `iconv "
                        "-f latin1 -t utf-8`") from None  # fmt: skip


def predicting(datamodule) -> bool:
    """Whether the datamodule serves ``predict``, which needs a checkpoint and predict_path, not the dataset."""
    trainer = datamodule.trainer
    return trainer is not None and trainer.state.fn == "predict"


def read_text(path: str | os.PathLike, where: str, limit: int, kind: str = "a text file") -> str:
    """A text file a user gives (a pipe too: read once) as :func:`utf8` text of at most ``limit`` bytes with no NUL
    byte. ``where`` names it in each refusal (``--prompt_file 'x.txt'``); ``kind`` is what to pass instead."""
    if not os.path.exists(path) or os.path.isdir(path):
        raise DataError(f"{where} does not exist or is a folder; pass {kind}")
    try:
        with open(path, "rb") as stream:
            raw = stream.read(limit + 1)
    except OSError as e:
        e.filename = e.filename or str(path)  # a failed read names no file: the error path names its flag
        raise
    if len(raw) > limit:
        raise DataError(f"{where} holds more than {limit:,} bytes, more than is read at once; pass a shorter file "
                        "(`split -C` cuts one into parts)")  # fmt: skip
    if b"\x00" in raw:
        raise DataError(f"{where} holds binary data (a NUL byte); pass {kind}")
    return utf8(raw, where)


def inflates_past(path: str | os.PathLike) -> int | None:
    """What a file of torch.save's inflates to, where that is far past its size (a bomb); else None."""
    try:
        with zipfile.ZipFile(path) as archive:
            inflated = sum(entry.file_size for entry in archive.infolist())
    except Exception:  # no zip, or a broken one (zipfile fails in several ways)
        return None
    return inflated if inflated > 2 * Path(path).stat().st_size + 2**20 else None


MAX_INFLATED = 500_000_000  # 5x enwik8: an archive that inflates to more is refused (a zip bomb)


def _too_large(path: Path) -> DataError:
    return DataError(
        f"{str(path)!r} inflates to more than {MAX_INFLATED:,} bytes (5x enwik8), so it was not read; "
        "unpack it yourself and pass the raw file with --data.path if it is really meant"
    )


def _inflate(stream, path: Path) -> bytes:
    """Read a decompressing stream, stopping past MAX_INFLATED bytes instead of filling the memory."""
    data = stream.read(MAX_INFLATED + 1)
    if len(data) > MAX_INFLATED:
        raise _too_large(path)
    return data


def read_bytes(path: str | os.PathLike, flag: str = "data.path") -> bytes:
    """The contents of a raw file, a one-member ``.zip`` (the member named like the archive if there are
    several) or a ``.gz``, checked against the archive's CRC; an archive is read only up to MAX_INFLATED.
    ``flag``: the setting that named the file, for the refusals."""
    path = Path(path)
    if not path.exists() or path.is_dir():
        why = "is a directory" if path.exists() else "does not exist"
        raise DataError(f"{flag} {str(path)!r} {why}; pass the path of a text file, .zip or .gz")
    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if not n.endswith("/")]
                name = path.stem if path.stem in names else names[0] if len(names) == 1 else None
                if name is None:
                    raise DataError(f"{str(path)!r} holds {len(names)} files and none named {path.stem!r}")
                if archive.getinfo(name).file_size > MAX_INFLATED:  # what the archive says, before inflating
                    raise _too_large(path)
                with archive.open(name) as member:  # checks the CRC (BadZipFile) once read to the end
                    return _inflate(member, path)  # and the true size, whatever the header claimed
        if path.suffix == ".gz":
            with gzip.open(path) as stream:
                return _inflate(stream, path)
        if path.is_file():
            if (size := path.stat().st_size) * 2 > (memory := memory_bytes()):  # read whole, then copied as ids
                raise DataError(f"{flag} {str(path)!r} holds {size / 1e9:,.1f} GB, held twice (bytes, ids): more than "
                                f"this machine's memory of {memory / 1e9:,.1f} GB; pass a part of it")  # fmt: skip
            return path.read_bytes()
        with open(path, "rb") as stream:  # a device or a pipe: no size to check first, and maybe no end
            data = stream.read(MAX_INFLATED + 1)
        if len(data) > MAX_INFLATED:
            raise DataError(f"{flag} {str(path)!r} is not a regular file and gave more than {MAX_INFLATED:,} bytes "
                            "without ending (a device such as /dev/zero?); pass a text file")  # fmt: skip
        return data
    except (zipfile.BadZipFile, gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise DataError(
            f"{str(path)!r} is truncated or corrupt ({type(e).__name__}: {e}); delete it and download it again"
        ) from e
    except PermissionError as e:
        raise DataError(f"{flag} {str(path)!r} cannot be read ({e.strerror}); check its permissions") from e
    except OSError as e:
        e.filename = e.filename or str(path)  # a failed read names no file: the error path names its flag
        raise


LONGEST = 120  # characters of one value quoted in a message: a longer one shows its start and its length


def refuse_output(out: str | os.PathLike, flag: str, example: str, inputs=()) -> None:
    """A file a command is to write, checked before any work: never a folder, nor one of the command's ``inputs``
    (``(flag, path)`` pairs, a None path skipped), which writing it would lose. ``example``: a file name to pass.
    A name ending in "/" is a folder too, made or not: the file would take the folder's name."""
    if os.path.isdir(out) or str(out).endswith("/"):
        raise ValueError(f"{flag} {str(out)!r} is a folder; pass a file name, e.g. {flag} {Path(out) / example}")
    same = [flag for flag, path in inputs if path and os.path.exists(path) and os.path.exists(out)
            and os.path.samefile(out, path)]  # fmt: skip
    if same:
        raise ValueError(f"{flag} {str(out)!r} is a file this command reads ({same[0]}); pass another name, e.g. "
                         f"{flag} {example}")  # fmt: skip


FIXES = {  # a folder was to be made or entered where a file is; a disk that is full or read-only
    errno.EEXIST: "a file of that name stands where a folder is to be made; pass another path",
    errno.ENOTDIR: "a part of the path is a file, not a folder; pass another path",
    errno.ENOSPC: "free space on that disk, or pass a path on another one",
    errno.EDQUOT: "free space within this user's quota there, or pass a path on another disk",
    errno.EIO: "check that disk (full, or failing), or pass a path on another one",
    errno.EROFS: "that disk is mounted read-only; pass a path on a writable one",
}


def flag_of(path: str, argv: list[str]) -> str | None:
    """The flags whose value is ``path``, else those that hold it or a folder above it."""
    pairs = [arg.partition("=")[::2] if arg.startswith("--") else (argv[i - 1] if i else "", arg)
             for i, arg in enumerate(argv)]  # fmt: skip
    given = [(flag, value, os.path.abspath(value)) for flag, value in pairs if flag.startswith("--") and value]
    exact = [flag for flag, value, full in given if path in (value, full)]  # a path as given, or made absolute
    holds = [flag for flag, value, full in given
             if path in value or any(path.startswith(v.rstrip("/") + "/") for v in (value, full))]  # fmt: skip
    return " and ".join(dict.fromkeys(exact or holds)) or None


def path_refused(e: OSError, argv: list[str]) -> str | None:
    """The system's refusal of a path (none there, a file where a folder is to be made, a full disk) as one line:
    the flags that gave the path (``argv``: the command's arguments), the path, the system's reason, a fix. None:
    the error names no path and is no refusal of a disk."""
    if e.errno is None or not (e.filename or e.errno in FIXES):
        return None
    path = str(e.filename2 or e.filename or "")  # a move's target: a temporary file's name is no one's
    flag = flag_of(path, argv) if path else None
    fix = FIXES.get(e.errno, "pass a path that exists and this user may read and write, or create it")
    named = f"{flag + ' ' if flag else ''}{shortened(path)!r}: " if path else ""  # a write's error names none
    return f"{named}{e.strerror or type(e).__name__}; {fix}"


def shortened(value: str) -> str:
    """A value as a message quotes it: whole up to :data:`LONGEST` characters, else its first 60 and its length."""
    return value if len(value) <= LONGEST else f"{value[:60]}... ({len(value):,} characters)"


def printable(text: str) -> str:
    """Text as a terminal or a font shows it: each character neither draws (a control character) as its escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def download(url: str, dest: Path, what: str, manual_hint: str, sha256: str | None = None) -> Path:
    """Fetch url to dest atomically: a broken transfer, or one whose SHA-256 is not ``sha256``, leaves no file
    (nor a folder made for it), and a killed download's partial files are removed first."""
    made = not dest.parent.exists()
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in unfinished(dest.parent, dest.name):
        stale.unlink(missing_ok=True)
    shown_url = shortened(url)
    print(f"downloading {what} from {shown_url} to {dest}", file=sys.stderr, flush=True)  # stdout: output only
    digest = hashlib.sha256()
    try:
        with written_whole(dest) as tmp, open(tmp, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
            if sha256 is not None and digest.hexdigest() != sha256:
                raise DataError(
                    f"the download from {shown_url} is not {what}: its SHA-256 is {digest.hexdigest()}, not "
                    f"{sha256}; removed it. {manual_hint}"
                )
    except DataError:
        raise
    except (OSError, ValueError) as e:  # ValueError: an address urllib cannot parse (unknown scheme, bad host)
        raise DataError(f"could not download {what} from {shown_url} ({e}). {manual_hint}") from e
    finally:
        if made and not dest.exists() and not any(dest.parent.iterdir()):
            dest.parent.rmdir()
    return dest

"""Reading and fetching data files, with errors that say what to do."""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
import urllib.request
import zipfile
import zlib
from pathlib import Path


class DataError(ValueError):
    """A data file is missing, unreadable, corrupt or too small; the message says how to fix it."""


def predicting(datamodule) -> bool:
    """Whether the datamodule serves ``predict``, which needs a checkpoint and predict_path, not the dataset."""
    trainer = datamodule.trainer
    return trainer is not None and trainer.state.fn == "predict"


def read_bytes(path: str | os.PathLike) -> bytes:
    """The contents of a raw file, a one-member ``.zip`` (the member named like the archive if there are
    several) or a ``.gz``, checked against the archive's CRC."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"data.path {str(path)!r} does not exist; pass the path of a text file, .zip or .gz")
    if path.is_dir():
        raise DataError(f"data.path {str(path)!r} is a directory; pass the path of a text file, .zip or .gz")
    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if not n.endswith("/")]
                name = path.stem if path.stem in names else names[0] if len(names) == 1 else None
                if name is None:
                    raise DataError(f"{str(path)!r} holds {len(names)} files and none named {path.stem!r}")
                return archive.read(name)  # raises BadZipFile on a CRC mismatch
        if path.suffix == ".gz":
            return gzip.decompress(path.read_bytes())
        return path.read_bytes()
    except (zipfile.BadZipFile, gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise DataError(
            f"{str(path)!r} is truncated or corrupt ({type(e).__name__}: {e}); delete it and download it again"
        ) from e
    except PermissionError as e:
        raise DataError(f"data.path {str(path)!r} cannot be read ({e.strerror}); check its permissions") from e


def download(url: str, dest: Path, what: str, manual_hint: str) -> Path:
    """Fetch url to dest atomically (a broken transfer never leaves a partial file at dest)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    print(f"downloading {what} from {url} to {dest}", flush=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            shutil.copyfileobj(response, out, length=1 << 20)
        os.replace(tmp, dest)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise DataError(f"could not download {what} from {url} ({e}). {manual_hint}") from e
    return dest

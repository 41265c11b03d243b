"""Texts that :class:`~.text.TextDataModule` reads when no ``data.path`` is given: where each downloaded one
lives, its SHA-256 (a download that does not match is refused), and the file it is saved as under
``data.data_dir``; and one every user has with no network, the running Python's standard library
(:func:`assemble_python_stdlib`), source code whose structure is long-range."""

from __future__ import annotations

import hashlib
import json
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_whole


@dataclass(frozen=True)
class Source:
    url: str
    sha256: str
    file: str
    about: str


SOURCES = {
    "enwik8": Source(
        url="http://mattmahoney.net/dc/enwik8.zip",
        sha256="547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc",  # 36,445,475 bytes
        file="enwik8.zip",
        about="enwik8, the first 10^8 bytes of the English Wikipedia dump of 2006-03-03 (the tutorial's data)",
    ),
    "tinyshakespeare": Source(
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",  # 1,115,394 bytes
        file="tinyshakespeare.txt",
        about="Tiny Shakespeare, 1 MB of plays (char-rnn's and nanoGPT's shakespeare_char)",
    ),
}
ENWIK8_BYTES = 100_000_000  # enwik8 unpacked: split 90M / 5M / 5M

STDLIB_LEFT_OUT = {"test", "tests", "idle_test", "site-packages", "dist-packages", "_vendor", "_bundled"}
"""Folders of the standard library whose ``.py`` files are not in the corpus: tests, and third-party code."""


def python_stdlib_file() -> str:
    """The corpus's file name: it names the Python whose library it is."""
    return f"python-stdlib-{platform.python_version()}.txt"


def assemble_python_stdlib(dest: Path) -> dict:
    """The ``.py`` sources of the running Python's standard library (no tests, no vendored code), sorted, each
    after a line ``# path``, written to ``dest``; a record of them (version, files, bytes, SHA-256) is written
    beside it as ``dest.json`` and returned."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p.relative_to(root)
        for p in root.rglob("*.py")
        if not STDLIB_LEFT_OUT & set(p.relative_to(root).parts[:-1]) and not p.name.startswith("test_")
    )
    text = b"".join(f"# {path.as_posix()}\n".encode() + (root / path).read_bytes() + b"\n" for path in files)
    record = {"python": platform.python_version(), "files": len(files), "bytes": len(text),
              "sha256": hashlib.sha256(text).hexdigest()}  # fmt: skip
    dest.parent.mkdir(parents=True, exist_ok=True)
    for path, data in ((dest.with_suffix(".json"), json.dumps(record, indent=1).encode()), (dest, text)):
        write_whole(path, data)
    return record

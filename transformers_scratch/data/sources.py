"""Texts that :class:`~.text.TextDataModule` downloads when no ``data.path`` is given: where each lives, its
SHA-256 (a download that does not match is refused), and the file it is saved as under ``data.data_dir``."""

from __future__ import annotations

from dataclasses import dataclass


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

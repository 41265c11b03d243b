"""Vocabularies: bytes for the character model, words for the classifier. A model is usable only with the ids it
was trained on, so the vocabulary travels in every checkpoint (the data's ``state_dict``), read back by
:func:`checkpoint_vocab`."""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from typing import NoReturn

import torch
from torch import Tensor

from . import ids
from .files import DataError, read_text, shortened


def byte_ids(data: bytes) -> Tensor:
    """bytes -> uint8 ids, one a byte value (torch's frombuffer refuses no bytes)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)


class ByteVocab:
    """Token ids for bytes: all 256 values (the tutorial's enwik8 model), or only the byte values a file
    uses, in sorted order (nanoGPT's shakespeare_char: 65 characters)."""

    unit = "byte"  # what an id stands for, as the metrics count

    def __init__(self, symbols: bytes | None = None) -> None:
        self.symbols = symbols
        self.table = torch.full((256,), -1, dtype=torch.long)  # byte value -> id, -1 if absent
        present = list(symbols) if symbols is not None else list(range(256))
        self.table[present] = torch.arange(len(present))
        self.alphabet = torch.tensor(present, dtype=torch.uint8)  # id -> byte value

    @property
    def size(self) -> int:
        return len(self.alphabet)

    def lookup(self, data: bytes) -> Tensor:
        """bytes -> long ids, -1 where a byte is not in the vocabulary."""
        return self.table[byte_ids(data).long()]

    def encode(self, data: bytes) -> Tensor:
        """bytes -> uint8 ids; every byte must be in the vocabulary."""
        if self.symbols is None:
            return byte_ids(data)
        ids = self.lookup(data)
        if (ids < 0).any():
            raise DataError(
                f"the data has bytes outside the vocabulary of {self.size}; score files of the kind "
                "the model was trained on"
            )
        return ids.to(torch.uint8)

    def encode_text(self, text: str, what: str = "prompt") -> Tensor:
        """A prompt (or another ``what``) -> long ids (1, t), or an error naming the first character the model has
        never seen."""
        if not text:
            raise ValueError("empty prompt; give at least one character, e.g. --prompt 'The '")
        ids = self.lookup(text.encode("utf-8", "surrogateescape"))  # a C locale's argument: its bytes as given
        if (ids < 0).any():
            bad = next(c for c in text if (self.table[list(c.encode("utf-8", "surrogateescape"))] < 0).any())
            known = bytes(self.alphabet.tolist()).decode("utf-8", errors="replace")
            raise ValueError(
                f"{what} character {bad!r} is not in the model's vocabulary of {self.size} characters; "
                f"use only these: {known!r}"
            )
        return ids[None]  # (1, t)

    def decode(self, ids: Tensor) -> str:
        return bytes(self.alphabet[ids.long().cpu()].tolist()).decode("utf-8", errors="replace")


class WordVocab:
    """Word -> id: 0 is padding, 1 is unknown, then words from most to least frequent."""

    PAD, UNK = ids.PAD, ids.UNK

    def __init__(self, words: list[str]) -> None:
        self.itos = ["<pad>", "<unk>", *words]
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    @classmethod
    def build(cls, token_lists, size: int) -> WordVocab:
        counts = Counter(tok for tokens in token_lists for tok in tokens)
        return cls([w for w, _ in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))[:size]])

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.stoi.get(tok, self.UNK) for tok in tokens]

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def size(self) -> int:
        return len(self.itos)


class TokenizerVocab:
    """Sub-word ids from a Hugging Face tokenizer (``tokenizer.json``, read by the ``tokenizers`` library, an
    optional install): GPT-2's byte-level BPE, Llama's, or one trained on the data. The JSON travels in every
    checkpoint, so that sample and predict decode with it without the file."""

    unit = "token"
    MAX_BYTES = 50_000_000  # the largest published tokenizer.json files are a few tens of MB
    MAX_IDS = 2**24  # ids a tokenizer may give: the largest published vocabularies hold a few hundred thousand

    def __init__(self, json_text: str, source: str = "the checkpoint's tokenizer") -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise DataError("a tokenizer needs the tokenizers library: pip install -e '.[hf]'") from None
        self.source = source  # what its refusals name
        self.given = source.startswith("data.")  # the run's data.tokenizer named it; else a checkpoint holds it
        with self.native("read"):
            self.tokenizer = Tokenizer.from_str(json_text)
            vocab = self.tokenizer.get_vocab(with_added_tokens=True)
            counted = self.tokenizer.get_vocab_size(with_added_tokens=True)
        if not vocab:
            self.refuse("holds no tokens", "pass a tokenizer.json with a vocabulary")
        # the embedding needs a row for every id the tokenizer gives, and a file's ids may leave gaps
        token, top = max(vocab.items(), key=lambda item: item[1], default=("", -1))
        if top >= self.MAX_IDS:  # ids are unsigned
            self.refuse(f"gives {shortened(repr(token))} the id {top:,}, past {self.MAX_IDS:,}",
                        "pass a tokenizer.json that tokenizers wrote")  # fmt: skip
        self.size = max(counted, top + 1)
        self.json = json_text

    def refuse(self, problem: str, fix: str) -> NoReturn:
        """A tokenizer.json the run's data.tokenizer named is refused with ``fix``; a checkpoint's own is damaged,
        which the checkpoint's reader names."""
        if self.given:
            raise DataError(f"{self.source} {problem}; {fix}")
        raise DamagedVocab(f"{self.source} {problem}")

    @contextlib.contextmanager
    def native(self, doing: str):
        """Around a call into tokenizers' Rust code: its refusal of a broken tokenizer.json (a plain Exception, or
        a panic: a BaseException) becomes one DataError naming it, its own report kept off the terminal."""
        sys.stderr.flush()
        saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        try:
            yield
        except BaseException as e:
            if type(e).__name__ != "PanicException" and type(e) is not Exception:
                raise
            reason = " ".join(str(e).split())[:120]
            if doing != "encode":
                what = "is not a tokenizer.json" if doing == "read" else f"failed to {doing} text"
                self.refuse(f"{what} ({reason})", "pass one that tokenizers wrote")
            # a word it has no id for, and no unknown token to give
            fix = "pass one with an unknown token, or a byte-level one" if self.given else "give only words it knows"
            raise DataError(f"{self.source} failed to encode text ({reason}); {fix}") from None
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)

    @classmethod
    def from_file(cls, path: str) -> TokenizerVocab:
        """``path``: a tokenizer.json, or a folder (a Hugging Face model's) that holds one, or a hub name."""
        from ..model.hf import local_folder

        try:
            folder = local_folder(path)
        except ValueError as e:  # a hub name that is no folder here: which setting named it
            raise DataError(f"data.tokenizer {e}") from None
        file = folder / "tokenizer.json" if folder.is_dir() else folder
        if not file.is_file():
            raise DataError(f"data.tokenizer {str(path)!r} is not a tokenizer.json or a folder holding one; pass "
                            "one, or a Hugging Face model's folder that holds one")  # fmt: skip
        where = f"data.tokenizer {str(file)!r}"
        return cls(read_text(file, where, cls.MAX_BYTES, "a tokenizer.json"), where)

    def encode(self, data: bytes) -> Tensor:
        """UTF-8 text -> long ids (a byte that is not UTF-8 is replaced, as the decoder would show it)."""
        text = data.decode("utf-8", errors="replace")
        with self.native("encode"):
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if ids and (top := max(ids)) >= self.size:  # the embedding has no row for it
            raise DataError(f"{self.source} gave the id {top:,}, past its vocabulary of {self.size:,}; pass a "
                            "tokenizer.json that tokenizers wrote")  # fmt: skip
        return torch.tensor(ids, dtype=torch.long)

    def encode_text(self, text: str, what: str = "prompt") -> Tensor:
        try:
            return self.encode(text.encode("utf-8", "surrogateescape"))[None]  # (1, t)
        except DataError as e:  # which text it could not read
            raise DataError(f"the {what}: {e}") from None

    def decode(self, ids: Tensor) -> str:
        with self.native("decode"):
            return self.tokenizer.decode(ids.long().cpu().tolist(), skip_special_tokens=False)


Vocab = ByteVocab | WordVocab | TokenizerVocab


def vocab_state(vocab: Vocab) -> dict:
    """What a checkpoint stores of a vocabulary (the format checkpoints have always had)."""
    if isinstance(vocab, ByteVocab):
        return {"vocab_symbols": vocab.symbols}  # None: all 256 byte values
    if isinstance(vocab, TokenizerVocab):
        return {"tokenizer_json": vocab.json}
    return {"vocab": vocab.itos[2:]}  # the words after <pad> and <unk>


class DamagedVocab(DataError):
    """A vocabulary read from a file that is not one: its ids would not mean one symbol each."""


def distinct(symbols) -> bool:
    """Whether ``symbols`` can be a vocabulary: distinct byte values (bytes, at least one), or distinct words."""
    if isinstance(symbols, bytes):
        return 0 < len(set(symbols)) == len(symbols)
    return isinstance(symbols, list) and all(isinstance(w, str) for w in symbols) and len(set(symbols)) == len(symbols)


def vocab_from_state(state: dict) -> Vocab | None:
    """The vocabulary a :func:`vocab_state` dict describes, or None if it describes none; a damaged one (symbols
    repeated, or of another kind) is refused."""
    if "vocab_symbols" in state:
        if state["vocab_symbols"] is not None and not distinct(state["vocab_symbols"]):
            raise DamagedVocab("its vocabulary of bytes is no list of distinct byte values")
        return ByteVocab(state["vocab_symbols"])
    if isinstance(state.get("vocab"), list):
        if not distinct(state["vocab"]):
            raise DamagedVocab("its vocabulary of words is no list of distinct words")
        return WordVocab(state["vocab"])
    if isinstance(state.get("tokenizer_json"), str):
        return TokenizerVocab(state["tokenizer_json"])
    return None


def checkpoint_vocab(checkpoint: dict) -> Vocab | None:
    """The vocabulary in a checkpoint, found by content: Lightning files a data module's state under the
    module's class name, and a renamed class must not lose it."""
    for key, value in checkpoint.items():
        if isinstance(value, dict) and key not in ("state_dict", "hyper_parameters", "callbacks", "loops"):
            vocab = vocab_from_state(value)
            if vocab is not None:
                return vocab
    return None

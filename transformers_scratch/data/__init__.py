"""LightningDataModules: IMDb reviews (experiment 1) and byte-level text such as enwik8 (experiment 2)."""

from .enwik8 import Enwik8DataModule, TextDataModule
from .files import DataError
from .imdb import IMDbDataModule, IMDbMLMDataModule
from .transduction import TransductionDataModule
from .vocab import ByteVocab, WordVocab, checkpoint_vocab

__all__ = [
    "ByteVocab",
    "DataError",
    "Enwik8DataModule",
    "IMDbDataModule",
    "IMDbMLMDataModule",
    "TextDataModule",
    "TransductionDataModule",
    "WordVocab",
    "checkpoint_vocab",
]

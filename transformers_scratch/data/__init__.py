"""LightningDataModules: IMDb reviews (experiment 1) and byte-level text such as enwik8 (experiment 2)."""

from .files import DataError
from .ids import IGNORE_INDEX
from .imdb import IMDbDataModule, IMDbMLMDataModule
from .text import OrderedTextDataModule, TextDataModule
from .transduction import TransductionDataModule
from .vocab import ByteVocab, WordVocab, checkpoint_vocab

__all__ = ["ByteVocab", "DataError", "IGNORE_INDEX", "IMDbDataModule", "IMDbMLMDataModule", "OrderedTextDataModule",
           "TextDataModule", "TransductionDataModule", "WordVocab", "checkpoint_vocab"]  # fmt: skip

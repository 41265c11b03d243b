"""LightningDataModules: IMDb reviews (experiment 1) and byte-level text such as enwik8 (experiment 2)."""

from .enwik8 import ByteVocab, Enwik8DataModule
from .files import DataError
from .imdb import IMDbDataModule, WordVocab

__all__ = ["ByteVocab", "DataError", "Enwik8DataModule", "IMDbDataModule", "WordVocab"]

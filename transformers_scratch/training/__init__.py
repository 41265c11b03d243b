"""Training with Lightning: the LightningModules (loss, metrics, logging), the optimizer and schedule, the
callbacks, the loggers, and reading checkpoints. A config names a module as
``transformers_scratch.training.LitCharLM``."""

from .modules import LitCharLM, LitClassifier, LitMaskedLM, LitSeq2Seq, LitTransformer, LitXL

__all__ = ["LitCharLM", "LitClassifier", "LitMaskedLM", "LitSeq2Seq", "LitTransformer", "LitXL"]

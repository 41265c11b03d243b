"""transformers-scratch: the transformer built from first principles, then trained for real.

Read bottom-up: attention.py -> blocks.py -> models.py. Nothing in this package imports Lightning;
training lives in transformers_scratch.lit and the data modules in transformers_scratch.data.
"""

from .attention import (
    ATTENTION,
    KVCache,
    MultiHeadAttention,
    basic_self_attention,
    causal_mask,
    fused_attention,
    reference_attention,
)
from .blocks import Embedding, FeedForward, LearnedPositions, SinusoidalPositions, Stack, TransformerBlock
from .config import ClassifierConfig, EncoderDecoderConfig, LMConfig, TransformerConfig
from .models import CausalLM, EncoderDecoder, SequenceClassifier, count_parameters, nucleus, sample_next
from .pretrained import from_pretrained, save_pretrained

__all__ = [
    "ATTENTION",
    "CausalLM",
    "ClassifierConfig",
    "Embedding",
    "EncoderDecoder",
    "EncoderDecoderConfig",
    "FeedForward",
    "KVCache",
    "LMConfig",
    "LearnedPositions",
    "MultiHeadAttention",
    "SequenceClassifier",
    "SinusoidalPositions",
    "Stack",
    "TransformerBlock",
    "TransformerConfig",
    "basic_self_attention",
    "causal_mask",
    "count_parameters",
    "fused_attention",
    "reference_attention",
    "from_pretrained",
    "nucleus",
    "sample_next",
    "save_pretrained",
]

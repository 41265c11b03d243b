"""The transformer in plain PyTorch, read bottom-up:

    config.py      the typed sizes and choices of every model
    positions.py   learned and sinusoidal position vectors, RoPE and ALiBi
    cache.py       the key/value cache of decoding
    attention.py   self-attention from scratch, the kernels, MultiHeadAttention
    blocks.py      embeddings, feed-forward, the block (pre- and post-norm), the stack
    sparse.py      sparse attention patterns (strided, fixed) and their blocked and FlexAttention kernels
    generation.py  sampling, cached decoding loops, the CUDA-graph step
    models.py      the classifier, the masked LM, the causal LM, the encoder-decoder
    xl.py          Transformer-XL: relative attention over a memory of the segments before
    pretrained.py  the safetensors export and import
    hf.py          Hugging Face GPT-2, BERT and Llama-family weights in and out

Each file imports only the files above it in this list, and nothing here imports Lightning, the data, training or
the command line (tests/test_layers.py holds both).
"""

from .attention import (
    ATTENTION,
    MultiHeadAttention,
    basic_self_attention,
    causal_mask,
    fused_attention,
    reference_attention,
)
from .blocks import Embedding, FeedForward, Stack, TransformerBlock
from .cache import KVCache
from .config import ClassifierConfig, EncoderDecoderConfig, LMConfig, MaskedLMConfig, TransformerConfig, XLConfig
from .generation import nucleus, sample_next
from .hf import from_hf, save_hf
from .models import CausalLM, EncoderDecoder, MaskedLM, SequenceClassifier, count_parameters
from .positions import LearnedPositions, SinusoidalPositions
from .pretrained import from_pretrained, save_pretrained
from .xl import TransformerXL, from_authors

__all__ = ["ATTENTION", "CausalLM", "ClassifierConfig", "Embedding", "EncoderDecoder", "EncoderDecoderConfig",
           "FeedForward", "KVCache", "LMConfig", "LearnedPositions", "MaskedLM", "MaskedLMConfig",
           "MultiHeadAttention", "SequenceClassifier", "SinusoidalPositions", "Stack", "TransformerBlock",
           "TransformerConfig", "TransformerXL", "XLConfig", "basic_self_attention", "causal_mask",
           "count_parameters", "from_hf", "from_pretrained", "from_authors", "fused_attention", "nucleus",
           "reference_attention", "sample_next", "save_hf", "save_pretrained"]  # fmt: skip

"""The special ids that data, training and the models agree on, defined once."""

IGNORE_INDEX = -100
"""A target id that the loss and the metrics skip (PyTorch's cross_entropy default): padding in a target, a byte
that another window scores, a position that masked-token pretraining did not choose."""
PAD = 0
"""Padding in a batch of word or character sequences (also the encoder-decoder's ``EncoderDecoder.PAD``)."""
UNK = 1
"""A word outside the vocabulary."""

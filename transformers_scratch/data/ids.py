"""The special ids that data, training and the models agree on, defined once."""

IGNORE_INDEX = -100
"""A target id that the loss and the metrics skip (PyTorch's cross_entropy default): padding in a target, a byte
that another window scores, a position that masked-token pretraining did not choose."""
PAD = 0
"""Padding in a batch of word or character sequences (also the encoder-decoder's ``EncoderDecoder.PAD``)."""
UNK = 1
"""A word outside the vocabulary."""
MAX_COUNT = 2**24
"""A count a data setting gives (a batch's rows, a window's ids, batches per epoch), at most: 16,777,216, past
anything one machine trains on, and far inside what an index holds."""

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


def check_counts(**counts: object) -> None:
    """Refuse a data count that is not an integer in [1, :data:`MAX_COUNT`] (a ``null`` from a config too),
    naming its setting."""
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise ValueError(f"data.{name}={value!r} must be a positive integer, at most {MAX_COUNT:,}")

"""enwik8, the tutorial's experiment 2: the first 10^8 bytes of the English Wikipedia dump of 2006-03-03,
split 90M / 5M / 5M as in the tutorial and the literature. :class:`~.text.TextDataModule` downloads it when no
``data.path`` is given."""

URL = "http://mattmahoney.net/dc/enwik8.zip"
BYTES = 100_000_000
SHA256 = "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc"  # enwik8.zip, 36,445,475 bytes

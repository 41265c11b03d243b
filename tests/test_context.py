"""The loss-by-position instrument (``cli.py context``): it scores the bytes test scores, kept apart by where each
stands in its window."""

import torch
import torch.nn.functional as F
from torch import nn

from transformers_scratch.data.text import StridedWindows
from transformers_scratch.model.config import LMConfig
from transformers_scratch.training.inference import log_bins, loss_by_position
from transformers_scratch.training.modules import LitCharLM


class LastK(nn.Module):
    """A model that sees only the last k bytes: it predicts byte x[j + 1] as x[j + 1 - k] once the window holds k
    bytes, and knows nothing before (uniform): on a text of period k it is right from position k on."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def logits_of(self, batch, training: bool):
        x, y = batch
        logits = torch.zeros(*x.shape, 256)
        seen = x[:, : x.size(1) - self.k + 1]  # x[j + 1 - k] for j from k - 1 on
        logits[:, self.k - 1 :] = 30.0 * F.one_hot(seen, 256).float()
        return logits, y


def windows(data: torch.Tensor, context: int, batch: int = 4):
    dataset = StridedWindows(data, context)
    return [tuple(torch.stack(t) for t in zip(*[dataset[i] for i in range(s, min(s + batch, len(dataset)))],
                                               strict=True)) for s in range(0, len(dataset), batch)]  # fmt: skip


def test_a_model_that_sees_only_the_last_k_bytes_is_flat_past_k():
    k, context = 5, 32
    data = torch.arange(2_000) % k  # period k: the last k bytes decide the next
    bits, counts = loss_by_position(LastK(k), windows(data, context))
    per_position = bits / counts
    uniform = torch.full((k - 1,), 8.0, dtype=torch.float64)  # 8 bits a byte, knowing nothing
    assert torch.allclose(per_position[: k - 1], uniform, atol=1e-4)
    assert per_position[k - 1 :].max() < 1e-6  # flat past k
    assert int(counts.sum()) == len(data) - 1  # every byte after the first scored once, as test scores them


def test_a_causal_models_loss_at_a_position_does_not_depend_on_later_bytes():
    torch.manual_seed(0)
    module = LitCharLM(LMConfig(vocab_size=256, context=16, emb=32, heads=4, depth=2))
    data = torch.randint(0, 256, (16 * 20 + 1,))
    later = data.clone()
    for start in range(0, len(data) - 1, 16):  # in every window, the bytes from its 11th on changed (not the next's)
        later[start + 10 : start + 16] = torch.randint(0, 256, (6,))
    before, _ = loss_by_position(module, windows(data, 16))
    after, _ = loss_by_position(module, windows(later, 16))
    assert torch.allclose(before[:9], after[:9], atol=1e-5)  # positions 1..9 predict bytes up to position 10
    assert not torch.allclose(before[10:], after[10:])


def test_its_mean_is_tests_bits_per_byte():
    """Over every position, the count-weighted mean is the figure LitCharLM's test step computes."""
    torch.manual_seed(1)
    module = LitCharLM(LMConfig(vocab_size=256, context=16, emb=32, heads=4, depth=2)).eval()
    data = torch.randint(0, 256, (16 * 7 + 5,))  # a tail window that scores only its new bytes
    batches = windows(data, 16)
    bits, counts = loss_by_position(module, batches)
    total = [module.scored_bits(batch) for batch in batches]
    expected = sum(float(b) for b, _ in total) / sum(int(c) for _, c in total)
    assert abs(float(bits.sum() / counts.sum()) - expected) < 1e-6


def test_the_bins_cover_every_position_once_on_a_log_scale():
    for length, bins in ((64, 8), (256, 16), (1, 4), (2, 16), (4096, 12)):
        ranges = log_bins(length, bins)
        covered = [p for lo, hi in ranges for p in range(lo, hi + 1)]
        assert covered == list(range(1, length + 1)) and len(ranges) <= bins

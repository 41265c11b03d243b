"""The data behind each picture: attention weights are the model's own, and the curves are the log's."""

import csv

import pytest
import torch
from torch.testing import assert_close

from transformers_scratch.model.attention import recording, reference_attention
from transformers_scratch.model.config import ClassifierConfig, LMConfig
from transformers_scratch.model.models import CausalLM, SequenceClassifier
from transformers_scratch.training.pictures import (
    attention_maps,
    draw_attention,
    draw_context,
    draw_curves,
    learning_curves,
)

pytest.importorskip("matplotlib")


def classifier(pool="mean", positions="learned"):
    torch.manual_seed(0)
    cfg = ClassifierConfig(vocab_size=50, context=12, emb=16, heads=4, depth=3, dropout=0.3, pool=pool,
                           positions=positions)  # fmt: skip
    return SequenceClassifier(cfg)


def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, 50, (3, 10), generator=g)
    mask = torch.arange(10)[None] < torch.tensor([10, 6, 3])[:, None]  # (3, 10): rows 1 and 2 padded
    return ids.masked_fill(~mask, 0), mask


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_classifier_attention_rows_sum_to_one_and_padding_gets_no_weight(pool):
    model = classifier(pool)
    ids, mask = batch()
    weights = attention_maps(model, ids, mask)  # (l, b, h, t, t)
    prefix = int(pool == "cls")
    assert weights.shape == (3, 3, 4, 10 + prefix, 10 + prefix)
    assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    keys = torch.cat([torch.ones(3, prefix, dtype=torch.bool), mask], dim=1)  # [CLS] is a real key
    assert (weights * ~keys[None, :, None, None, :]).abs().max() == 0  # no weight on a padded key
    assert model.training  # attention_maps leaves the model in the mode it found it


def test_the_recorded_weights_are_those_the_forward_pass_uses():
    """Recording runs the reference kernel on the model's own queries and keys: the output is the fused
    kernel's, and the first layer's weights are softmax(q k^T / sqrt(s)) over the real keys."""
    model = classifier().eval()
    ids, mask = batch()
    with torch.no_grad():
        plain = model(ids, mask)
        with recording(block.attn for block in model.stack.blocks) as kept:
            recorded = model(ids, mask)
    assert_close(recorded, plain, atol=1e-5, rtol=1e-5)
    assert [len(k) for k in kept] == [1, 1, 1]
    block = model.stack.blocks[0]  # pre-norm: attention reads norm1 of the embeddings
    q, k, _ = block.attn.qkv(block.norm1(model.embed(ids))).split(16, dim=-1)
    q, k = (z.view(3, 10, 4, 4).transpose(1, 2) for z in (q, k))  # (b, h, t, s)
    scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~mask[:, None, None, :], float("-inf"))
    assert_close(kept[0][0], scores.softmax(-1))


def test_a_causal_model_puts_no_weight_above_the_diagonal():
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=20, context=16, emb=16, heads=2, depth=2, positions="alibi"))
    ids = torch.randint(20, (2, 9))
    weights = attention_maps(model, ids)  # (l, b, h, t, t)
    above = torch.ones(9, 9, dtype=torch.bool).triu(1)
    assert weights[..., above].abs().max() == 0
    assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    assert weights[..., 0, 0].eq(1).all()  # the first character can only look at itself


def test_the_kernel_keeps_zero_weights_for_a_query_with_nothing_to_see():
    q = k = v = torch.randn(1, 1, 3, 4)
    kept = []
    reference_attention(q, k, v, mask=torch.zeros(1, 1, 3, 3, dtype=torch.bool), keep=kept)
    assert kept[0].eq(0).all()


def test_the_attention_grid_shows_each_layer_and_head_with_the_tokens_on_its_axes(tmp_path):
    weights = torch.rand(2, 3, 4, 4).softmax(-1)  # (l, h, t, t)
    tokens = ["the", "film", "was", "great"]
    fig = draw_attention(weights, tokens, tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 0
    assert len(fig.axes) == 6 + 1  # the panels, then the colour bar they share
    assert fig.axes[-1].get_ylabel() == "attention weight"
    for n, ax in enumerate(fig.axes[:6]):  # row-major: layer n // 3, head n % 3
        assert_close(torch.as_tensor(ax.images[0].get_array().data), weights[n // 3, n % 3])
    bottom_left = fig.axes[3]
    assert [t.get_text() for t in bottom_left.get_xticklabels()] == tokens
    assert [t.get_text() for t in bottom_left.get_yticklabels()] == tokens


def write_metrics(path):
    rows = [
        {"epoch": "", "lr-AdamW/pg1": "1e-4", "lr-AdamW/pg2": "1e-4", "step": "9"},
        {"epoch": "0", "step": "9", "train/loss": "0.70", "train/acc": "0.5"},
        {"epoch": "", "lr-AdamW/pg1": "2e-4", "lr-AdamW/pg2": "2e-4", "step": "19"},
        {"epoch": "0", "step": "19", "train/loss": "0.60", "train/acc": "0.6"},
        {"epoch": "0", "step": "19", "val/loss": "0.55", "val/acc": "0.71"},
        {"epoch": "1", "step": "29", "train/loss": "nan"},
    ]
    columns = ["epoch", "lr-AdamW/pg1", "lr-AdamW/pg2", "step", "train/acc", "train/loss", "val/acc", "val/loss"]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_log_saved_by_a_spreadsheet_with_a_byte_order_mark_reads_the_same(tmp_path):
    (tmp_path / "metrics.csv").write_text("step,train/loss\n9,0.7\n19,0.6\n")
    (tmp_path / "saved.csv").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "metrics.csv").read_bytes())
    assert learning_curves(tmp_path / "saved.csv") == learning_curves(tmp_path / "metrics.csv") != {}


def test_learning_curves_have_one_panel_per_metric_against_the_step(tmp_path):
    curves = learning_curves(write_metrics(tmp_path / "metrics.csv"))
    assert curves == {
        "train/loss": ([9, 19], [0.70, 0.60]),  # a NaN is left out
        "val/acc": ([19], [0.71]),
        "val/loss": ([19], [0.55]),
        "lr-AdamW/pg1": ([9, 19], [1e-4, 2e-4]),  # one learning rate
    }
    fig = draw_curves(curves, tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 0
    assert len(fig.axes) == len(curves)
    for ax, (name, (steps, values)) in zip(fig.axes, curves.items(), strict=True):
        assert ax.get_ylabel() == name
        line = ax.get_lines()[0]
        assert list(line.get_xdata()) == steps and list(line.get_ydata()) == values


def test_the_attention_grid_of_a_long_text_stays_readable(tmp_path):
    """A character model's 4 x 4 heads over 96 characters: the picture is capped in size, and every n-th
    position is labelled (with its index) instead of every one as an unreadable dot."""
    weights = torch.rand(4, 4, 96, 96).softmax(-1)
    tokens = [chr(97 + k % 26) for k in range(96)]
    fig = draw_attention(weights, tokens, tmp_path / "long.png")
    width, height = fig.get_size_inches()
    assert width <= 16 + 1.6 and height <= 16 + 1
    labels = [t.get_text() for t in fig.axes[12].get_xticklabels()]  # bottom row, first head
    assert 8 <= len(labels) < 96 and labels[0] == "0:a"
    position, token = labels[1].split(":")
    assert token == tokens[int(position)]


def test_a_picture_is_written_whole_in_its_names_format_and_a_full_disk_is_an_error_naming_it(tmp_path):
    curves = {"train/loss": ([1, 2], [0.7, 0.6])}
    for name, head in (("c.png", b"\x89PNG"), ("c.SVG", b"<?xml"), ("c", b"\x89PNG")):  # no ending: PNG
        draw_curves(curves, tmp_path / name)
        assert (tmp_path / name).read_bytes().startswith(head)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "c.SVG", "c.png"]  # no temporary file left
    with pytest.raises(OSError) as caught:  # matplotlib's own writer reported success on the full device
        draw_curves(curves, "/dev/full")
    assert caught.value.errno == 28 and caught.value.filename == "/dev/full"


def test_a_character_the_model_never_saw_is_named_as_the_texts_not_a_prompts():
    """``attention --text`` reads a text, not a prompt: its refusal says so (a file vocabulary of 4 characters)."""
    from transformers_scratch.data import ByteVocab
    from transformers_scratch.training.pictures import attention_input

    with pytest.raises(ValueError, match="^text character 'Z' is not in the model's vocabulary of 4 characters"):
        attention_input(ByteVocab(b" abc"), "abZ", 8)


def test_a_character_no_font_draws_is_labelled_by_its_escape():
    """A control character had no glyph (matplotlib's warning, and an empty label); whitespace has its mark."""
    from transformers_scratch.data import ByteVocab
    from transformers_scratch.training.pictures import attention_input

    _, tokens, _ = attention_input(ByteVocab(), "a\x0c \r\x01", 8)
    assert tokens == ["a", "\\x0c", "␣", "\\r", "\\x01"]


def test_a_metric_or_folder_named_with_dollars_or_control_characters_is_drawn_as_text(tmp_path):
    """A pair of "$" was matplotlib's math text: "val/$x^$" was its parse error ("x^"), naming nothing; a form
    feed, a glyph no font has (a warning, and an empty label)."""
    import warnings

    (tmp_path / "metrics.csv").write_text("step,val/$x^$,val/a\x0cb\n1,2,3\n2,3,4\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's warning of a missing glyph fails the test
        fig = draw_curves(learning_curves(tmp_path / "metrics.csv"), tmp_path / "c.png", title="runs/$a^$")
    assert [ax.get_ylabel() for ax in fig.axes] == ["val/$x^$", "val/a\\x0cb"]
    assert (tmp_path / "c.png").stat().st_size > 0


def test_a_log_axis_draws_its_numbers_and_a_path_in_the_legend_stays_its_text(tmp_path):
    """A log axis labels its ticks in math text (10^0, 10^1): they are drawn as numbers, not as their markup, while
    a checkpoint's path with a pair of "$" in the legend is drawn as the text it is."""
    fig = draw_context({"runs/$x^$/last.ckpt": ([1.0, 16.0, 256.0], [3.0, 2.0, 1.5])}, tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 0
    fig.canvas.draw()
    ticks = [t for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert ticks and all(t.get_window_extent().width < 5 * t.get_fontsize() for t in ticks)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["runs/$x^$/last.ckpt"]


def test_a_token_with_dollars_is_drawn_as_the_text_it_is(tmp_path):
    """A sub-word token "$$" or a word "$x^$" on the attention picture's axes: drawn as given, not as math text."""
    tokens = ["$$", "$x^$", "a"]
    fig = draw_attention(torch.full((1, 1, 3, 3), 1 / 3), tokens, tmp_path / "a.png")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == tokens

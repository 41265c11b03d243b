"""What a model learned, as pictures: attention maps from the model's own forward pass, and learning curves
from a run's CSV log. Each picture is drawn from data a function here returns, so tests check the data.

Shapes: l layers, b batch, h heads, t tokens (queries), u tokens (keys).
"""

from __future__ import annotations

import csv
import io
import math
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from ..atomic import write_whole
from ..data.files import printable, read_text, refuse_output
from ..model.attention import recording
from ..model.sparse import SparseAttend
from ..model.xl import TransformerXL


def attention_maps(model: nn.Module, ids: Tensor, mask: Tensor | None = None) -> Tensor:
    """The self-attention weights of every block of ``model`` (a classifier or a causal LM) for ids (b, t):
    (l, b, h, t', t'), with t' = t + 1 when a [CLS] vector leads. They come from one forward pass in eval mode
    (no dropout), through the reference kernel; ``mask`` (b, t), True for real tokens, goes to a classifier."""
    was_training, blocks = model.training, cast(Any, model).stack.blocks  # Module attributes type as Tensor | Module
    model.eval()
    try:
        with torch.no_grad(), recording(block.attn for block in blocks) as kept:
            model(ids) if mask is None else model(ids, mask)
    finally:
        model.train(was_training)
    return torch.stack([weights[0] for weights in kept]).float()  # (l, b, h, t', t')


def attention_patterns(model: nn.Module, t: int) -> Tensor | None:
    """(l, h, t', t') bool, True where each head of each block may attend under a sparse model's pattern
    (t' = t + 1 when a [CLS] vector leads); None for a dense model, whose heads may attend anywhere."""
    layers = [block.attn for block in cast(Any, model).stack.blocks]
    if not isinstance(layers[0].attend, SparseAttend):
        return None
    t += getattr(cast(Any, model).cfg, "pool", None) == "cls"
    return torch.stack([a.attend.pattern.mask(a.attend.layer, a.heads, t, causal=a.causal) for a in layers])


def xl_attention_maps(model: TransformerXL, ids: Tensor, queries: int) -> Tensor:
    """A Transformer-XL's attention weights over memory and segment: ids (1, n) are read in segments of its
    context with its memory, and the last ``queries`` of them make the pictured segment. Returns (l, 1, h, t, m + t)
    with m the memory that segment reads (at most the model's mem_len)."""
    was_training = model.training
    model.eval()
    n, t = ids.size(1), queries
    memory = None
    try:
        with torch.no_grad():
            for start in range(0, n - t, model.cfg.context):  # the text before, read as training reads it
                _, memory = model(ids[:, start : min(n - t, start + model.cfg.context)], memory)
            with recording(cast(Any, block).attn for block in model.blocks) as kept:
                model(ids[:, n - t :], memory)
    finally:
        model.train(was_training)
    return torch.stack([weights[0] for weights in kept]).float()  # (l, 1, h, t, m + t)


def _shown_token(token: str) -> str:
    """Whitespace as a visible mark, another character no font draws (a form feed) as its escape."""
    return {" ": "␣", "\n": "⏎", "\t": "⇥"}.get(token, printable(token))


def attention_input(vocab, text: str, limit: int) -> tuple[Tensor, list[str], int]:
    """The first ``limit`` tokens of ``text`` for an attention picture: ids (1, t), their labels (a word unknown
    to the vocabulary marked *, whitespace characters as visible marks), and how many tokens the text holds."""
    from ..data import WordVocab
    from ..data.imdb import tokenize

    if isinstance(vocab, WordVocab):
        words = tokenize(text)
        ids = torch.tensor([vocab.encode(words[:limit])])  # (1, t)
        tokens = [w if i != WordVocab.UNK else f"{w}*" for w, i in zip(words[:limit], ids[0].tolist(), strict=True)]
        return ids, tokens, len(words)
    encoded = vocab.encode_text(text, "text")  # (1, all)
    ids = encoded[:, :limit]
    return ids, [_shown_token(vocab.decode(i[None])) for i in ids[0]], encoded.size(1)


AS_GIVEN = {"parse_math": False}
"""How a label from outside is drawn (a token, a path, a metric's name): as the text it is, where a pair of "$" would
be matplotlib's math text (its parse error on "$x^$"). Only such labels: the log axes' numbers are math text."""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def out_file(out: str, flag: str = "--out", example: str = "picture.png", inputs: tuple = ()) -> Path:
    """A file a command writes (a picture unless ``example`` says otherwise), checked before any work: not a
    folder nor one of its ``inputs`` ((flag, path) pairs); its folder made, a file it replaces named."""
    target = Path(out)
    refuse_output(out, flag, example, inputs)
    from matplotlib.backend_bases import FigureCanvasBase

    picture = example.endswith(".png") and target.suffix
    if picture and target.suffix[1:].lower() not in FigureCanvasBase.get_supported_filetypes():
        raise ValueError(f"{flag} {out!r} ends in {target.suffix!r}, which is no picture format here; pass a name "
                         "ending in .png (or .pdf, .svg)")  # fmt: skip
    target.parent.mkdir(parents=True, exist_ok=True)
    try:  # a folder that takes no new file (a file is written beside, then renamed) is refused now, not after the work
        if target.is_file() or not target.exists():  # a device or a pipe is written to
            tempfile.TemporaryFile(dir=target.parent).close()
    except OSError as e:
        raise OSError(e.errno, e.strerror, out) from None
    if target.is_file():  # a device or a pipe (/dev/stdout) is written to, not replaced
        print(f"note: replacing {out}", file=sys.stderr)
    return target


def save_figure(fig, out: str | Path, dpi: int) -> None:
    """The figure drawn in memory in the format its name ends in (no ending: PNG), then written whole."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format=Path(out).suffix[1:].lower() or "png")
    write_whole(Path(out), buffer.getbuffer())


MAX_INCHES = 16.0  # the attention grid's width and height at most, before the colour bar


def draw_attention(weights: Tensor, tokens: list[str], out: str | Path, title: str = "", dpi: int = 100,
                   allowed: Tensor | None = None):  # fmt: skip
    """One PNG grid of weights (l, h, t, u): a row per layer, a column per head, each panel a query (down)
    by key (across) matrix with the tokens on its axes: ``tokens`` are the u keys, and the queries are the last t
    of them (a Transformer-XL's segment after its memory, which a white line then divides from the segment). The
    picture stays readable however many tokens: at most :data:`MAX_INCHES` across, and every n-th token labelled
    (with its position) when all would not fit. ``allowed`` (l, h, t, u) bool, a sparse model's pattern: the
    pairs outside it are drawn light grey, so each head shows which keys it may read, and the weights inside.
    Returns the figure (closed, for its data)."""
    plt = _pyplot()
    import numpy as np

    cmap = plt.get_cmap("viridis").with_extremes(bad="#e4e4e4")  # masked (outside the pattern): light grey
    layers, heads, t, u = weights.shape
    cell = min(max(1.4, 0.11 * u), MAX_INCHES / heads, MAX_INCHES / layers)  # inches per panel
    every = max(1, math.ceil(u / (cell / 0.16)))  # a readable label needs about 0.16 inch
    marks = list(range(0, u, every))
    labels = [tokens[k] if every == 1 else f"{k}:{tokens[k]}" for k in marks]
    rows = [k for k in marks if k >= u - t]  # query labels: the keys that are also queries
    font = max(4.0, min(8.0, 0.7 * 72 * cell / max(len(marks), 1)))  # points: most of the space a label has
    top = float(weights.max())  # one colour scale for every panel: a uniform head looks uniform, not bright
    fig, axes = plt.subplots(layers, heads, figsize=(heads * cell + 1.6, layers * cell * t / u + 1), squeeze=False)
    for i in range(layers):
        for j in range(heads):
            ax = axes[i][j]
            panel = weights[i, j].numpy()
            if allowed is not None:
                panel = np.ma.masked_where(~allowed[i, j].numpy(), panel)
            image = ax.imshow(panel, cmap=cmap, vmin=0.0, vmax=top, interpolation="nearest")
            ax.set_xticks([]), ax.set_yticks([])
            if i == layers - 1:  # keys along the bottom row, queries down the first column
                ax.set_xticks(marks, labels, rotation=90, fontsize=font, **AS_GIVEN)
            if j == 0:
                ax.set_yticks([k - (u - t) for k in rows], [labels[marks.index(k)] for k in rows], fontsize=font,
                              **AS_GIVEN)  # fmt: skip
            if u > t:  # the memory ends here
                ax.axvline(u - t - 0.5, color="white", linewidth=0.8)
            ax.tick_params(length=0)
            if i == 0:
                ax.set_title(f"head {j + 1}", fontsize=8)
            if j == heads - 1:
                ax.yaxis.set_label_position("right")
                ax.set_ylabel(f"layer {i + 1}", fontsize=8)
    fig.suptitle(title or "attention weights: queries down, keys across", **AS_GIVEN)
    fig.tight_layout()
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.5, label="attention weight")
    save_figure(fig, out, dpi)
    plt.close(fig)
    return fig


def learning_curves(metrics_csv: str | Path) -> dict[str, tuple[list[int], list[float]]]:
    """From Lightning's CSV log (``metrics.csv``): the training loss, every validation metric and the learning
    rate (of the first parameter group), each as (steps, values) over the rows that hold it, in that order.
    A file that is not such a log (binary, no step column, ragged rows, a value that is not a number) is refused
    with one line that names the file and the row."""
    path = Path(metrics_csv)
    text = read_text(path, repr(str(path)), MAX_METRICS, "the metrics.csv that fit wrote")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        columns, rows = list(reader.fieldnames or []), list(reader)
    except csv.Error as e:  # a field past csv's limit (131,072 characters)
        raise ValueError(f"{str(path)!r} line {reader.line_num + 1}: {e}; pass the metrics.csv fit wrote") from None
    if "step" not in columns:
        raise ValueError(f"{str(path)!r} has no step column; pass the metrics.csv that fit wrote")
    for line, row in enumerate(rows, start=2):
        if None in row or None in row.values():
            raise ValueError(f"{str(path)!r} line {line} has {len(columns)} columns in its header and not "
                             "in this row; pass the metrics.csv that fit wrote")  # fmt: skip
    lr = [c for c in columns if c.startswith("lr-")][:1]
    chosen = [c for c in ("train/loss",) if c in columns] + sorted(c for c in columns if c.startswith("val/")) + lr
    curves = {}
    for name in chosen:
        points = [(_number(r["step"], path, line, "step", int), _number(r[name], path, line, name, float))
                  for line, r in enumerate(rows, start=2) if r.get(name) not in (None, "")]  # fmt: skip
        points = [(s, v) for s, v in points if abs(v) <= FLOAT32_MAX]  # not a diverged run's inf, nan or overflow
        if points:
            curves[name] = ([s for s, _ in points], [v for _, v in points])
    return curves


MAX_METRICS = 200_000_000  # bytes: a log far longer than any run here writes
MAX_STEP = 2**53  # a step a float (the axes') holds exactly; no run takes that many
FLOAT32_MAX = 3.4028234663852886e38  # the largest value a float32 metric has; past it, an overflow, as inf is


def _number(value: str, path: Path, line: int, column: str, kind: type):
    try:
        number = kind(value)
    except ValueError:
        number = None
    if number is None or kind is int and not 0 <= number <= MAX_STEP:
        what = f"step (an integer in [0, {MAX_STEP:,}])" if kind is int else "number"
        raise ValueError(f"{str(path)!r} line {line}: {column} {value[:40]!r} is not a {what}; pass the metrics.csv "
                         "that fit wrote")  # fmt: skip
    return number


def draw_curves(curves: dict[str, tuple[list[int], list[float]]], out: str | Path, title: str = "", dpi: int = 100):
    """One panel per curve, stacked, against the optimizer step. Returns the figure (closed, for its data)."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(curves), 1, figsize=(6, 1.9 * len(curves) + 0.6), sharex=True, squeeze=False)
    for ax, (name, (steps, values)) in zip(axes[:, 0], curves.items(), strict=True):
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, linewidth=1.2)
        ax.set_ylabel(printable(name), fontsize=8, **AS_GIVEN)  # a column of the file's: any text
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(printable(title), fontsize=9, **AS_GIVEN)
    fig.tight_layout()
    save_figure(fig, out, dpi)
    plt.close(fig)
    return fig


def draw_context(curves: dict[str, tuple[list[float], list[float]]], out: str | Path, title: str = "",
                 dpi: int = 100):  # fmt: skip
    """Bits per byte against the position in the window, on a log scale, one line per curve (``name: (x, y)``).
    Returns the figure (closed, for its data)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for name, (x, y) in curves.items():
        ax.plot(x, y, marker="o", markersize=3, linewidth=1.2, label=printable(name))  # a checkpoint's path
    ax.set_xscale("log")
    ax.set_xlabel("position in the window (bytes it sees)")
    ax.set_ylabel("bits per byte")
    ax.grid(alpha=0.3, which="both")
    for label in ax.legend(fontsize=7).get_texts():  # a checkpoint's path
        label.set(**AS_GIVEN)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, out, dpi)
    plt.close(fig)
    return fig

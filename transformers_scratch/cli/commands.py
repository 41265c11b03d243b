"""The commands beside Lightning's: typed functions whose signatures and docstrings jsonargparse turns into
options and ``--help``. Each reads its checkpoint once, prints its output on stdout and its notes on stderr."""

from __future__ import annotations

import csv as csv_rows
import dataclasses
import io
import math
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from torch import Tensor

from ..atomic import saved_whole, write_whole
from ..bounds import (
    MAX_SAMPLE,
    Count,
    Dpi,
    Length,
    Memory,
    NonNegativeFloat,
    PathName,
    Pictured,
    Positive,
    Samples,
    Seed,
    Share,
)
from ..data import ByteVocab, DataError, WordVocab
from ..data.files import read_text, refuse_output
from ..model.hf import HFError, save_hf
from ..model.pretrained import save_pretrained
from ..training.checkpoints import Checkpoint, absent
from ..training.console import shown
from ..training.inference import continue_text, decode_sources, export_vocab
from ..training.modules import LitCharLM, LitClassifier, LitMaskedLM, LitSeq2Seq, LitXL
from ..training.pictures import out_file
from .errors import damaged

MAX_INPUTS = 100_000  # --input_file lines
MAX_TEXT_FILE = 10_000_000  # bytes of a --X_file


def text_or_file(text: str | None, path: str | None, flag: str, what: str, kind: str) -> str:
    """The text of ``--FLAG TEXT`` or of the file ``--FLAG_file FILE``: exactly one, not empty."""
    if (text is None) == (path is None):
        raise ValueError(f"give {what} with --{flag} TEXT or --{flag}_file FILE (one of the two)")
    if path is not None:
        text = read_text(path, f"--{flag}_file {path!r}", MAX_TEXT_FILE, kind)
    if not text:
        where = f"--{flag}_file {path!r}" if path is not None else f"--{flag}"
        raise ValueError(f"{where} is empty; give {what}")
    return text


def sample(
    ckpt_path: PathName,
    prompt: str | None = None,
    prompt_file: PathName | None = None,
    length: Length = 600,
    num_samples: Samples = 1,
    temperature: NonNegativeFloat = 0.5,
    top_k: Positive | None = None,
    top_p: Share | None = None,
    seed: Seed | None = None,
    cache: bool = True,
    cuda_graph: bool = False,
) -> None:
    """Continue a prompt with a trained character model; prints prompt + continuation, once per sample.

    Args:
        ckpt_path: A LitCharLM or LitXL checkpoint written by fit (or convert_xl).
        prompt: Text to continue.
        prompt_file: Continue this file's text instead.
        length: Characters (bytes; for a run with data.tokenizer, its tokens) to generate.
        num_samples: Samples of the same prompt, drawn together.
        temperature: 0 is greedy; the tutorial samples at 0.5.
        top_k: Sample only from the k likeliest.
        top_p: Sample from the nucleus of mass p.
        seed: Random seed: the same seed gives the same text.
        cache: Decode with the key/value cache (false: recompute the window for every character).
        cuda_graph: On a GPU, replay each cached step as a CUDA graph.
    """
    prompt = text_or_file(prompt, prompt_file, "prompt", "the text to continue", "a text file")
    if num_samples * length > MAX_SAMPLE:
        raise ValueError(f"--num_samples {num_samples} x --length {length:,} is {num_samples * length:,} characters, "
                         f"more than {MAX_SAMPLE:,} in one call; ask for fewer or shorter samples")  # fmt: skip
    module, vocab = Checkpoint(ckpt_path).trained(LitCharLM, LitXL, command="sample", vocab=True)
    options = dict(temperature=temperature, top_k=top_k, top_p=top_p, use_cache=cache, cuda_graph=cuda_graph)
    with damaged(ckpt_path):
        print("\n---\n".join(continue_text(module, vocab, prompt, length, num_samples, seed, **options)))


def decode(ckpt_path: PathName, input: str | None = None, input_file: PathName | None = None,
           batch_size: Count = 256) -> None:  # fmt: skip
    """Decode sources with a trained encoder-decoder (greedy, with the decoder's caches): one output a line.

    Args:
        ckpt_path: A LitSeq2Seq checkpoint written by fit.
        input: One source, e.g. '31415' or '315+4096'.
        input_file: A file of sources, one a line: output line N is source line N's (a blank one stays blank).
        batch_size: Sources decoded together.
    """
    from ..data.transduction import encode

    text = text_or_file(input, input_file, "input", "the source", "a file, one source a line")
    where = f"--input_file {input_file!r}" if input_file else "--input"
    lines = text.removesuffix("\n").split("\n") if input_file else [text]  # as wc -l counts: not at \f or \u2028
    numbered = [(n, line.strip()) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        raise ValueError(f"{where} holds nothing to decode: give at least one non-empty source")
    if len(numbered) > MAX_INPUTS:
        raise ValueError(f"--input_file holds {len(numbered):,} sources, more than {MAX_INPUTS:,}; split the file")
    module, _ = Checkpoint(ckpt_path).trained(LitSeq2Seq, command="decode")
    context = module.model.cfg.context
    for n, source in numbered:  # every character known, and no source longer than the context
        at = f"{where}{f' line {n:,}' if input_file else ''}"
        try:
            encode(source)
        except ValueError as e:
            raise ValueError(f"{at}: {e}") from None
        if len(source) > context:
            raise ValueError(f"{at}: {source[:40]!r} has {len(source):,} characters, more than the model's context "
                             f"{context}; pass shorter sources, or train with a larger data.max_length")  # fmt: skip
    written, numbers = 0, iter(n for n, _ in numbered)
    with damaged(ckpt_path):
        for outputs in decode_sources(module, [source for _, source in numbered], batch_size):
            for output in outputs:  # output line N is source line N's: a blank source line stays blank
                n = next(numbers)
                print("\n" * (n - written - 1) + output)
                written = n


# fit's keys, which the data modules' refusals name, as context's flags
CONTEXT_FLAGS = {"or lower data.context": "or a model of a shorter context", "--data.path": "--data_path",
                 "data.batch_size or data.context": "--batch_size", "data.path": "--data_path",
                 "data.eval_batch_size": "--batch_size", "data.batch_size": "--batch_size",
                 "data.context": "the model's context"}  # fmt: skip


@contextmanager
def fit_keys_as_flags():
    """A data module's refusal, worded with :data:`CONTEXT_FLAGS`."""
    try:
        yield
    except DataError as e:
        raise DataError(re.sub("|".join(map(re.escape, CONTEXT_FLAGS)), lambda m: CONTEXT_FLAGS[m[0]], str(e))) from e


def export(ckpt_path: PathName, out: PathName, format: Literal["project", "hf"] = "project") -> None:
    """Write a checkpoint's model as model.safetensors + config.json, for transformers_scratch.from_pretrained,
    or in Hugging Face's layout.

    Args:
        ckpt_path: A LitCharLM, LitClassifier, LitSeq2Seq or LitXL checkpoint written by fit (LitMaskedLM too,
            for hf; a LitXL's memory is no Hugging Face model's).
        out: A folder, made if new, that holds no model.safetensors or config.json yet (a run with
            data.tokenizer adds its tokenizer.json).
        format: project (this project's from_pretrained reads it, with the vocabulary), or hf: a GPT-2, Llama,
            Qwen2 or BERT folder that transformers' AutoModelForCausalLM / AutoModelForMaskedLM loads, for a
            model that one of those families expresses (the refusal names the option that none has).
    """
    if Path(out).exists() and not Path(out).is_dir():  # checked before the checkpoint is read
        raise ValueError(f"--out {out!r} is a file, and export writes a folder; pass a folder, e.g. exported/NAME")
    try:
        if format == "hf":
            module, vocab = Checkpoint(ckpt_path).trained(LitCharLM, LitMaskedLM, command="export --format hf")
            try:
                folder = save_hf(module.model, out)
            except HFError as e:  # a model none of the families expresses: the project's format holds a LitCharLM
                project = ", or export it with --format project" if isinstance(module, LitCharLM) else ""
                raise ValueError(f"--ckpt_path {ckpt_path!r}: {e}{project}") from None
        else:
            module, vocab = Checkpoint(ckpt_path).trained(LitCharLM, LitClassifier, LitSeq2Seq, LitXL, command="export")
            folder = save_pretrained(module.model, out, {"vocab": export_vocab(module, vocab)})
    except FileExistsError as e:
        if e.errno is not None:  # the system's, which the error path names
            raise
        raise ValueError(f"--out {e}") from None  # the writers' refusal of a folder that holds a model
    files = "model.safetensors, config.json"
    if tokenizer := getattr(vocab, "json", None):  # a sub-word tokenizer's: --data.tokenizer and transformers read it
        write_whole(folder / "tokenizer.json", tokenizer)
        files += ", tokenizer.json"
    print(f"exported {type(module).__name__}'s model to {folder}/ ({files})")


def convert_xl(
    state_dict: PathName,
    out: PathName,
    symbols: PathName | None = None,
    pre_norm: bool = False,
    context: Count = 512,
    mem_len: Memory = 512,
    clamp_len: Positive | None = None,
    same_length: bool = False,
) -> None:
    """Convert a Transformer-XL trained with the authors' code into a LitXL checkpoint (evaluate, sample, fine-tune).

    Args:
        state_dict: A file of their MemTransformerLM's state_dict() (torch.save of the tensors; a pickled whole
            model is refused: it would run code when read).
        out: The checkpoint to write (.ckpt), a new file.
        symbols: A text file of their vocabulary, one symbol a line in id order: each the decimal byte value that
            their enwik8 and text8 data use (their corpus's vocab.idx2sym). None: id i is byte i (256 ids).
        pre_norm: Their --pre_lnorm.
        context: Their --tgt_len: the segment length.
        mem_len: Their --mem_len: the training memory (evaluation may use another: --model.eval_mem_len).
        clamp_len: Their --clamp_len (None: no clamp).
        same_length: Their --same_length.
    """
    import lightning

    from ..data.vocab import vocab_state
    from ..model.xl import from_authors

    refuse_output(out, "--out", "converted.ckpt")
    if Path(out).exists():
        raise FileExistsError(f"--out {out!r} already exists; pass a new file name")
    state = Checkpoint.tensors(state_dict, "--state_dict")
    model = from_authors(state, f"--state_dict {state_dict!r}", pre_norm=pre_norm, context=context, mem_len=mem_len,
                         clamp_len=clamp_len, same_length=same_length)  # fmt: skip
    vocab = authors_vocab(symbols, model.cfg.vocab_size)
    module = LitXL(model.cfg)
    module.model = model  # the converted weights, in place of the fresh model
    checkpoint = {
        "state_dict": module.state_dict(),
        "hyper_parameters": {
            "model": dataclasses.asdict(model.cfg),
            "_class_path": "transformers_scratch.training.LitXL",
        },
        "OrderedTextDataModule": vocab_state(vocab),
        "converted_from": str(state_dict),
        "pytorch-lightning_version": lightning.__version__,  # what Lightning's validate, test and predict check
        "epoch": 0,
        "global_step": 0,
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    saved_whole(checkpoint, Path(out))
    cfg = model.cfg
    print(f"converted {state_dict} to {out}: a LitXL of {cfg.depth} blocks x {cfg.emb}, {cfg.heads} heads, "
          f"{cfg.vocab_size} symbols, segment {cfg.context}, memory {cfg.mem_len}")  # fmt: skip


def authors_vocab(symbols: str | None, size: int):
    """The byte each of the authors' ids stands for: their symbols file, or the 256 byte values in order."""
    from ..data.vocab import ByteVocab

    if symbols is None:
        if size != 256:
            raise ValueError(f"the model reads {size} ids, not the 256 byte values: pass --symbols FILE, their "
                             "vocabulary one symbol a line in id order (their corpus's vocab.idx2sym)")  # fmt: skip
        return ByteVocab(None)
    text = read_text(symbols, f"--symbols {symbols!r}", MAX_TEXT_FILE, "a text file, one decimal byte value a line")
    lines = text.split()
    if len(lines) != size or not all(line.isdecimal() and int(line) < 256 for line in lines) or len(set(lines)) != size:
        raise ValueError(
            f"--symbols {symbols!r} must list the model's {size} ids as distinct decimal byte values (0 to 255), one a "
            f"line; it holds {len(lines)} lines"
        )
    return ByteVocab(bytes(int(line) for line in lines))


def attention(
    ckpt_path: PathName,
    text: str | None = None,
    text_file: PathName | None = None,
    out: PathName = "attention.png",
    max_tokens: Pictured = 32,
    dpi: Dpi = 100,
) -> None:
    """Draw the attention weights of every layer and head of a trained classifier (words) or character model
    (characters) for one text, as one PNG grid with the tokens on the axes.

    Args:
        ckpt_path: A LitClassifier, LitCharLM or LitXL checkpoint written by fit. A LitXL's picture shows its
            last segment over the memory that the text before it left.
        text: The text to read.
        text_file: Read this file's text instead.
        out: The PNG to write.
        max_tokens: Draw the first N tokens (words or characters).
        dpi: Resolution of the PNG.
    """
    from ..training.pictures import (
        attention_input,
        attention_maps,
        attention_patterns,
        draw_attention,
        xl_attention_maps,
    )

    text = text_or_file(text, text_file, "text", "the text to read", "a text file")
    module, vocab = Checkpoint(ckpt_path).trained(LitClassifier, LitCharLM, LitXL, command="attention", vocab=True)
    model = module.model
    xl = isinstance(module, LitXL)  # a segment after its memory: the text may be longer than one segment
    limit = max_tokens if xl else min(max_tokens, model.cfg.context)
    ids, tokens, total = attention_input(vocab, text, limit)
    if ids.size(1) == 0:
        raise ValueError("the text holds no tokens to read; give some words")
    if total > ids.size(1):
        why = f"--max_tokens {max_tokens}" if limit == max_tokens else f"the model's context, {limit}"
        print(f"note: drawing the first {ids.size(1)} of {total} tokens ({why})", file=sys.stderr)
    if getattr(model.cfg, "pool", None) == "cls":
        tokens = ["[CLS]", *tokens]
    kind = "words" if isinstance(vocab, WordVocab) else "characters" if isinstance(vocab, ByteVocab) else "tokens"
    title = f"{type(module).__name__} attention over {len(tokens)} {kind}: queries down, keys across"
    allowed = None
    if xl:  # the last segment (at most half the tokens) over its memory of the text before
        queries = min(model.cfg.context, max(1, ids.size(1) // 2))
        weights = xl_attention_maps(model, ids, queries)[:, 0]  # (l, h, t, m + t)
        tokens = tokens[len(tokens) - weights.size(-1) :]
        title = (f"{type(module).__name__}: {queries} {kind} (down) over a memory of {weights.size(-1) - queries} "
                 "and themselves (across)")  # fmt: skip
    else:
        weights = attention_maps(model, ids)[:, 0]  # (l, h, t, t)
        allowed = attention_patterns(model, ids.size(1))  # a sparse model's pattern: the rest is drawn grey
        if allowed is not None:
            sp = model.cfg.sparse
            title += f"; {sp.pattern} pattern, l={sp.block}, {sp.layout} heads (grey: outside the pattern)"
    if not weights.isfinite().all():  # a picture of NaN: blank cells, which read as attention to nothing
        with damaged(ckpt_path):
            raise FloatingPointError("the model's attention weights are not finite (NaN or inf): its weights are so "
                                     "large that they overflow")  # fmt: skip
    target = out_file(out, inputs=(("--ckpt_path", ckpt_path), ("--text_file", text_file)))
    draw_attention(weights, tokens, target, title, dpi, allowed)
    print(f"wrote {out}: {weights.size(0)} layers x {weights.size(1)} heads over {len(tokens)} {kind}")


def plot(run: PathName, out: PathName | None = None, dpi: Dpi = 100) -> None:
    """Draw a run's learning curves (training loss, validation metrics, learning rate) from its metrics.csv.

    Args:
        run: A run's log folder (logs/<name>/version_N) or its metrics.csv (a pipe too: <(ssh host cat ...)).
        out: The PNG to write (default: RUN/curves.png).
        dpi: Resolution of the PNG.
    """
    from ..training.pictures import draw_curves, learning_curves

    given = Path(run)
    metrics = given if given.suffix == ".csv" or (given.exists() and not given.is_dir()) else given / "metrics.csv"
    if (given / "hparams.yaml").is_file() and not metrics.exists():  # a run's log folder (CSVLogger writes it first)
        raise FileNotFoundError(f"{shown(given)} holds no metrics.csv: its run logged no metric (it ended before "
                                "trainer.log_every_n_steps steps and a validation); plot a longer run")  # fmt: skip
    if not metrics.exists() or metrics.is_dir():
        logged = sorted(given.glob("version_*/metrics.csv"), key=lambda p: p.stat().st_mtime)  # logs/NAME given
        example = shown(logged[-1].parent) if logged else "logs/imdb/version_0"
        raise FileNotFoundError(f"{str(metrics)!r} {absent(str(metrics))}; pass a run's log folder such as "
                                f"{example} (fit writes metrics.csv there)")  # fmt: skip
    if out is None and not metrics.is_file():
        raise ValueError(f"run {run!r} is a pipe, with no folder to hold the picture; pass --out curves.png")
    curves = learning_curves(metrics)
    if not curves:
        raise ValueError(f"{str(metrics)!r} holds no training loss, validation metric or learning rate to draw yet")
    target = out_file(out, inputs=(("run", metrics),)) if out else metrics.parent / "curves.png"
    draw_curves(curves, target, shown(str(metrics.parent)), dpi)
    print(f"wrote {target}: {', '.join(curves)}")


def context(
    ckpt_path: list[PathName] | PathName,
    data_path: PathName | None = None,
    download: Literal["enwik8", "tinyshakespeare", "python-stdlib"] = "enwik8",
    data_dir: PathName = "data",
    split: Literal["val", "test"] = "test",
    batch_size: Count = 32,
    eval_mem_len: Memory | list[Memory] | None = None,
    limit_batches: Count | None = None,
    bins: Count = 16,
    out: PathName | None = None,
    csv: PathName | None = None,
    dpi: Dpi = 100,
) -> None:
    """How much of its context a character model uses: bits per byte by position in the window.

    The mean bits per byte at each position of the window, in bins spaced on a log scale, every byte scored
    exactly as test scores it (their mean, the last line, is test's bits per byte); several checkpoints, and a
    Transformer-XL's evaluation memories, side by side.

    Args:
        ckpt_path: A LitCharLM or LitXL checkpoint written by fit, or several: --ckpt_path '[a.ckpt, b.ckpt]'.
        data_path: The text the runs trained on, split 90/5/5 as fit splits it. None: the text of download.
        download: The known text to read when data_path is not given (enwik8, tinyshakespeare, python-stdlib).
        data_dir: Where that text is (or is put).
        split: The held-out split to score.
        batch_size: Windows a batch; for a LitXL the number of streams, as the run's data.eval_batch_size (it
            decides where each stream starts with no memory).
        eval_mem_len: A LitXL's evaluation memory, or several, one curve each (default: its own eval_mem_len).
        limit_batches: Score only the first N batches (default: the whole split).
        bins: Bins of positions, spaced on a log scale from 1 to the context.
        out: A PNG of the curves, log-x.
        csv: A CSV of every position (curve, position, bytes, bits_per_byte).
        dpi: Resolution of the PNG.
    """
    from ..data import OrderedTextDataModule, TextDataModule
    from ..data.vocab import vocab_state
    from ..training.inference import log_bins, loss_by_position
    from ..training.pictures import draw_context

    if not ckpt_path:
        raise ValueError("--ckpt_path names no checkpoint; pass one, or several: --ckpt_path '[a.ckpt, b.ckpt]'")
    paths = [ckpt_path] if isinstance(ckpt_path, str) else ckpt_path
    read = (("--data_path", data_path), *(("--ckpt_path", path) for path in paths))
    if out and csv and Path(out).resolve() == Path(csv).resolve():  # the table would be drawn over
        raise ValueError(f"--csv {csv!r} is --out too; pass another name, e.g. --csv context.csv")
    target = out_file(out, inputs=read) if out else None
    table = out_file(csv, "--csv", "context.csv", read) if csv else None
    memories = [eval_mem_len] if isinstance(eval_mem_len, int) else eval_mem_len
    curves: dict[str, tuple[Tensor, Tensor]] = {}
    any_xl = False
    with fit_keys_as_flags():  # the data modules name fit's keys: here they are flags
        for i, path in enumerate(paths):
            module, vocab = Checkpoint(path).trained(LitCharLM, LitXL, command="context")
            if not isinstance(vocab, ByteVocab):
                raise ValueError(f"--ckpt_path {path!r} holds no byte vocabulary; context scores byte-level models")
            xl = isinstance(module, LitXL)
            any_xl |= xl
            if memories and not any_xl and i == len(paths) - 1:  # before the last is scored: it did nothing
                raise ValueError("--eval_mem_len is a LitXL's evaluation memory, and no --ckpt_path holds a LitXL; "
                                 "leave it out")  # fmt: skip
            data = (OrderedTextDataModule if xl else TextDataModule)(
                path=data_path, data_dir=data_dir, download=download, context=module.model.cfg.context,
                batch_size=batch_size, vocab="bytes" if vocab.symbols is None else "file")  # fmt: skip
            data.load_state_dict(vocab_state(vocab))
            data.prepare_data()
            data.setup()
            loader = data.val_dataloader if split == "val" else data.test_dataloader
            name = Path(path).parent.name if Path(path).name == "last.ckpt" else Path(path).stem
            name = path if any(label.split(", memory")[0] == name for label in curves) else name  # two runs of one name
            for memory in (memories or [module.eval_options["mem_len"]]) if xl else [None]:
                if memory is not None:
                    module.eval_options["mem_len"], module.eval_memory = memory, None
                label = f"{name}, memory {memory}" if memory is not None else name
                with damaged(path):
                    curves[label] = loss_by_position(module, loader(), limit_batches)
    length = max(len(bits) for bits, _ in curves.values())
    ranges = log_bins(length, bins)
    # a bin past a curve's own context (several checkpoints of other contexts) has no bytes: NaN, shown as "-"
    binned = {label: [float(bits[lo - 1 : hi].sum() / counts[lo - 1 : hi].sum()) if counts[lo - 1 : hi].sum()
                      else math.nan for lo, hi in ranges] for label, (bits, counts) in curves.items()}  # fmt: skip
    print("positions\t" + "\t".join(curves))
    for i, (lo, hi) in enumerate(ranges):
        print(f"{lo}-{hi}\t" + "\t".join("-" if math.isnan(v[i]) else f"{v[i]:.4f}" for v in binned.values()))
    print("all\t" + "\t".join(f"{float(b.sum() / c.sum()):.4f}" for b, c in curves.values()))
    if table is not None:  # a curve's name may hold a comma (", memory 512"): quoted
        rows = io.StringIO()
        csv_rows.writer(rows, lineterminator="\n").writerows([("curve", "position", "bytes", "bits_per_byte")] + [
            (label, i + 1, int(c), f"{float(b / c):.6f}") for label, (bits, counts) in curves.items()
            for i, (b, c) in enumerate(zip(bits, counts, strict=True)) if c])  # fmt: skip
        write_whole(table, rows.getvalue())
    if target is not None:
        mids = [math.sqrt(lo * hi) for lo, hi in ranges]
        draw_context({k: (mids, v) for k, v in binned.items()}, target, f"bits per byte by position ({split})", dpi)
        print(f"wrote {target}", file=sys.stderr)

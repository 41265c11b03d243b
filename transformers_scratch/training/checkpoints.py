"""Reading what ``fit`` wrote. A :class:`Checkpoint` reads a file once, as data (``weights_only``), and checks
what it holds: the kind of model, its settings, its weights' names and shapes, the vocabulary and the run it
continues. Every command that reads a checkpoint goes through it; each refusal is one line naming flag and file."""

from __future__ import annotations

import dataclasses
import inspect
import math
import pickle
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, get_args, get_type_hints

import torch

from ..bounds import NAME, is_count, refuse_unusable
from ..data import ByteVocab, WordVocab, checkpoint_vocab
from ..data.files import inflates_past, shortened
from ..data.vocab import DamagedVocab, TokenizerVocab
from ..model.config import TransformerConfig, read_settings
from .console import note

PROJECT = __name__.partition(".")[0]  # what the project's own classes and modules are named under
CHEAP = 2**24  # parameters (64 MB in float32): a model this size is built in a moment, to compare weight by weight
RETRAIN = "it predates the package's layout or comes from another version: train it again with this one"


def absent(path: str) -> str:
    """Why a path is no file: it is empty, does not exist, is a device or a pipe, or is a folder (an export's,
    which from_pretrained reads)."""
    if not path.strip():
        return "is empty"
    if not Path(path).exists():
        return "does not exist"
    if not Path(path).is_dir():
        return "is not a regular file"
    export = (Path(path) / "config.json").is_file()
    return "is a folder" + (", an export (transformers_scratch.from_pretrained reads it), not a checkpoint" * export)


def settings_class(module_class: Any) -> Any:
    """The dataclass of a module's ``model`` settings (``LMConfig`` for a ``LitCharLM``), or None."""
    hint = get_type_hints(module_class.__init__).get("model")
    return next((a for a in get_args(hint) if isinstance(a, type) and dataclasses.is_dataclass(a)), None)


def _load(path: str, flag: str, example: str, what: str, fix: str) -> Any:
    """``torch.load`` as data, on the CPU: a broken file fails anywhere in torch's reader, with any type of error,
    and is refused in one line."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{flag} {path!r} {absent(path)}; pass {example}")
    if inflated := inflates_past(path):
        raise ValueError(f"{flag} {path!r} inflates to {inflated:,} bytes from {Path(path).stat().st_size:,}: "
                         f"torch.save compresses nothing, so it is not {what}; {fix}")  # fmt: skip
    try:
        with warnings.catch_warnings():  # torch's about what the file holds (another pickle protocol): it is read,
            warnings.simplefilter("ignore")  # or refused in one line below
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        reason = (str(e).splitlines() or ["empty file"])[0][:200]
        if isinstance(e, pickle.UnpicklingError):  # torch's first line would suggest loading with weights_only off
            reason = "it is no PyTorch file, or holds more than tensors and plain data: it is not unpickled"
        raise ValueError(f"{flag} {path!r} is not {what} ({type(e).__name__}: {reason}); {fix}") from e


class Checkpoint:
    """One checkpoint file, read once and checked. ``flag`` names where it was given (``--ckpt_path``,
    ``model.pretrained``, ...); ``weights``: keep the tensors (to build a module here), or only their shapes (a
    run that Lightning restores itself)."""

    def __init__(self, path: str, flag: str = "--ckpt_path", weights: bool = True) -> None:
        self.source = f"{flag} {path!r}"
        example = "a checkpoint file such as checkpoints/enwik8/last.ckpt"
        data = _load(path, flag, example, "a readable checkpoint", "it may be truncated or not written by fit: pass "
                     "another checkpoint")  # fmt: skip
        if not isinstance(data, dict) or not isinstance(data.get("state_dict"), dict):
            raise ValueError(f"{self.source} holds no model weights; pass a checkpoint written by fit")
        state = data["state_dict"]
        if not all(isinstance(t, torch.Tensor) for t in state.values()):
            raise ValueError(f"{self.source} holds no model weights (its state_dict is no mapping of names to "
                             "tensors); pass a checkpoint written by fit")  # fmt: skip
        refuse_unusable(state, self.source)
        hparams = dict(data.get("hyper_parameters") or {})
        self.path, self.class_path = path, str(hparams.get("_class_path") or "")
        ours = self.class_path.partition(".")[0] == PROJECT  # the module class that wrote it:
        self.kind = self.class_path.rsplit(".", 1)[-1] if ours else f"module of class {shortened(self.class_path)!r}"
        self.hparams = {k: v for k, v in hparams.items() if not str(k).startswith("_")}
        try:
            self.vocab = checkpoint_vocab(data)
        except DamagedVocab as e:
            raise ValueError(f"{self.source}: {e}; pass another checkpoint") from None
        step, run = data.get("global_step") or 0, data.get("run") or {}  # run: the CSV version and W&B id it logged to
        versions = list(run.values()) if isinstance(run, dict) else [None]  # a resume logs there: no path, no ".."
        if not is_count(step) or not all(is_count(v) or v == "" or isinstance(v, str) and NAME.fullmatch(v)
                                         for v in versions):  # fmt: skip
            raise ValueError(f"{self.source} holds a damaged record of its run (its step, or a log version that is "
                             "no folder name); pass another checkpoint")  # fmt: skip
        self.run, self.step = run, step
        self.resumable = bool(data.get("optimizer_states")) and "loops" in data  # else: save_weights_only's
        self.shapes = {str(name): tuple(t.shape) for name, t in state.items()}
        size = self.setting("vocab_size", 0)
        if self.vocab is not None and is_count(size) and 0 < size < self.vocab.size:
            raise ValueError(f"{self.source} holds a vocabulary of {self.vocab.size:,} ids for a model of {size:,}: "
                             "ids past its embedding; the file is damaged: pass another checkpoint")  # fmt: skip
        self.state = state if weights else None

    @property
    def model(self):
        """The model's settings as written (a dict, or None)."""
        return self.hparams.get("model")

    def setting(self, key: str, default: Any = None) -> Any:
        """One of the model's settings as the file holds them (a dict, or a config), else ``default``."""
        return (self.model.get(key) if isinstance(self.model, dict) else getattr(self.model, key, None)) or default

    def settings(self, module_class: Any) -> Any:
        """The model settings, checked against the module's config class before anything is built; a model
        larger than its weights and than :data:`CHEAP` is refused before it is allocated."""
        cls = settings_class(module_class)
        if cls is None or self.model is None:
            return self.model
        cfg = read_settings(cls, self.model, self.source)
        if cfg.parameters_at_least() > CHEAP:
            cfg.refuse_past(sum(math.prod(shape) for shape in self.shapes.values()), self.source,
                            "the file is damaged; pass another checkpoint")  # fmt: skip
        return dataclasses.asdict(cfg)

    def refuse_kind(self, *takes: type, command: str) -> type:
        """The one of ``takes`` (module classes) that wrote the file; any other is refused, naming both."""
        cls = next((c for c in takes if c.__name__ == self.kind), None)
        if cls is None:
            held = f"a {self.kind}" if self.class_path else "no record of the module that wrote it (fit writes one)"
            raise ValueError(f"{self.source} holds {held}; {command} takes {', '.join(c.__name__ for c in takes)}")
        return cls

    def check_fits(self, module: torch.nn.Module, fix: str | None = None) -> None:
        """The weights against the module built from the settings, before a strict load: the first name or shape
        the module lacks is refused in one line, with ``fix``."""
        ours = {name: tuple(t.shape) for name, t in module.state_dict().items()}
        problems = [f"{name!r} is missing" for name in ours if name not in self.shapes]
        problems += [f"{name!r} is not one of its weights" for name in self.shapes if name not in ours]
        problems += [f"{name!r} is {list(self.shapes[name])}, not {list(shape)}" for name, shape in ours.items()
                     if name in self.shapes and self.shapes[name] != shape]  # fmt: skip
        tables = [name for name in ours if name.endswith("positions.table.weight") and name in self.shapes
                  and self.shapes[name] != ours[name]]  # fmt: skip
        if fix is None and problems and len(tables) == len(problems):  # the data gives another window, all else equal
            raise ValueError(
                f"{self.source} was trained at {self.shapes[tables[0]][0]} positions, whose learned vectors are one a "
                f"position, and this run's data gives {ours[tables[0]][0]}; pass the data settings it was trained with "
                "(data.context, or data.max_length and data.task)"
            )
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ValueError(
                f"{self.source} does not fit the {type(module).__name__} its settings describe: "
                f"{shortened(problems[0])}{more}; {fix or f'the file is damaged, or {RETRAIN}'}"
            )

    def check_resumes(self) -> None:
        """A fit resumes only from a run's whole state: a file of weights alone is refused, with what reads it."""
        if not self.resumable:
            raise ValueError(f"{self.source} holds the weights alone, with no optimizer or loop state (saved with "
                             "save_weights_only, or by convert_xl), so no run resumes from it; validate, test, sample "
                             "and export read it, and a new run starts from its weights with model.pretrained or "
                             "model.init_from")  # fmt: skip

    def trained(self, *takes: type, command: str = "this command", vocab: bool = False):
        """The trained module (on the CPU, in eval mode) and its vocabulary. ``takes``: the module classes the
        command can use; ``vocab``: the command reads text, so the file must hold its vocabulary."""
        module_class = self.refuse_kind(*takes, command=command)
        if vocab and self.vocab is None:
            raise ValueError(f"{self.source} holds no vocabulary; pass a checkpoint written by fit")
        settings = self.settings(module_class)  # checked, and in this version's spelling
        hparams = self.hparams if settings is None else {**self.hparams, "model": settings}
        hparams = {**hparams, "pretrained": None, "init_from": None}  # the weights are the file's own: none read
        takes_args = inspect.signature(module_class).parameters  # settings since dropped (older layouts) left out
        assert self.state is not None, "read with weights=False"
        try:
            try:
                module = module_class(**{k: v for k, v in hparams.items() if k in takes_args})
            except ValueError as e:  # a setting of the module's own out of its bounds (model.optim's)
                raise ValueError(f"{self.source} holds settings this version refuses ({e}); {RETRAIN}") from None
            self.check_fits(module)
            module.load_state_dict(self.state)
        except (TypeError, RuntimeError, KeyError) as e:
            reason = (str(e).splitlines() or [type(e).__name__])[0][:200]
            raise ValueError(f"{self.source} does not fit this version's {self.kind} ({reason}); {RETRAIN}") from e
        return module.eval(), self.vocab

    def refuse_changed(self, given: dict, trained, argv: list[str], linked: tuple[str, ...]) -> None:
        """A model flag (``argv``, parsed as ``given``) that the checkpoint's ``trained`` settings contradict
        would be silently replaced: refused, naming both values."""
        trained = trained if isinstance(trained, dict) else vars(trained) if trained is not None else {}
        for arg in argv:
            flag = arg.split("=", 1)[0]
            field = flag.removeprefix("--model.model.").removeprefix("--model.init_args.model.")
            if field == flag or field in linked:
                continue
            now, was = given.get(field), trained.get(field)
            if was is not None and now is not None and now != was:
                raise ValueError(
                    f"{flag} {now} differs from the checkpoint's {was} ({self.source}): a run keeps the "
                    f"architecture it was trained with; drop {flag} to continue it, or start a new run with --name"
                )

    def check_data(self, data) -> None:
        """The run's ``data`` must give the ids the model reads (the same vocabulary); windows longer than it was
        trained on are refused for learned positions and noted for the others."""
        vocab = self.vocab
        if isinstance(vocab, ByteVocab) and "vocab" in data:
            kind = "bytes" if vocab.symbols is None else "file"
            if data["vocab"] != kind:
                raise ValueError(f"{self.source} was trained with data.vocab {kind} ({vocab.size} symbols), and this "
                                 f"run has data.vocab {data['vocab']}; pass --data.vocab {kind}")  # fmt: skip
        if given := data.get("tokenizer"):  # the ids the model reads are the tokenizer's it was trained with
            if not isinstance(vocab, TokenizerVocab):
                raise ValueError(f"{self.source} was trained with no tokenizer; leave out data.tokenizer {given!r}")
            if vocab.json != TokenizerVocab.from_file(given).json:
                raise ValueError(f"{self.source} was not trained with data.tokenizer {given!r}; pass the one it was")
        if isinstance(vocab, WordVocab):  # data.vocab_words is a cap: a small corpus may fill less of it
            words = self.setting("vocab_size", len(vocab)) - 2 - (self.kind == "LitMaskedLM")  # <pad>, <unk>, [MASK]
            if (asked := data.get("vocab_words")) not in (None, words):
                raise ValueError(f"{self.source} was trained with a vocabulary of {words} words, and this run has "
                                 f"data.vocab_words {asked}; pass --data.vocab_words {words}")  # fmt: skip
        key = "context" if "context" in data else "max_length"
        window, context = data.get(key), self.setting("context")
        if window is None or context is None or window <= context:
            return
        positions = self.setting("positions", "learned")
        if positions == "learned":
            raise ValueError(f"--data.{key} {window} > {context}, the context {self.source} was trained at: its "
                             f"learned position embeddings have no vector past {context}; pass --data.{key} {context} "
                             "or less, or train with model.positions sinusoidal, rope or alibi")  # fmt: skip
        note(f"note: data.{key} {window}, past the training context {context} ({positions} positions)")

    @staticmethod
    def tensors(path: str, flag: str) -> dict:
        """A file of named tensors (``torch.save(model.state_dict())``), read as data: a pickled model, which
        would run code when read, and anything but a mapping, are refused in one line."""
        fix = "save the model's state_dict(), not the model (a pickled model runs code when it is read)"
        state = _load(path, flag, "a file written by torch.save(model.state_dict())", "a file of tensors", fix)
        if not isinstance(state, dict):
            raise ValueError(
                f"{flag} {path!r} holds a {type(state).__name__}, not a state dict; save model.state_dict()"
            )
        refuse_unusable(state, f"{flag} {path!r}")
        return state


@contextmanager
def restoring(source: str):
    """Lightning's restore of a run, where a damaged entry fails with any error deep in torch: named as the
    file's (``source``) in one line."""
    try:
        yield
    except (OSError, MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        ours = tb is not None and str(tb.tb_frame.f_globals.get("__name__")).partition(".")[0] == PROJECT
        if isinstance(e, ValueError) and ours:  # the project's refusal: its own line, with the file
            raise ValueError(str(e) if str(e).startswith(source) else f"{source}: {e}") from e
        # any other error, another library's ValueError too (torch's of an optimizer's state), is the file's damage
        reason = (str(e).splitlines() or [""])[0][:200]
        raise ValueError(f"{source}: its training state does not restore ({type(e).__name__}: {reason}); the file "
                         f"is damaged, or {RETRAIN}") from e  # fmt: skip


def check_linked_sizes(model, data, vocab: Any = None) -> None:
    """The model's sizes against the data's: ``model.context`` comes from the data (another value typed by hand
    would be silently replaced); an encoder-decoder's ``tgt_vocab_size`` is its own, and fewer ids than the data's
    ``vocab`` (a task's fixed alphabet) would fail at the first target past it."""
    targets = model.get("tgt_vocab_size")
    if isinstance(vocab, int) and isinstance(targets, int) and targets < vocab:
        raise ValueError(f"model.tgt_vocab_size {targets} is fewer than the {vocab} ids that the data's targets use; "
                         f"leave it out (the source's vocabulary) or pass at least {vocab}")  # fmt: skip
    given, linked = model.get("context"), data.get("context", data.get("max_length"))
    if given is None or linked is None or given in (linked, TransformerConfig.context):
        return
    key = "data.context" if "context" in data else "data.max_length"
    raise ValueError(f"model.context {given} is set from {key} ({linked}), so it cannot differ; set --{key} {given} "
                     "instead and leave model.context out")  # fmt: skip

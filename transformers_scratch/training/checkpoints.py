"""Reading what ``fit`` wrote, one way for every command (the module and its vocabulary, from one read of the
file); whether a run's data fits a checkpoint; and the run-folder lock: one run, one place."""

from __future__ import annotations

import atexit
import dataclasses
import inspect
import os
import sys
from pathlib import Path
from typing import get_args, get_type_hints

import torch

from ..data import ByteVocab, WordVocab, checkpoint_vocab
from ..data.files import shortened
from ..data.vocab import Vocab
from ..model.config import TransformerConfig, read_settings
from .modules import LitTransformer

CKPT_ALIASES = {"last", "best", "hpc", "registry"}  # names Lightning resolves itself


def check_ckpt_path(ckpt_path: str | None) -> None:
    """A ``--ckpt_path`` must name a file, or one of the names Lightning resolves (``last``, ...)."""
    if ckpt_path and ckpt_path not in CKPT_ALIASES and not Path(ckpt_path).is_file():
        raise FileNotFoundError(
            f"--ckpt_path {ckpt_path!r} does not exist; pass a checkpoint file such as "
            "checkpoints/enwik8/last.ckpt, or 'last' to resume the newest run of this config"
        )


def read_checkpoint(ckpt_path: str) -> dict:
    """The checkpoint's contents, loaded as data (``weights_only``), with one clear error if it cannot be."""
    check_ckpt_path(ckpt_path)
    try:
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    except Exception as e:  # a broken file fails anywhere in torch's reader, with any type of error
        reason = (str(e).splitlines() or ["empty file"])[0][:200]
        raise ValueError(
            f"--ckpt_path {ckpt_path!r} is not a readable checkpoint ({type(e).__name__}: {reason}); "
            "it may be truncated or not written by fit: pass another checkpoint"
        ) from e
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"--ckpt_path {ckpt_path!r} holds no model weights; pass a checkpoint written by fit")
    return checkpoint


def read_state_dict(path: str, flag: str) -> dict:
    """A file of named tensors (``torch.save(model.state_dict())``), read as data: a pickled model, which would
    run code when read, and anything but tensors, are refused in one line."""
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"{flag} {path!r} does not exist; pass a file written by torch.save(model.state_dict())"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a broken file fails anywhere in torch's reader, with any type of error
        reason = (str(e).splitlines() or ["empty file"])[0][:200]
        raise ValueError(
            f"{flag} {path!r} is not a file of tensors ({type(e).__name__}: {reason}); save the model's "
            "state_dict(), not the model (a pickled model runs code when it is read)"
        ) from e
    if not isinstance(state, dict):
        raise ValueError(f"{flag} {path!r} holds a {type(state).__name__}, not a state dict; save model.state_dict()")
    return state


def check_settings(ckpt_path: str, module_class: type[LitTransformer], settings):
    """A checkpoint's model settings against the config class of the module that will take them, before
    anything is built (:func:`~..model.config.read_settings`); returned as a dict of every setting."""
    hint = get_type_hints(module_class.__init__).get("model")
    cls = next((a for a in get_args(hint) if isinstance(a, type) and dataclasses.is_dataclass(a)), None)
    if cls is None or settings is None:
        return settings
    return dataclasses.asdict(read_settings(cls, settings, f"--ckpt_path {ckpt_path!r}"))


def weight_shapes(ckpt_path: str, state) -> dict[str, tuple[int, ...]]:
    """A checkpoint's ``state_dict`` as names and shapes, refused in one line where it is no mapping of tensors."""
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise ValueError(f"--ckpt_path {ckpt_path!r} holds no model weights (its state_dict is no mapping of names "
                         "to tensors); pass a checkpoint written by fit")  # fmt: skip
    return {str(name): tuple(t.shape) for name, t in state.items()}


def check_weights(ckpt_path: str, module: torch.nn.Module, shapes: dict[str, tuple[int, ...]]) -> None:
    """A checkpoint's weights (:func:`weight_shapes`) against the module built from its settings, before a strict
    load, whose RuntimeError lists every key: a name or a shape that the module lacks (a damaged file, or one of
    another layout) is refused in one line, naming the first."""
    ours = {name: tuple(t.shape) for name, t in module.state_dict().items()}
    problems = [f"{name!r} is missing" for name in ours if name not in shapes]
    problems += [f"{name!r} is not one of its weights" for name in shapes if name not in ours]
    problems += [f"{name!r} is {list(shapes[name])}, not {list(shape)}" for name, shape in ours.items()
                 if name in shapes and shapes[name] != shape]  # fmt: skip
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(
            f"--ckpt_path {ckpt_path!r} does not fit the {type(module).__name__} its settings describe: "
            f"{shortened(problems[0])}{more}; the file is damaged, or predates the package's layout or comes from "
            "another version: pass another checkpoint, or train it again with this one"
        )


def load_trained(ckpt_path: str, *takes: type[LitTransformer], command: str = "this command"):
    """The trained module (on the CPU, in eval mode) and the vocabulary it was trained with, from one read of the
    file. ``takes``: the module classes the command can use; a checkpoint of another refuses in one line."""
    checkpoint = read_checkpoint(ckpt_path)
    hparams = {k: v for k, v in (checkpoint.get("hyper_parameters") or {}).items() if not k.startswith("_")}
    written_by = str((checkpoint.get("hyper_parameters") or {}).get("_class_path", "?")).rsplit(".", 1)[-1]
    module_class = next((cls for cls in takes if cls.__name__ == written_by), None)
    if module_class is None:
        names = ", ".join(cls.__name__ for cls in takes)
        raise ValueError(f"--ckpt_path {ckpt_path!r} holds a {written_by}; {command} takes {names}")
    check_settings(ckpt_path, module_class, hparams.get("model"))
    takes_args = inspect.signature(module_class).parameters  # settings since dropped (older layouts) are left out
    try:
        module = module_class(**{k: v for k, v in hparams.items() if k in takes_args})
        check_weights(ckpt_path, module, weight_shapes(ckpt_path, checkpoint["state_dict"]))
        module.load_state_dict(checkpoint["state_dict"])
    except (TypeError, RuntimeError, KeyError) as e:
        reason = (str(e).splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(
            f"--ckpt_path {ckpt_path!r} does not fit this version's {written_by} ({reason}); it predates the "
            "package's layout or comes from another version: train it again with this one"
        ) from e
    return module.eval(), checkpoint_vocab(checkpoint)


def _field(config, key: str, default):
    """A field of a model config saved as a dataclass or as a plain dict."""
    value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
    return default if value is None else value


def check_linked_context(model, data) -> None:
    """``model.context`` comes from the data (``data.context``, or ``data.max_length`` for reviews); a different
    value typed by hand would be silently replaced. (A parsed config cannot tell a typed value from the default,
    so the default itself passes.)"""
    given, linked = model.get("context"), data.get("context", data.get("max_length"))
    if given is None or linked is None or given in (linked, TransformerConfig.context):
        return
    key = "data.context" if "context" in data else "data.max_length"
    raise ValueError(
        f"model.context {given} is set from {key} ({linked}), so it cannot differ; "
        f"set --{key} {given} instead and leave model.context out"
    )


def check_data_fits(ckpt_path: str, trained, vocab: Vocab | None, data) -> None:
    """The data of a run from a checkpoint must give the ids its model reads: the same kind of vocabulary and
    size; windows longer than it was trained on are refused for learned positions (no vector there) and noted
    for the others. ``trained``: the checkpoint's model config; ``data``: the run's data settings."""
    if isinstance(vocab, ByteVocab) and "vocab" in data:
        kind = "bytes" if vocab.symbols is None else "file"
        if data["vocab"] != kind:
            raise ValueError(
                f"--ckpt_path {ckpt_path!r} was trained with data.vocab {kind} ({vocab.size} symbols), and "
                f"this run has data.vocab {data['vocab']}; pass --data.vocab {kind}"
            )
    if isinstance(vocab, WordVocab):
        # data.vocab_words is a cap: the model was sized for the cap, and a small corpus may fill less of it
        words = _field(trained, "vocab_size", len(vocab)) - 2
        if data.get("vocab_words") not in (None, words):
            raise ValueError(
                f"--ckpt_path {ckpt_path!r} was trained with a vocabulary of {words} words, and this "
                f"run has data.vocab_words {data['vocab_words']}; pass --data.vocab_words {words}"
            )
    key = "context" if "context" in data else "max_length"
    window, context = data.get(key), _field(trained, "context", None)
    if window is None or context is None or window <= context:
        return
    positions = _field(trained, "positions", "learned")
    if positions == "learned":
        raise ValueError(
            f"--data.{key} {window} > {context}, the context --ckpt_path {ckpt_path!r} was trained at: its "
            f"learned position embeddings have no vector past {context}; pass --data.{key} {context} or less, "
            "or train with model.positions sinusoidal, rope or alibi"
        )
    print(f"note: data.{key} {window}, past the training context {context} ({positions} positions)", file=sys.stderr)


LOCK = ".fit.lock"
_HELD: dict[Path, int] = {}  # the run folders this process holds: the open descriptor of each one's lock


def _holder(lock: Path) -> str:
    try:
        return f"process {int(lock.read_text()[:20])}"
    except (OSError, ValueError):
        return "a process starting up"


def claim_run_folder(folder: Path, resuming: bool) -> None:
    """One run, one place: a fit holds its checkpoint folder until it ends, and a fresh fit never starts in a
    folder that holds another run's checkpoints. The hold is the kernel's lock (``flock``) on the folder's lock
    file, taken in one step, so that of two fits started at the same moment exactly one wins; it ends with the
    process however that ends, so a killed run leaves nothing to take over but the temporary files its
    interrupted writes left, which are cleared. The file holds the process id, for the refusal to name."""
    import fcntl  # POSIX: Linux and macOS

    folder.mkdir(parents=True, exist_ok=True)
    key, lock = folder.resolve(), folder / LOCK
    while key not in _HELD:
        folder.mkdir(parents=True, exist_ok=True)  # again: a holder that ended removes the folder it left empty
        try:
            fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ValueError(
                f"{folder}/ is in use by another fit ({_holder(lock)}); wait for it to end, or give this run its "
                "own --name"
            ) from None
        try:
            current = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if not current:  # its holder ended and removed it between our open and our lock: a file no one sees
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        _HELD[key] = fd
        atexit.register(release_run_folder, folder)
    if not resuming and (found := sorted(p.name for p in folder.glob("*.ckpt"))):
        release_run_folder(folder)
        raise ValueError(
            f"{folder}/ already holds a run ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}); resume it "
            "with --ckpt_path last, start another with --name NAME, or move that folder away"
        )
    for stale in folder.glob(".*.tmp"):  # an interrupted checkpoint write (the folder is ours now)
        stale.unlink(missing_ok=True)


def release_run_folder(folder: Path) -> None:
    """Give the folder back; a run that wrote nothing there leaves no empty folder (nor an empty parent)."""
    try:
        fd = _HELD.pop(folder.resolve(), None)
    except OSError:
        return
    if fd is None:
        return
    try:
        (folder / LOCK).unlink(missing_ok=True)  # while still held: no one locks a file that is being removed
        for empty in (folder, folder.parent):
            if not any(empty.iterdir()):
                empty.rmdir()
    except OSError:
        pass
    finally:
        os.close(fd)

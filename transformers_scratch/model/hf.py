"""Hugging Face checkpoints in and out: GPT-2, BERT and Llama-family weights loaded exactly into the modules
built here, and the modules written back in the layout ``transformers`` loads.

    from transformers_scratch.model.hf import from_hf, save_hf
    model = from_hf("path/to/gpt2")          # a folder (config.json + *.safetensors), a hub name, or a model
    save_hf(model, "exported/gpt2-again")    # AutoModelForCausalLM.from_pretrained reads it back

What maps where (``model.*`` here on the right):

- ``gpt2`` -> :class:`CausalLM`: pre-norm LayerNorm, learned positions, qkv and other biases, ``gelu_tanh``, tied;
- ``bert`` -> :class:`MaskedLM`, or with ``num_classes`` the :class:`SequenceClassifier`'s encoder: post-norm,
  ``embed_norm``, ``token_types``, ``head_transform``;
- ``llama``, ``qwen2`` -> :class:`CausalLM`: RMSNorm, ``rope`` with its base, ``swiglu``, ``kv_heads``, no biases
  (Qwen2: qkv biases).

Only safetensors are read: a folder with pickled weights alone (``pytorch_model.bin``) is refused. A folder is
untrusted input: its config's sizes are checked against the weights' headers before anything is allocated,
and every tensor must have its place and shape. This module is the only one that touches ``transformers``
(for a hub name or a model object, and only then).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from .config import ClassifierConfig, LMConfig, MaskedLMConfig
from .models import CausalLM, MaskedLM, SequenceClassifier
from .pretrained import clear_unfinished, read_json, refuse_unusable, write_export

HF_FOLDER = "a Hugging Face model's folder (transformers' save_pretrained, or `cli.py export --format hf`)"


class HFError(ValueError):
    """A Hugging Face folder or model this project cannot read exactly; the message names what and why."""


# ---- configs: one table per family, read by from_hf and written by save_hf ----------------------------------
ACTIVATIONS: dict[str, Literal["gelu", "gelu_tanh", "relu"]] = {
    "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
}  # fmt: skip
"""config.json's activations and this project's; an export writes the first name of each."""


@dataclass(frozen=True)
class Family:
    """How a family's config.json and this project's config say the same model, read both ways. ``sizes``: its
    integer keys -> our fields; ``layout``: our settings the family fixes (an export that differs is refused);
    ``eps``, ``tie``: its keys of the norms' epsilon and the tied head, with defaults; ``activation``: its key of
    the activation (None: SwiGLU); ``fixed``: what its config.json must say (or leave out) to map; ``written``:
    what an export adds."""

    about: str
    sizes: dict[str, str]
    layout: dict[str, Any]
    eps: tuple[str, float]
    tie: bool | None
    activation: str | None
    fixed: dict[str, Any]
    written: dict[str, Any]


COMMON = {"vocab_size": "vocab_size", "max_position_embeddings": "context", "hidden_size": "emb",
          "num_attention_heads": "heads", "num_hidden_layers": "depth", "intermediate_size": "ff_hidden"}  # fmt: skip
FAMILIES = {
    "gpt2": Family(
        "GPT-2 (pre-norm LayerNorm, learned positions, a plain MLP)",
        {"vocab_size": "vocab_size", "n_positions": "context", "n_embd": "emb", "n_head": "heads", "n_layer": "depth",
         "n_inner": "ff_hidden"},
        {"pre_norm": True, "positions": "learned", "norm": "layer", "embed_norm": False, "token_types": 0},
        ("layer_norm_epsilon", 1e-5), True, "activation_function",
        {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False},  # 1 / sqrt(head width)
        {"architectures": ["GPT2LMHeadModel"], "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
         "bos_token_id": None, "eos_token_id": None},
    ),
    "bert": Family(
        "BERT (post-norm LayerNorm, learned positions, a plain MLP, its embeddings norm and MLM head transform)",
        COMMON, {"pre_norm": False, "positions": "learned", "norm": "layer", "embed_norm": True},
        ("layer_norm_eps", 1e-12), None, "hidden_act", {"position_embedding_type": "absolute"},
        {"architectures": ["BertForMaskedLM"], "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
         "pad_token_id": 0, "tie_word_embeddings": True},
    ),
    "llama": Family(
        "Llama or Qwen2 (pre-norm RMSNorm, rope, SwiGLU)",
        COMMON,
        {"pre_norm": True, "positions": "rope", "norm": "rms", "activation": "swiglu", "embed_norm": False,
         "token_types": 0},
        ("rms_norm_eps", 1e-6), False, None, {"hidden_act": "silu"},
        {"architectures": ["LlamaForCausalLM"], "attention_dropout": 0.0, "bos_token_id": None, "eos_token_id": None},
    ),
}  # fmt: skip
FAMILIES["qwen2"] = dataclasses.replace(
    FAMILIES["llama"], fixed={**FAMILIES["llama"].fixed, "use_sliding_window": False},
    written={**FAMILIES["llama"].written, "architectures": ["Qwen2ForCausalLM"]})  # fmt: skip


KINDS = {int: ((int,), "an integer"), float: ((int, float), "a number"), bool: ((bool,), "true or false")}


def _get(hf: dict, key: str, kind: type = int, default: Any = None) -> Any:
    """A value of config.json's, of ``kind``: an int, a float (which may be written as 1) or a bool; null: default."""
    value = default if hf.get(key) is None else hf[key]
    types, words = KINDS[kind]
    if not isinstance(value, types) or isinstance(value, bool) != (kind is bool):  # JSON's true is no number
        raise HFError(f"config.json's {key}={str(value)[:40]!r} is not {words}")
    return kind(value)


def _rope_base(hf: dict) -> float:
    """The RoPE base, from ``rope_theta`` or (newer configs) ``rope_parameters``; scaled RoPE is refused."""
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    kind = params.get("rope_type", params.get("type", "default")) if isinstance(params, dict) else "?"
    if kind != "default":
        raise HFError(f"config.json's rope type {str(kind)[:40]!r} is not plain RoPE; only rope_type default maps")
    base = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    if not isinstance(base, (int, float)) or base <= 0:
        raise HFError(f"config.json's rope_theta={str(base)[:40]!r} is not a positive number")
    return float(base)


def config_from_hf(hf: dict, num_classes: int | None = None):
    """This project's config for a Hugging Face ``config.json`` (a dict): its family's table, then what the
    table cannot say (BERT's token types, Llama's and Qwen2's biases, key/value heads and RoPE)."""
    kind = hf.get("model_type")
    if kind is None and "format" in hf and "model" in hf:  # pretrained.py's layout
        raise HFError(f"config.json is this project's export of a {str(hf['model'])[:40]}, not a Hugging Face "
                      "model's: from_pretrained reads it; export the checkpoint with --format hf for one")  # fmt: skip
    if str(kind) not in FAMILIES:  # a list names none
        raise HFError(f"config.json's model_type {str(kind)[:40]!r} is not one of {', '.join(FAMILIES)}")
    family = FAMILIES[str(kind)]
    cfg: dict[str, Any] = {
        ours: None if ours == "ff_hidden" and hf.get(key) is None else _get(hf, key)
        for key, ours in family.sizes.items()
    }  # GPT-2's n_inner may be null: 4 x the width
    cfg |= {**family.layout, "norm_eps": _get(hf, family.eps[0], float, family.eps[1]), "qkv_bias": True, "bias": True}
    if family.activation is not None:
        if str(hf.get(family.activation)) not in ACTIVATIONS:
            raise HFError(f"config.json's {family.activation}={str(hf.get(family.activation))[:40]!r} has no "
                          f"counterpart here ({', '.join(ACTIVATIONS)})")  # fmt: skip
        cfg["activation"] = ACTIVATIONS[hf[family.activation]]
    if family.tie is not None:
        cfg["tie_weights"] = _get(hf, "tie_word_embeddings", bool, family.tie)
    for key, want in family.fixed.items():
        if hf.get(key, want) != want:
            raise HFError(f"config.json's {key}={str(hf.get(key))[:40]!r} has no counterpart here; only {want!r} maps")
    if kind == "bert":
        cfg["token_types"] = _get(hf, "type_vocab_size")
        if num_classes is not None:
            return ClassifierConfig(**cfg, num_classes=num_classes, pool="mean")
        return MaskedLMConfig(**cfg, head_transform=True)
    if kind in ("llama", "qwen2"):
        cfg |= _llama_only(hf, kind, cfg["emb"], cfg["heads"])
    return LMConfig(**cfg)


def _llama_only(hf: dict, kind: str, emb: int, heads: int) -> dict:
    """Llama's and Qwen2's head width, biases, key/value heads and RoPE base."""
    if hf.get("head_dim") not in (None, emb // heads):
        raise HFError(f"config.json's head_dim={hf['head_dim']} is not hidden_size / num_attention_heads")
    if kind == "llama":
        attention, mlp = _get(hf, "attention_bias", bool, False), _get(hf, "mlp_bias", bool, False)
        if attention != mlp:  # here one switch serves the output projection and the feed-forward
            raise HFError(f"config.json's attention_bias={attention} and mlp_bias={mlp} differ; they map only together")
        qkv_bias, bias = attention, attention
    else:
        qkv_bias, bias = True, False
    return {"qkv_bias": qkv_bias, "bias": bias, "kv_heads": _get(hf, "num_key_value_heads", int, heads),
            "rope_base": _rope_base(hf)}  # fmt: skip


# ---- names ---------------------------------------------------------------------------------------------
Names = list[tuple[str, list[str], bool]]
"""(our tensor, the Hugging Face tensors it joins (their separate q, k, v), whether GPT-2's Conv1D transposes)."""


def module(ours: str, theirs: str | list[str], params: tuple[str, ...] = ("weight", "bias"), conv=False) -> Names:
    """The names of one module's ``params`` here and in Hugging Face's layout."""
    theirs = [theirs] if isinstance(theirs, str) else theirs
    return [(f"{ours}.{p}", [f"{t}.{p}" for t in theirs], conv and p == "weight") for p in params]


def _names(family: str, cfg) -> Names:
    """Every tensor's name here and in the family's base model (``PREFIX`` left out): the family's modules (here,
    there, their tensors, transposed), then each block's."""
    w, wb = ("weight",), ("weight", "bias")
    top: list[tuple[Any, ...]] = [] if getattr(cfg, "tie_weights", True) else [("head", "lm_head", w)]
    block: list[tuple[Any, ...]]
    if family == "gpt2":
        top += [("embed.tokens", "wte", w), ("embed.positions.table", "wpe", w), ("stack.norm", "ln_f", wb)]
        layer = "h.{}."
        block = [("norm1", "ln_1", wb), ("attn.qkv", "attn.c_attn", wb, True), ("attn.out", "attn.c_proj", wb, True),
                 ("norm2", "ln_2", wb), ("ff.0", "mlp.c_fc", wb, True), ("ff.2", "mlp.c_proj", wb, True)]  # fmt: skip
    elif family == "bert":
        e, t = "embeddings.", "cls.predictions.transform."
        top += [("embed.tokens", e + "word_embeddings", w), ("embed.positions.table", e + "position_embeddings", w),
                ("embed.types", e + "token_type_embeddings", w), ("embed.norm", e + "LayerNorm", wb)]  # fmt: skip
        if isinstance(cfg, MaskedLMConfig):
            top += [("transform.0", t + "dense", wb), ("transform.2", t + "LayerNorm", wb),
                    ("head", "cls.predictions", ("bias",))]  # fmt: skip
        layer = "encoder.layer.{}."
        block = [("attn.qkv", [f"attention.self.{p}" for p in ("query", "key", "value")], wb),
                 ("attn.out", "attention.output.dense", wb), ("norm1", "attention.output.LayerNorm", wb),
                 ("ff.0", "intermediate.dense", wb), ("ff.2", "output.dense", wb),
                 ("norm2", "output.LayerNorm", wb)]  # fmt: skip
    else:  # Llama, Qwen2: one switch for the biases of the output projection and the feed-forward
        top += [("embed.tokens", "model.embed_tokens", w), ("stack.norm", "model.norm", w)]
        layer, biases = "model.layers.{}.", wb if cfg.bias else w
        block = [("attn.qkv", [f"self_attn.{p}_proj" for p in "qkv"], wb if cfg.qkv_bias else w),
                 ("norm1", "input_layernorm", w), ("norm2", "post_attention_layernorm", w),
                 ("attn.out", "self_attn.o_proj", biases), ("ff.gate", "mlp.gate_proj", biases),
                 ("ff.up", "mlp.up_proj", biases), ("ff.down", "mlp.down_proj", biases)]  # fmt: skip
    per_block = [name for entry in block for name in module(*entry)]
    return [name for entry in top for name in module(*entry)] + [
        (f"stack.blocks.{i}.{ours}", [layer.format(i) + n for n in theirs], conv)
        for i in range(cfg.depth) for ours, theirs, conv in per_block]  # fmt: skip


PREFIX = {"gpt2": "transformer.", "bert": "bert."}  # the base model's prefix inside the task model's names


def _prefixed(family: str, name: str) -> str:
    """The name in the task model's state dict (GPT2LMHeadModel, BertForMaskedLM): prefixed, but for the head's."""
    return name if name.startswith(("cls.", "lm_head.")) else PREFIX.get(family, "") + name


# ---- reading ---------------------------------------------------------------------------------------------
def _weight_files(folder: Path) -> list[Path]:
    files = sorted(file for file in folder.glob("*.safetensors") if file.is_file())  # a pipe: waited on for ever
    if not files:
        pickled = [p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt")]
        if pickled:
            raise HFError(
                f"{str(folder)!r} holds pickled weights only ({', '.join(pickled[:3])}), which this project never "
                "unpickles; save the model with safe_serialization (the default) to get .safetensors"
            )
        raise HFError(f"{str(folder)!r} holds no *.safetensors weights; pass {HF_FOLDER}")
    return files


def _read_folder(folder: Path) -> tuple[dict, dict[str, tuple], Callable[[str], torch.Tensor]]:
    """config.json, every tensor's shape from the safetensors headers, and a reader of one tensor."""
    from safetensors import safe_open

    path = folder / "config.json"
    if not path.is_file():
        raise HFError(f"{str(folder)!r} holds no config.json; pass {HF_FOLDER}")
    hf = read_json(path, f"pass {HF_FOLDER}", HFError)
    shapes, handles = {}, {}
    for file in _weight_files(folder):
        try:
            handle = safe_open(str(file), "pt")
            for key in handle.keys():
                shapes[key], handles[key] = tuple(handle.get_slice(key).get_shape()), handle
        except Exception as e:  # safetensors raises its own error types for a broken header
            raise HFError(f"{str(file)!r} is not a readable safetensors file ({str(e)[:120]})") from None
    return hf, shapes, lambda key: handles[key].get_tensor(key)


def local_folder(source: str | os.PathLike) -> Path:
    """A folder as given, or for a hub name (``org/name``) that is no path here, its download: configs,
    safetensors and the tokenizer only (huggingface_hub comes with transformers; only a hub name needs it)."""
    folder = Path(source)
    if not folder.exists() and isinstance(source, str) and source.count("/") == 1 and not source.startswith((".", "/")):
        from huggingface_hub import snapshot_download

        try:
            folder = Path(snapshot_download(source, allow_patterns=["*.json", "*.safetensors", "tokenizer*"]))
        except Exception as e:  # no network, no such repository, a gated one: huggingface_hub's own long report
            raise HFError(
                f"{source!r} is no folder here, and the Hugging Face Hub did not give it ({type(e).__name__}); pass "
                "a local folder written by save_pretrained, or download it first where the Hub can be reached"
            ) from None
    return folder


def _source(source) -> tuple[dict, dict[str, tuple], Callable[[str], torch.Tensor]]:
    """A folder, a hub name or a ``transformers`` model object."""
    if isinstance(source, nn.Module):
        state = source.state_dict()
        config: Any = source.config  # a transformers PreTrainedModel's
        return config.to_dict(), {k: tuple(v.shape) for k, v in state.items()}, state.__getitem__
    folder = local_folder(source)
    if not folder.is_dir():
        raise HFError(f"{str(source)[:80]!r} is not a folder (or a hub name); pass {HF_FOLDER}")
    return _read_folder(folder)


def from_hf(source, num_classes: int | None = None, device: str | torch.device = "cpu") -> nn.Module:
    """The module here that a Hugging Face GPT-2, BERT or Llama-family checkpoint maps to, with its weights, in
    eval mode. ``source``: a folder (``config.json`` and ``*.safetensors``), a hub name, or a ``transformers``
    model. ``num_classes``: for a BERT encoder, build the classifier it starts (a new head) instead of the MLM.
    A folder that cannot be read raises :class:`HFError` (a ``ValueError``) naming it."""
    try:
        return _from_hf(source, num_classes, device)
    except HFError as e:
        if isinstance(source, nn.Module) or str(source) in str(e):
            raise  # named already
        raise HFError(f"{str(source)!r}: {e}") from None


def _from_hf(source, num_classes: int | None, device: str | torch.device) -> nn.Module:
    hf, shapes, read = _source(source)
    try:
        cfg = config_from_hf(hf, num_classes)
    except (TypeError, ValueError) as e:  # the config's own checks: sizes, divisibility
        raise HFError(str(e) if isinstance(e, HFError) else f"config.json: {str(e)[:200]}") from None
    family = hf["model_type"]
    cfg.refuse_past(sum(math.prod(shape) for shape in shapes.values()), "config.json", "the config does not match its "
                    "weights", HFError)  # fmt: skip
    with torch.device("meta"):  # the shapes to expect, with nothing allocated
        expected = _model_class(cfg)(cfg).state_dict()
    strip = PREFIX.get(family, "")
    original = {k.removeprefix(strip): k for k in shapes}  # a base model's names, or a task model's, stripped
    names = _names(family, cfg)
    wanted = {theirs for _, group, _ in names for theirs in group}
    missing = sorted(wanted - set(original))
    # Buffers and tied copies that some saves include (GPT-2's causal mask, a tied head, position ids), BERT's
    # pooler, and for a classifier the MLM head: left out by name, whole name parts only
    suffixes = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq", "position_ids")
    prefixes = ("lm_head.", "cls.predictions.decoder.", "pooler.", *(("cls.",) if num_classes is not None else ()))
    extra = sorted(k for k in original if k not in wanted and not k.endswith(suffixes) and not k.startswith(prefixes))
    if missing or extra:
        raise HFError(f"the weights do not fit config.json's {family}: missing {missing[:3]}, unexpected {extra[:3]}")
    state = {}
    for ours, group, conv in names:
        parts = [shapes[original[name]] for name in group]
        shape = (sum(p[0] for p in parts), *parts[0][1:]) if len(parts) > 1 else parts[0]
        shape = tuple(reversed(shape)) if conv else shape
        if torch.Size(shape) != expected[ours].shape:
            raise HFError(f"{group[0]} has shape {list(parts[0])}, and config.json's sizes give "
                          f"{list(expected[ours].shape)}")  # fmt: skip
        tensors = [read(original[name]) for name in group]
        joined = torch.cat(tensors) if len(tensors) > 1 else tensors[0]
        state[ours] = (joined.t() if conv else joined).contiguous()  # as stored: the load casts it, once checked
    refuse_unusable(state, "the model" if isinstance(source, nn.Module) else repr(str(source)), HFError)
    model = _model_class(cfg)(cfg)
    unset = set(model.load_state_dict(state, strict=False).missing_keys) - {"head.weight", "head.bias"}
    assert not unset, f"the {family} table leaves {sorted(unset)} unset"  # all but a tied head, or a new one
    return model.to(device).eval()


def _model_class(cfg) -> type[nn.Module]:
    return {LMConfig: CausalLM, MaskedLMConfig: MaskedLM, ClassifierConfig: SequenceClassifier}[type(cfg)]


# ---- writing ---------------------------------------------------------------------------------------------
def hf_family(model: CausalLM | MaskedLM) -> tuple[str, dict]:
    """The Hugging Face family that expresses ``model`` exactly, and its config.json, from the family's table; or
    one line naming the settings that it lacks."""
    cfg: Any = model.cfg  # LMConfig or MaskedLMConfig: the family's table names the fields each has
    name = type(model).__name__

    def refuse(option: str, why: str) -> None:
        raise HFError(f"model {option} has no counterpart in {why}; train with the family's layout to export it")

    if cfg.kv_heads not in (None, cfg.heads) and cfg.positions != "rope":
        refuse(f"kv_heads={cfg.kv_heads}", "GPT-2 or BERT (grouped-query attention is Llama's)")
    if cfg.sparse is not None:
        raise HFError("model sparse attention has no counterpart in GPT-2, BERT or Llama, whose heads see every "
                      "earlier position; share the checkpoint itself, which sample, test and attention "
                      "read")  # fmt: skip
    if isinstance(model, MaskedLM):
        kind = "bert"
    elif isinstance(model, CausalLM) and cfg.positions in ("learned", "rope"):
        llama = cfg.qkv_bias == cfg.bias or cfg.bias  # Llama: one switch for all biases; Qwen2: qkv biases only
        kind = "gpt2" if cfg.positions == "learned" else "llama" if llama else "qwen2"
    elif isinstance(model, CausalLM):
        refuse(f"positions {cfg.positions}", "GPT-2 (learned) or Llama (rope)")
    else:
        raise HFError(f"a {name} has no Hugging Face family here; export a CausalLM or a MaskedLM")
    family = FAMILIES[kind]
    written: dict[str, str] = {v: k for k, v in reversed(ACTIVATIONS.items())}  # gelu_tanh -> gelu_new
    differ = [f"{k} {str(getattr(cfg, k)).lower()}" for k, v in family.layout.items() if getattr(cfg, k) != v]
    differ += [f"activation {cfg.activation}"] if family.activation and cfg.activation not in written else []
    differ += ["head_transform false"] if kind == "bert" and not cfg.head_transform else []
    if differ:
        refuse(", ".join(differ), family.about)
    out = {"model_type": kind, "vocab_size": cfg.vocab_size, "torch_dtype": "float32", **family.fixed, **family.written,
           **{key: cfg.hidden if ours == "ff_hidden" else getattr(cfg, ours) for key, ours in family.sizes.items()},
           family.eps[0]: cfg.norm_eps}  # fmt: skip
    if family.activation is not None:
        out[family.activation] = written[cfg.activation]
    if family.tie is not None:
        out["tie_word_embeddings"] = cfg.tie_weights
    if kind == "bert":
        out["type_vocab_size"] = max(cfg.token_types, 1)
    if kind in ("llama", "qwen2"):
        out |= {"num_key_value_heads": cfg.kv_heads or cfg.heads, "head_dim": cfg.emb // cfg.heads,
                "rope_theta": cfg.rope_base, **({"attention_bias": cfg.bias, "mlp_bias": cfg.bias} if kind == "llama"
                                                 else {})}  # fmt: skip
    return kind, out


def save_hf(model: CausalLM | MaskedLM, folder: str | os.PathLike) -> Path:
    """Write ``model`` as a Hugging Face folder (config.json, model.safetensors) into a new or empty folder.
    An option the family lacks but can express with zeros (a missing bias, an unused token type) is written as
    zeros, which leave the logits as they are."""
    from safetensors.torch import save_file

    family, hf = hf_family(model)
    folder = clear_unfinished(Path(folder))
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{str(folder)!r} is not empty; pass a new or empty folder")
    state, cfg = model.state_dict(), model.cfg
    kv = (cfg.kv_heads or cfg.heads) * (cfg.emb // cfg.heads)  # rows of a key or value projection: g * s
    out = {}
    for ours, group, conv in _names(family, cfg):
        if ours in state:
            tensor = state[ours].t() if conv else state[ours]
        elif ours.endswith(".bias"):  # a bias this model does without: zeros
            tensor = torch.zeros(state[ours.removesuffix(".bias") + ".weight"].shape[0])
        elif ours == "embed.types.weight":  # no token types: one type, adding zeros
            tensor = torch.zeros(1, cfg.emb)
        else:
            raise HFError(f"model has no {ours} to write")
        sizes = [cfg.emb, kv, kv] if len(group) > 1 else [tensor.shape[0]]  # a joined group: q, k, v
        for name, part in zip(group, tensor.split(sizes), strict=True):
            out[_prefixed(family, name)] = part.detach().float().contiguous().clone()
    return write_export(folder, lambda path: save_file(out, path, metadata={"format": "pt"}), hf)

"""LightningModules: loss, metrics, optimiser and schedule, logging. The models stay plain nn.Modules.

Logged names: ``train/loss`` (nats), ``train/bpc``, ``val/bpc``, ``test/bpc`` for the character LM;
``train/loss``, ``val/loss``, ``val/acc``, ``test/acc`` for the classifier; ``train/token_acc``,
``val/token_acc``, ``val/exact``, ``test/exact`` (greedy exact match) for the encoder-decoder; ``train/loss``,
``train/acc``, ``val/loss``, ``val/acc`` over the masked positions for masked-token pretraining;
``train/tokens_per_s`` and, on GPU, ``train/mfu`` and ``train/peak_mem_gb`` for all (the ``Throughput`` callback).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, TypeVar, cast

import lightning as L
import torch
import torch.nn.functional as F
import torchmetrics
from lightning.pytorch.strategies import FSDPStrategy
from torch import Tensor, nn

from ..bounds import Memory, PathName, Positive, Rate, check_args
from ..data.ids import IGNORE_INDEX
from ..data.vocab import Vocab
from ..model.blocks import TransformerBlock
from ..model.config import (
    ClassifierConfig,
    EncoderDecoderConfig,
    LMConfig,
    MaskedLMConfig,
    SparseConfig,
    XLConfig,
    read_settings,
)
from ..model.generation import OVERFLOW
from ..model.hf import from_hf
from ..model.models import CausalLM, EncoderDecoder, MaskedLM, SequenceClassifier, encoder_state
from ..model.xl import TransformerXL
from .checkpoints import Checkpoint, restoring
from .console import note
from .optim import OptimConfig, build_optimizer, continue_from, save_resume_state

LN2 = math.log(2)


# Checkpoints hold these configs in their hyper-parameters; let torch.load(weights_only=True) rebuild them.
torch.serialization.add_safe_globals(
    [MaskedLMConfig, LMConfig, ClassifierConfig, EncoderDecoderConfig, XLConfig, OptimConfig, SparseConfig]
)


def as_config(value, cls):
    """A config from what a checkpoint or the CLI hands over: an instance, a dict of its fields, or None."""
    if value is None:
        return cls()
    if not isinstance(value, dict | cls):
        raise ValueError(f"{cls.__name__} settings {str(value)[:40]} are no mapping of settings")
    return cls(**value) if isinstance(value, dict) else value


Compile = bool | Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
"""``compile``: off, on (torch.compile's default mode), or a mode by name. "reduce-overhead" replays the
compiled step as CUDA graphs, which pays off where a step is many short kernels (a small model on a GPU)."""


def compile_mode(value: Compile) -> str | None:
    """torch.compile's ``mode`` for a ``compile`` setting that is on."""
    return value if isinstance(value, str) else None


class LitTransformer(L.LightningModule):
    """What every experiment shares: the optimizer (:mod:`.optim`), compile, sharding, training logs. A module
    knows nothing of the data: its sizes reach the model config through the CLI's argument links."""

    model: nn.Module
    optim: OptimConfig
    compile: Compile = False  # type: ignore[assignment]  # the setting, in place of nn.Module.compile
    output_size: int  # width of the model's last matmul, for the FLOP count
    checkpoint_metric: tuple[str, str, str]  # (monitored metric, min or max, checkpoint file name pattern)
    val_metrics: tuple[str, ...]  # what its validation logs: a callback may monitor these (checked before fit)
    compiled: tuple[Any, ...] = ()  # a tuple, so outside the module tree: checkpoints hold the plain model
    shown: dict[str, float]  # host copies of the last logged training values, for the progress bar
    schedule_steps: int | None = None
    resumed: dict | None = None  # the checkpoint this fit resumes, until training starts
    pretrained: str | None = None  # a checkpoint whose weights start the model (the modules that take one)
    start: dict[str, Tensor] | None = None  # its weights, once read and checked (:meth:`read_pretrained`)

    def read_pretrained(self) -> Vocab | None:
        """Read ``pretrained`` once and check it against this model; keep its weights for the start of fit, and
        return its vocabulary, which the data must give."""
        raise NotImplementedError(f"{type(self).__name__} takes no model.pretrained")

    def on_fit_start(self) -> None:
        if self.pretrained and self.trainer.ckpt_path is None:  # a resumed run's weights are its own
            if self.sharded:
                raise ValueError("model.pretrained loads a whole model: train without FSDP")
            if self.start is None:
                self.read_pretrained()
            missing, unexpected = self.model.load_state_dict(cast(dict, self.start), strict=False)
            assert not unexpected and all(k.startswith(("head.", "cls")) for k in missing), (missing, unexpected)
            self.start = None
            note(f"model.pretrained: the weights of {self.pretrained} start this run")

    def batch_ids(self, batch) -> Tensor:
        """The token ids (b, t) a training batch feeds the model: what throughput counts."""
        return batch[0]

    @staticmethod
    def finite(score: Tensor) -> Tensor:
        """A score that validation, test or predict reports (a loss, a prediction's logits), refused where the
        weights are so large that it overflows: it would print as inf or NaN."""
        if not score.isfinite().all():
            raise FloatingPointError(OVERFLOW)
        return score

    def configure_model(self) -> None:
        """Hardware-dependent set-up, once the trainer knows the devices and before it wraps the model."""
        if torch.cuda.is_available():
            torch.set_float32_matmul_precision("high")  # fp32 matmuls on TF32 (cuDNN's already are)
        if self.sharded and "auto_wrap_policy" not in cast(FSDPStrategy, self.trainer.strategy).kwargs:
            # Each transformer block is its own FSDP unit (gathered for its forward and backward only); Lightning
            # then wraps this module as the root unit, which holds the embeddings, final norm and output layer.
            # No public hook sets the policy once the strategy exists, so it goes into the strategy's FSDP
            # kwargs; tests/test_distributed.py pins the units this gives (the root plus one per block).
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy

            cast(FSDPStrategy, self.trainer.strategy).kwargs["auto_wrap_policy"] = ModuleWrapPolicy({TransformerBlock})
        if self.compile and not self.compiled:
            self.compiled = (torch.compile(self.model, mode=compile_mode(self.compile)),)

    @property
    def sharded(self) -> bool:
        """Whether the trainer shards this module with FSDP (no trainer: loaded from a checkpoint)."""
        try:
            return isinstance(self.trainer.strategy, FSDPStrategy)
        except RuntimeError:  # "not attached to a Trainer"
            return False

    @property
    def net(self) -> nn.Module:
        """The model to run: compiled when ``compile`` is on, else the model itself."""
        return self.compiled[0] if self.compiled else self.model

    def should_log(self) -> bool:
        """Whether this training step is one of the trainer's logging steps (every ``log_every_n_steps``
        optimizer steps, counted from 1, as Lightning's own logging does)."""
        every: int = self.trainer.log_every_n_steps  # type: ignore[attr-defined]  # set by Lightning's logger connector
        return (self.trainer.global_step + 1) % every == 0

    def log_train(self, **values) -> None:
        """Log training values on a logging step, to the loggers only (Lightning's ``prog_bar`` would sync with
        the GPU every batch); the progress bar shows the host copies made here."""
        self.log_dict({f"train/{k}": v for k, v in values.items()})
        shown = {k: float(v.detach() if torch.is_tensor(v) else v) for k, v in values.items()}
        self.shown = {**getattr(self, "shown", {}), **shown}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Under FSDP, clip by the norm of the whole gradient: each rank holds only a shard, so the root FSDP
        unit computes the norm across ranks (Lightning's FSDP precision refuses ``norm`` clipping itself)."""
        if self.sharded and gradient_clip_val and gradient_clip_algorithm in (None, "norm"):
            root: Any = self.trainer.strategy.model  # the root FSDP unit
            root.clip_grad_norm_(gradient_clip_val)
            return
        if gradient_clip_val and getattr(self.trainer.precision_plugin, "scaler", None) is None:
            # No loss scaling (fp32, bf16): the gradients are true, so clip them here. Lightning's mixed-precision
            # plugin refuses to clip for a fused AdamW, which it suspects of unscaling inside.
            params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            if gradient_clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
            else:
                torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    @property
    def lr(self) -> float:
        """The peak learning rate, ``model.optim.lr``: Lightning's LearningRateFinder reads and sets it."""
        return self.optim.lr

    @lr.setter
    def lr(self, value: float) -> None:
        self.optim.lr = value

    def configure_optimizers(self):
        total = self.optim.total_steps or self.trainer.estimated_stepping_batches
        scaled = self.trainer.precision in ("16-mixed", "16")  # a GradScaler steps the optimizer
        config, self.schedule_steps = build_optimizer(self, self.optim, total, scaled)
        return config

    # ---- exact resume (.optim): the random stream continues, this run's optimizer settings apply ----
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        save_resume_state(checkpoint, self.trainer.global_step, self.schedule_steps)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.resumed = checkpoint  # applied when training starts: after Lightning restored the optimizer

    def on_train_start(self) -> None:
        if self.resumed is not None:
            with restoring(f"--ckpt_path {self.trainer.ckpt_path!r}"):
                continue_from(self.resumed, self.optim, self.schedule_steps, self.trainer.lr_scheduler_configs,
                              self.trainer.global_step)  # fmt: skip
            self.resumed = None


def read_pretrained(path: str, cfg: ClassifierConfig) -> tuple[dict[str, Tensor], Vocab | None]:
    """The encoder of a :class:`LitMaskedLM` checkpoint, checked against the classifier it will start, and the
    vocabulary it was pretrained with, from one read of the file."""
    ckpt = Checkpoint(path, "model.pretrained")
    ckpt.refuse_kind(LitMaskedLM, command="fine-tuning")
    assert ckpt.state is not None
    state = {k.removeprefix("model."): v for k, v in ckpt.state.items() if k.startswith("model.")}
    if not state:
        raise ValueError(f"{ckpt.source} holds no model weights; pass a checkpoint written by fit")
    return encoder_state(read_settings(MaskedLMConfig, ckpt.model or {}, ckpt.source), state, cfg), ckpt.vocab


def pretrained_model(module: L.LightningModule, source: str, data) -> Any:
    """``init_from``: the Hugging Face model (for a classifier, the BERT encoder under a new head of
    ``data.num_classes``), checked against the data's sizes (linked into ``data``); the module's
    hyper-parameters then hold its architecture, so that a checkpoint reloads without the folder."""
    try:
        model: Any = from_hf(source, num_classes=getattr(data, "num_classes", None)).train()
    except ValueError as e:  # which setting named the folder, with the folder and the reason
        raise ValueError(f"model.init_from {e}") from None
    wanted = SequenceClassifier if isinstance(data, ClassifierConfig) else CausalLM
    if not isinstance(model, wanted):
        raise ValueError(
            f"model.init_from {source!r} holds a {type(model).__name__} and {type(module).__name__} fine-tunes a "
            f"{wanted.__name__}: start a LitCharLM from GPT-2 or Llama weights, a LitClassifier from BERT's"
        )
    if model.cfg.vocab_size < data.vocab_size or model.cfg.context < data.context:
        raise ValueError(
            f"model.init_from {source!r} reads {model.cfg.vocab_size:,} ids and {model.cfg.context:,} positions, "
            f"and the data gives {data.vocab_size:,} ids in windows of {data.context:,}: tokenize with its "
            f"tokenizer (--data.tokenizer {source}) and keep the data's windows at most {model.cfg.context:,}"
        )
    if (model.cfg.vocab_size, model.cfg.context) != (data.vocab_size, data.context):
        model = fitted(model, data.vocab_size, data.context)
    module.hparams["model"], module.hparams["init_from"] = dataclasses.asdict(model.cfg), None
    return model


Fitted = TypeVar("Fitted", bound=CausalLM | SequenceClassifier)


def fitted(model: Fitted, vocab_size: int, context: int) -> Fitted:
    """The model cut to the data's ids and windows, as every model here is sized: the token rows past the
    tokenizer's (padding rows a checkpoint may carry) and the learned positions past the windows left out."""
    cfg = dataclasses.replace(model.cfg, vocab_size=vocab_size, context=context)
    rows = {"embed.tokens.weight": vocab_size, "head.weight": vocab_size, "embed.positions.table.weight": context}
    state = {k: v[: rows[k]] if k in rows else v for k, v in model.state_dict().items()}  # a class head: no-op
    smaller = cast(Fitted, type(model)(cast(Any, cfg)))  # cfg is model.cfg's own class
    smaller.load_state_dict(state)
    note(f"model.init_from: {model.cfg.vocab_size:,} ids and {model.cfg.context:,} positions cut to the data's "
         f"{vocab_size:,} and {context:,}")  # fmt: skip
    smaller.train()
    return smaller


class LitClassifier(LitTransformer):
    """Sequence classification with cross-entropy and accuracy (IMDb sentiment)."""

    checkpoint_metric = ("val/acc", "max", "epoch{epoch}-acc{val/acc:.4f}")
    val_metrics = ("val/loss", "val/acc")

    def __init__(
        self,
        model: ClassifierConfig | None = None,
        optim: OptimConfig | None = None,
        compile: Compile = False,
        pretrained: PathName | None = None,
        init_from: PathName | None = None,
    ) -> None:
        """
        Args:
            model: The transformer's sizes.
            optim: Optimiser and schedule.
            compile: Run the model through torch.compile, true or a mode (checkpoints still load without it).
            pretrained: Fine-tune: a LitMaskedLM checkpoint (masked-token pretraining) whose embeddings and
                blocks start the classifier when fit starts (not when it resumes). Its sizes and vocabulary
                must be this run's.
            init_from: Fine-tune a Hugging Face BERT encoder: a folder (config.json and safetensors) or hub name.
                Its config decides the architecture (model sizes are then unused) and its weights start the
                encoder, under a new head; tokenize with its tokenizer (--data.tokenizer, the same folder).
        """
        super().__init__()
        self.save_hyperparameters()
        check_args(LitClassifier.__init__, self.hparams)
        model = as_config(model, ClassifierConfig)
        self.optim, self.compile, self.pretrained = as_config(optim, OptimConfig), compile, pretrained
        self.model: SequenceClassifier = (
            pretrained_model(self, init_from, model) if init_from else SequenceClassifier(model)
        )
        model = self.model.cfg
        self.output_size = model.num_classes
        acc = lambda: torchmetrics.Accuracy(task="multiclass", num_classes=model.num_classes)  # noqa: E731
        self.train_acc, self.val_acc, self.test_acc = acc(), acc(), acc()

    def read_pretrained(self) -> Vocab | None:
        self.start, vocab = read_pretrained(cast(str, self.pretrained), self.model.cfg)
        return vocab

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.net(ids, mask)

    def _step(self, batch, stage: str, acc: torchmetrics.Metric) -> Tensor:
        ids, mask, labels = batch
        logits = self(ids, mask)
        loss = F.cross_entropy(logits.float(), labels)
        acc.update(logits, labels)
        if stage == "train":
            if self.should_log():
                self.log_train(loss=loss, acc=acc.compute())  # accuracy over the steps since the last log
                acc.reset()
        else:
            self.log(f"{stage}/loss", self.finite(loss), prog_bar=True, batch_size=len(labels), sync_dist=True)
            self.log(f"{stage}/acc", acc, prog_bar=True, batch_size=len(labels))
        return loss

    def training_step(self, batch, batch_idx: int) -> Tensor:
        return self._step(batch, "train", self.train_acc)

    def validation_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "val", self.val_acc)

    def test_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "test", self.test_acc)

    def predict_step(self, batch, batch_idx: int) -> Tensor:
        ids, mask = batch[:2]
        return self.finite(self(ids, mask).float()).softmax(-1)  # (b, c) class probabilities


class LitMaskedLM(LitTransformer):
    """Masked-token pretraining (BERT): cross-entropy on the chosen positions only, and their accuracy."""

    checkpoint_metric = ("val/loss", "min", "step{step}-loss{val/loss:.4f}")
    val_metrics = ("val/loss", "val/acc")

    def __init__(
        self, model: MaskedLMConfig | None = None, optim: OptimConfig | None = None, compile: Compile = False
    ) -> None:
        """
        Args:
            model: The encoder's sizes: the classifier's that it will start (the data adds the [MASK] id).
            optim: Optimiser and schedule.
            compile: Run the model through torch.compile, true or a mode (checkpoints still load without it).
        """
        super().__init__()
        self.save_hyperparameters()
        check_args(LitMaskedLM.__init__, self.hparams)
        model = as_config(model, MaskedLMConfig)
        self.optim, self.compile = as_config(optim, OptimConfig), compile
        self.model: MaskedLM = MaskedLM(model)
        self.output_size = model.vocab_size
        acc = lambda: torchmetrics.Accuracy(task="multiclass", num_classes=model.vocab_size, ignore_index=IGNORE_INDEX)  # noqa: E731
        self.train_acc, self.val_acc = acc(), acc()

    def forward(self, ids: Tensor, mask: Tensor | None = None, chosen: Tensor | None = None) -> Tensor:
        return self.net(ids, mask, chosen)

    def _step(self, batch, acc: torchmetrics.Metric) -> Tensor:
        """batch: masked ids (b, t), real-token mask (b, t), targets (b, t): the original id where a position
        was chosen, IGNORE_INDEX elsewhere. Only chosen positions go through the output layer."""
        ids, mask, targets = batch
        chosen = targets != IGNORE_INDEX  # (b, t)
        logits = self(ids, mask, chosen)  # (n chosen, v)
        loss = F.cross_entropy(logits.float(), targets[chosen])
        acc.update(logits, targets[chosen])
        return loss

    def training_step(self, batch, batch_idx: int) -> Tensor:
        loss = self._step(batch, self.train_acc)
        if self.should_log():
            self.log_train(loss=loss, acc=self.train_acc.compute())  # over the steps since the last log
            self.train_acc.reset()
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        loss = self.finite(self._step(batch, self.val_acc))
        self.log("val/loss", loss, prog_bar=True, batch_size=int((batch[2] != IGNORE_INDEX).sum()), sync_dist=True)
        self.log("val/acc", self.val_acc, prog_bar=True)


class BitsPerByte(LitTransformer):
    """A language model's steps in bits per byte: the training loss, and validation, test and predict. The model
    says how a batch becomes next-byte logits and targets (``logits_of``); every step here is shared."""

    val_bpc: torchmetrics.MeanMetric
    test_bpc: torchmetrics.MeanMetric
    val_metrics = ("val/bpc",)

    def logits_of(self, batch, training: bool) -> tuple[Tensor, Tensor]:
        """Logits (b, t, v) and targets (b, t) of a batch, for training or for scoring."""
        raise NotImplementedError

    def training_step(self, batch, batch_idx: int) -> Tensor:
        logits, y = self.logits_of(batch, training=True)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        if self.should_log():
            self.log_train(loss=loss, bpc=loss / LN2)
        return loss

    def scored_bits(self, batch) -> tuple[Tensor, Tensor]:
        """Total bits over the bytes this batch scores, and how many it scores (targets of IGNORE_INDEX are scored
        by another window, or lie past a stream's end)."""
        logits, y = self.logits_of(batch, training=False)
        nats = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum", ignore_index=IGNORE_INDEX)
        return self.finite(nats) / LN2, (y != IGNORE_INDEX).sum()

    def _eval_step(self, batch, metric: torchmetrics.MeanMetric) -> None:
        bits, count = self.scored_bits(batch)
        if count:  # a batch may score nothing (the end of a Transformer-XL's streams)
            metric.update(bits / count, weight=count)  # a count-weighted mean: exact bits per byte

    def validation_step(self, batch, batch_idx: int) -> None:
        self._eval_step(batch, self.val_bpc)
        self.log("val/bpc", self.val_bpc, prog_bar=True)

    def test_step(self, batch, batch_idx: int) -> None:
        self._eval_step(batch, self.test_bpc)
        self.log("test/bpc", self.test_bpc)

    def predict_step(self, batch, batch_idx: int) -> Tensor:
        return torch.stack(self.scored_bits(batch))  # bits, bytes scored


class LitCharLM(BitsPerByte, LitTransformer):
    """Next-byte prediction, measured in bits per byte (enwik8, Shakespeare)."""

    checkpoint_metric = ("val/bpc", "min", "step{step}-bpc{val/bpc:.4f}")

    def __init__(
        self,
        model: LMConfig | None = None,
        optim: OptimConfig | None = None,
        compile: Compile = False,
        pretrained: PathName | None = None,
        init_from: PathName | None = None,
    ) -> None:
        """
        Args:
            model: The transformer's sizes.
            optim: Optimiser and schedule.
            compile: Run the model through torch.compile for training and evaluation, true or a mode (checkpoints
                still load without it; sampling runs uncompiled).
            pretrained: Train in stages: a LitCharLM checkpoint whose weights start this run when fit starts (not
                when it resumes), as Press et al.'s Shortformer trains short windows first, then long ones. Its
                sizes and vocabulary must be this run's; the window, the attention pattern (model.sparse), the
                optimizer and the schedule are this run's (a longer window needs positions other than learned).
            init_from: Fine-tune a pretrained model: a Hugging Face GPT-2, Llama or Qwen2 folder (config.json and
                safetensors) or hub name. Its config decides the architecture (model sizes are then unused) and
                its weights start the run; tokenize with its tokenizer (--data.tokenizer, the same folder).
        """
        super().__init__()
        self.save_hyperparameters()
        check_args(LitCharLM.__init__, self.hparams)
        model = as_config(model, LMConfig)
        self.optim, self.compile, self.pretrained = as_config(optim, OptimConfig), compile, pretrained
        self.model: CausalLM = pretrained_model(self, init_from, model) if init_from else CausalLM(model)
        model = self.model.cfg
        self.output_size = model.vocab_size
        self.val_bpc, self.test_bpc = torchmetrics.MeanMetric(), torchmetrics.MeanMetric()

    def forward(self, ids: Tensor) -> Tensor:
        return self.net(ids)

    def logits_of(self, batch, training: bool) -> tuple[Tensor, Tensor]:
        x, y = batch
        return self(x), y

    def read_pretrained(self) -> Vocab | None:
        ckpt = Checkpoint(cast(str, self.pretrained), "model.pretrained")
        ckpt.refuse_kind(LitCharLM, command="model.pretrained")
        ckpt.check_fits(self, fix="train the first stage with this run's sizes (and, for a longer window, positions "
                                  "other than learned)")  # fmt: skip
        self.start = {k.removeprefix("model."): v for k, v in cast(dict, ckpt.state).items()}
        return ckpt.vocab


MEMORY = "xl_memory"  # the checkpoint's entry: every process's training memory, (world, depth, b, m, k), or None


class LitXL(BitsPerByte, LitTransformer):
    """Transformer-XL on ordered byte streams: every training step carries the memory its segment leaves to the
    next (kept in the checkpoint); validation and test walk their split with a memory of ``eval_mem_len``."""

    checkpoint_metric = LitCharLM.checkpoint_metric

    def __init__(
        self,
        model: XLConfig | None = None,
        optim: OptimConfig | None = None,
        compile: Compile = False,
        eval_mem_len: Memory | None = None,
        eval_same_length: bool | None = None,
        eval_clamp_len: Positive | None = None,
        init_from: PathName | None = None,
    ) -> None:
        """
        Args:
            model: The transformer's sizes, and its memory (model.mem_len) during training.
            optim: Optimiser and schedule.
            compile: Run the model through torch.compile, true or a mode (checkpoints still load without it).
            eval_mem_len: Memory during validation, test and predict (None: model.mem_len). Longer than in
                training helps (the paper evaluates enwik8 with 2,100 after training with 512).
            eval_same_length: Every evaluated byte sees exactly eval_mem_len keys (None: model.same_length).
            eval_clamp_len: Clamp distances in evaluation (None: model.clamp_len); the paper's enwik8: 820.
            init_from: Start from the weights of another LitXL checkpoint (such as the one ``convert_xl`` writes);
                its config decides the architecture. Training then starts afresh: steps, optimizer, memory.
        """
        super().__init__()
        self.save_hyperparameters()
        check_args(LitXL.__init__, self.hparams)
        model = as_config(model, XLConfig)
        self.optim, self.compile = as_config(optim, OptimConfig), compile
        self.eval_options = {
            "mem_len": model.mem_len if eval_mem_len is None else eval_mem_len,
            "same_length": model.same_length if eval_same_length is None else eval_same_length,
            "clamp_len": model.clamp_len if eval_clamp_len is None else eval_clamp_len,
        }
        if self.eval_options["same_length"] and not self.eval_options["mem_len"]:  # a query would see no key at all
            raise ValueError(f"model.eval_mem_len {self.eval_options['mem_len']} with same_length: every byte would "
                             "see eval_mem_len keys, none; give it a memory (eval_mem_len 1 or more)")  # fmt: skip
        self.model: TransformerXL = TransformerXL(model)
        if init_from:
            self.model = weights_of(init_from, self)
        self.output_size = model.vocab_size
        self.val_bpc, self.test_bpc = torchmetrics.MeanMetric(), torchmetrics.MeanMetric()
        self.memory: list[Tensor] | None = None  # the training streams' memory
        self.eval_memory: list[Tensor] | None = None

    def _carried(self, memory: list[Tensor] | None, fresh: bool, x: Tensor) -> list[Tensor] | None:
        if fresh or memory is None:
            return None
        if memory[0].size(0) != x.size(0):
            raise ValueError(f"the memory holds {memory[0].size(0)} streams and the batch has {x.size(0)} rows: resume "
                             "with the data.batch_size the run was trained with")  # fmt: skip
        return [m.to(x.device) for m in memory]

    def logits_of(self, batch, training: bool) -> tuple[Tensor, Tensor]:
        """A segment's logits, carrying the training memory, or in scoring the evaluation memory and settings."""
        x, y, fresh = batch  # ordered streams (OrderedTextDataModule): the batch says where they begin
        if training:
            logits, self.memory = self.net(x, self._carried(self.memory, fresh, x))
        else:
            logits, self.eval_memory = self.net(x, self._carried(self.eval_memory, fresh, x), **self.eval_options)
        return logits, y

    def on_validation_epoch_start(self) -> None:
        self.eval_memory = None

    on_test_epoch_start = on_predict_epoch_start = on_validation_epoch_start

    # ---- the memory in checkpoints: every process's, so that each resumes its own streams ----
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        memory = None
        if self.memory is not None:
            memory = torch.stack(self.memory)  # (depth, b, m, k)
            if self.trainer.world_size > 1:
                memory = cast(Tensor, self.all_gather(memory))  # (world, depth, b, m, k)
            else:
                memory = memory[None]
            memory = memory.cpu()
        checkpoint[MEMORY] = memory

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        fitting = self._trainer is not None and self.trainer.state.fn == "fit"
        if MEMORY not in checkpoint and not fitting:  # scoring or sampling: the memory starts empty anyway
            return
        if MEMORY not in checkpoint:
            raise ValueError("the checkpoint holds no Transformer-XL memory, so a run cannot resume from it exactly: "
                             "resume from a last.ckpt written by fit, or start a new run from its weights with "
                             "--model.init_from")  # fmt: skip
        memory = checkpoint[MEMORY]
        if memory is None:
            self.memory = None
            return
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self._trainer else (0, 1)
        depth, width = self.model.cfg.depth, self.model.cfg.emb
        shape = list(memory.shape) if torch.is_tensor(memory) and memory.is_floating_point() else None
        if shape is None or len(shape) != 5 or shape[1] != depth or shape[4] != width:
            raise ValueError(f"the checkpoint's memory is no float tensor of (processes, {depth} layers, streams, "
                             f"positions, {width}), but {shape}; the file is damaged: resume from another")  # fmt: skip
        if shape[0] != world:
            raise ValueError(f"the checkpoint's memory is of {shape[0]} processes and this run has {world}: resume "
                             "with the --trainer.devices it was trained with")  # fmt: skip
        self.memory = list(memory[rank].unbind(0))


def weights_of(path: str, module: LitXL) -> TransformerXL:
    """``init_from``: the model of a LitXL checkpoint (its weights and architecture)."""
    trained, _ = Checkpoint(path, "model.init_from").trained(LitXL, command="model.init_from")
    module.hparams["model"], module.hparams["init_from"] = dataclasses.asdict(trained.model.cfg), None
    return trained.model.train()


class LitSeq2Seq(LitTransformer):
    """Sequence to sequence with the encoder-decoder (transduction tasks): trained with teacher forcing, one
    decoder pass per batch; measured by token accuracy (teacher-forced) and exact match of greedy decoding."""

    checkpoint_metric = ("val/exact", "max", "step{step}-exact{val/exact:.4f}")
    val_metrics = ("val/loss", "val/token_acc", "val/exact")

    def __init__(
        self,
        model: EncoderDecoderConfig | None = None,
        optim: OptimConfig | None = None,
        compile: Compile = False,
        label_smoothing: Rate = 0.0,
    ) -> None:
        """
        Args:
            model: The transformer's sizes (``depth`` encoder blocks, ``decoder_depth`` decoder blocks).
            optim: Optimiser and schedule.
            compile: Run the model through torch.compile for training, true or a mode (decoding runs uncompiled).
            label_smoothing: Cross-entropy label smoothing of the training loss, in [0, 1).
        """
        super().__init__()
        self.save_hyperparameters()
        check_args(LitSeq2Seq.__init__, self.hparams)
        model = as_config(model, EncoderDecoderConfig)
        self.optim, self.compile, self.label_smoothing = as_config(optim, OptimConfig), compile, label_smoothing
        self.model: EncoderDecoder = EncoderDecoder(model)
        classes = self.model.cfg.tgt_vocab_size or model.vocab_size  # set by the config: its own, or the source's
        self.output_size = classes
        acc = lambda: torchmetrics.Accuracy(task="multiclass", num_classes=classes, ignore_index=IGNORE_INDEX)  # noqa: E731
        self.train_acc, self.val_acc, self.test_acc = acc(), acc(), acc()
        self.val_exact, self.test_exact = torchmetrics.MeanMetric(), torchmetrics.MeanMetric()

    def batch_ids(self, batch) -> Tensor:
        return batch[2]  # the decoder's inputs

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: logits (b, t, v) for every target position, in one decoder pass."""
        return self.net(src, tgt_in, src_mask, tgt_in != EncoderDecoder.PAD)

    def training_step(self, batch, batch_idx: int) -> Tensor:
        src, src_mask, tgt_in, tgt_out = batch
        logits = self(src, src_mask, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), label_smoothing=self.label_smoothing)
        self.train_acc.update(logits.flatten(0, 1), tgt_out.flatten())
        if self.should_log():
            self.log_train(loss=loss, token_acc=self.train_acc.compute())  # over the steps since the last log
            self.train_acc.reset()
        return loss

    @torch.no_grad()
    def greedy(self, src: Tensor, src_mask: Tensor, max_new_tokens: int) -> Tensor:
        """Greedy decoding (b, n) from BOS, with the decoder's caches, stopping when every row has ended."""
        return self.model.generate(src, bos_id=EncoderDecoder.BOS, max_new_tokens=max_new_tokens, src_mask=src_mask,
                                   eos_id=EncoderDecoder.EOS)  # fmt: skip

    def _eval_step(self, batch, stage: str, acc: torchmetrics.Metric, exact: torchmetrics.MeanMetric) -> None:
        src, src_mask, tgt_in, tgt_out = batch
        logits = self(src, src_mask, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten())
        acc.update(logits.flatten(0, 1), tgt_out.flatten())
        exact.update(self.exact_match(self.greedy(src, src_mask, tgt_out.size(1)), tgt_out))
        self.log(f"{stage}/loss", loss, batch_size=len(src), sync_dist=True)
        self.log(f"{stage}/token_acc", acc, batch_size=len(src))
        self.log(f"{stage}/exact", exact, prog_bar=True, batch_size=len(src))

    @staticmethod
    def exact_match(decoded: Tensor, tgt_out: Tensor) -> Tensor:
        """Per row, 1.0 where decoding produced the whole target and then the end id, else 0.0. ``decoded`` is
        (b, n) without BOS; ``tgt_out`` (b, t) is target + EOS, padded with IGNORE_INDEX."""
        n = tgt_out.size(1)
        if decoded.size(1) < n:  # every row ended early: pad with ids that never match
            decoded = F.pad(decoded, (0, n - decoded.size(1)), value=-1)
        scored = tgt_out != IGNORE_INDEX
        return ((decoded[:, :n] == tgt_out) | ~scored).all(dim=1).float()

    def validation_step(self, batch, batch_idx: int) -> None:
        self._eval_step(batch, "val", self.val_acc, self.val_exact)

    def test_step(self, batch, batch_idx: int) -> None:
        self._eval_step(batch, "test", self.test_acc, self.test_exact)

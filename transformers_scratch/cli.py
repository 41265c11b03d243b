"""The command line: ``transformers-scratch`` once installed, or ``python cli.py`` in a checkout.

    transformers-scratch fit --config configs/enwik8.yaml                       # train (validate, test, predict alike)
    transformers-scratch fit --config configs/enwik8.yaml --ckpt_path last      # resume
    transformers-scratch sample --ckpt_path checkpoints/enwik8/last.ckpt --prompt "The "

Everything after the subcommand is LightningCLI: ``--print_config``, ``--trainer.precision bf16-mixed``,
``--trainer.devices 2 --trainer.strategy ddp``, ``--model.model.depth 6``, ``--data.batch_size 64``.

A config holds an experiment's model, data and trainer settings. What every run shares is set here, in one
place: the loggers (CSV and W&B) and the callbacks (progress bar, safe checkpoints as ``--checkpoint.*``,
learning-rate monitor, samples as ``--sample.*``, predictions as ``--predictions.*``). A run's name is its
config file's name (``--name`` overrides it): it logs to ``logs/<name>/`` and checkpoints to
``checkpoints/<name>/``. Sizes that come from the data (vocabulary, classes, context) are linked into the
model's config and never typed twice.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import torch
import yaml
from jsonargparse import ArgumentError, ArgumentParser, set_parsing_settings
from lightning import LightningDataModule
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from .callbacks import PredictionWriter, ProgressBar, SafeModelCheckpoint, SampleText, TrainingDiverged
from .checkpoints import check_ckpt_path, load_trained, read_checkpoint
from .config import TransformerConfig
from .data import DataError, checkpoint_vocab
from .data.vocab import vocab_state
from .lit import LitCharLM, LitTransformer
from .loggers import WandbLogger

# A config names classes and callables by import path; only these packages may be named (checked by jsonargparse
# before it imports anything), so a config cannot run os.system, eval or an arbitrary module's import-time code.
ALLOWED_IMPORTS = ["transformers_scratch", "torch", "lightning"]
set_parsing_settings(import_path_denylist=["*"], import_path_allowlist=ALLOWED_IMPORTS)

OLD_SAMPLE_ARGS = {"sample_length": "length", "sample_temperature": "temperature", "sample_seed_length": "seed_length"}


def _values(flag: str, argv: list[str]) -> list[str]:
    """Every value given to ``flag`` in argv, as ``--flag value`` or ``--flag=value``."""
    found = []
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith(flag + "="):
            found.append(arg.split("=", 1)[1])
    return found


def run_name(argv: list[str]) -> str:
    """``--name``, else a ``name:`` in a config file, else the first config file's stem, else ``run``."""
    if names := _values("--name", argv):
        return names[-1]
    configs = _values("--config", argv)
    for config in reversed(configs):
        try:
            name = (yaml.safe_load(Path(config).read_text()) or {}).get("name")
        except (OSError, yaml.YAMLError, AttributeError):
            name = None  # jsonargparse reports an unreadable config itself
        if name:
            return str(name)
    return Path(configs[0]).stem if configs else "run"


def refuse_optimizer_flags(argv: list[str]) -> None:
    """LightningCLI's ``--optimizer``/``--lr_scheduler`` would replace the modules' two weight-decay groups and
    warm-up schedule with one plain group; the settings live under ``model.optim`` instead."""
    for flag in ("--optimizer", "--lr_scheduler"):
        if any(arg == flag or arg.startswith(flag + "=") or arg.startswith(flag + ".") for arg in argv):
            raise ValueError(
                f"{flag} is not used here: the modules build AdamW with weight decay on matrices only and a warm-up "
                "then cosine schedule; set them with --model.optim.lr, .weight_decay, .beta1, .beta2, .warmup_steps, "
                ".schedule (cosine or constant), .min_lr_ratio and .total_steps"
            )


SCAFFOLDING = (
    "Parser key", "Does not validate", "Subtypes:", "Errors:", "Given value", "Expected a <class 'NoneType'>",
    "Not a valid subclass", "Subclass types expect", "a class path", "a dict", "Problem with given class_path",
)  # fmt: skip


def brief(message: str) -> str:
    """One line from jsonargparse's nested "does not validate against any of the Union subtypes" report: the
    innermost key and the first real reason (the project's own message, when a config refused the value)."""
    lines = [line.strip().removeprefix("- ") for line in message.splitlines() if line.strip()]
    if len(lines) <= 1:
        return message
    keys = [line.split('"')[1] for line in lines if line.startswith('Parser key "')]
    reasons = [line for line in lines if not line.startswith(SCAFFOLDING)]
    if not reasons:
        return lines[0]
    reason = reasons[0].split("callable class: ")[-1]
    if "import path denylist" in reason:
        path = reason.split("'")[1]
        reason = (
            f"{path!r} is refused: a config may name classes and functions from {', '.join(ALLOWED_IMPORTS)} only "
            "(nothing else is imported)"
        )
    return f"{'.'.join(keys)}: {reason}" if keys else reason


def _class_name(item) -> str:
    return str(getattr(item, "class_path", "")).rsplit(".", 1)[-1]


class CLI(LightningCLI):
    """LightningCLI with the project's shared loggers and callbacks, data-to-model links and checks."""

    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        self.argv = sys.argv[1:] if args is None else list(args)
        refuse_optimizer_flags(self.argv)
        super().__init__(
            LitTransformer,
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={"exit_on_error": False},  # main() turns a parse error into one line
            auto_configure_optimizers=False,  # the modules build their own AdamW groups and schedule
            args=args,  # None: read sys.argv
            run=run,
        )

    def add_arguments_to_parser(self, parser) -> None:
        # Sizes that come from the data are never typed twice.
        parser.link_arguments("data.vocab_size", "model.init_args.model.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.num_classes", "model.init_args.model.num_classes", apply_on="instantiate")
        parser.link_arguments("data.context", "model.init_args.model.context", apply_on="instantiate")
        # What every run shares; a config changes only what differs (e.g. `checkpoint: {save_top_k: 3}`).
        parser.add_argument(
            "--name",
            type=str | None,
            default=None,
            help="Run name: logs/<name>/, checkpoints/<name>/ (default: the config's).",
        )
        parser.add_lightning_class_args(SafeModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(SampleText, "sample")
        parser.add_lightning_class_args(PredictionWriter, "predictions")
        name = run_name(self.argv)
        parser.set_defaults({
            "trainer.logger": [
                {"class_path": f"{CSVLogger.__module__}.CSVLogger", "init_args": {"save_dir": "logs", "name": name}},
                {"class_path": f"{WandbLogger.__module__}.WandbLogger",
                 "init_args": {"save_dir": "logs", "name": name}},
            ],
            "trainer.callbacks": [
                {"class_path": f"{ProgressBar.__module__}.ProgressBar"},
                {"class_path": "lightning.pytorch.callbacks.LearningRateMonitor",
                 "init_args": {"logging_interval": "step"}},
            ],
            "checkpoint.dirpath": f"checkpoints/{name}",
            "checkpoint.save_last": True,
            "checkpoint.auto_insert_metric_name": False,
        })  # fmt: skip

    def parse_arguments(self, parser, args) -> None:
        super().parse_arguments(parser, args)
        sub = self.config.get("subcommand")
        ckpt_path = self.config[sub].get("ckpt_path") if sub else None
        check_ckpt_path(ckpt_path)
        self.ckpt_vocab = None
        if ckpt_path and Path(ckpt_path).is_file():  # one clear line for a truncated or foreign file
            self.ckpt_vocab = checkpoint_vocab(read_checkpoint(ckpt_path))

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        self._adopt_old_spellings(cfg)
        self._check_linked_context(cfg)
        model_class = self.model_class_of(cfg)
        if cfg.checkpoint.monitor is None and hasattr(model_class, "checkpoint_metric"):
            cfg.checkpoint.monitor, cfg.checkpoint.mode, pattern = model_class.checkpoint_metric
            cfg.checkpoint.filename = cfg.checkpoint.filename or pattern
        if cfg.trainer.precision == "bf16-mixed" and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
            print("note: no GPU with bf16 here, so trainer.precision bf16-mixed runs as 32-true", file=sys.stderr)
            cfg.trainer.precision = "32-true"
        callbacks = cfg.trainer.get("callbacks") or []
        if cfg.trainer.get("logger") is False and any(_class_name(c) == "LearningRateMonitor" for c in callbacks):
            # Lightning refuses a LearningRateMonitor without a logger; with logging off it has nothing to do.
            print("note: --trainer.logger false, so the LearningRateMonitor callback is left out", file=sys.stderr)
            callbacks = [c for c in callbacks if _class_name(c) != "LearningRateMonitor"]
        if cfg.trainer.get("enable_progress_bar") is False:  # Lightning refuses a progress bar it may not show
            callbacks = [c for c in callbacks if _class_name(c) != "ProgressBar"]
        cfg.trainer.callbacks = callbacks

    @staticmethod
    def model_class_of(cfg) -> type:
        module, _, name = cfg.model.class_path.rpartition(".")
        return getattr(importlib.import_module(module), name)

    def _adopt_old_spellings(self, cfg) -> None:
        """Configs written before the shared callbacks: their checkpoint callback and sample settings become
        ``checkpoint`` and ``sample``, so nothing runs twice and no setting is lost."""
        init = cfg.model.get("init_args") or {}
        for old, new in OLD_SAMPLE_ARGS.items():
            if init.get(old) is not None:
                cfg.sample[new] = init[old]
                print(f"note: model.{old} is now sample.{new}; using {init[old]}", file=sys.stderr)
        callbacks = []
        for c in cfg.trainer.get("callbacks") or []:
            if _class_name(c) in ("SafeModelCheckpoint", "ModelCheckpoint"):
                for key, value in vars(c.get("init_args") or {}).items():
                    cfg.checkpoint[key] = value
            else:
                callbacks.append(c)
        cfg.trainer.callbacks = callbacks

    @staticmethod
    def _check_linked_context(cfg) -> None:
        """``model.context`` comes from the data; a different value typed by hand would be silently replaced.
        (The parsed config cannot tell a typed value from the default, so the default itself passes.)"""
        model = (cfg.model.get("init_args") or {}).get("model") or {}
        data = cfg.data.get("init_args") or {}
        given, linked = model.get("context"), data.get("context", data.get("max_length"))
        if given is None or linked is None or given in (linked, TransformerConfig.context):
            return
        if model.get("pool") == "cls" and given == linked + 1:
            return  # the old spelling: a [CLS] position used to be counted in the context
        key = "data.context" if "context" in data else "data.max_length"
        raise ValueError(
            f"model.context {given} is set from {key} ({linked}), so it cannot differ; "
            f"set --{key} {given} instead and leave model.context out"
        )

    def _restore_vocab(self) -> None:
        """Give the data module the vocabulary of the checkpoint it will serve, whatever class wrote it (read
        once, when the arguments were checked)."""
        if self.ckpt_vocab is not None:
            self.datamodule.load_state_dict(vocab_state(self.ckpt_vocab))

    before_fit = before_validate = before_test = before_predict = _restore_vocab


def build_cli(args: list[str] | None = None, run: bool = True) -> CLI:
    """The one way to build the CLI, for ``main`` and the tests alike."""
    return CLI(args=args, run=run)


def sample(argv: list[str]) -> None:
    """Continue a prompt with a trained character model and print prompt + continuation."""
    parser = ArgumentParser(prog="cli.py sample", description="Continue a prompt with a trained character model.")
    parser.add_argument("--ckpt_path", type=str, required=True, help="A checkpoint written by fit.")
    parser.add_argument("--prompt", type=str, required=True, help="Text to continue.")
    parser.add_argument("--length", type=int, default=600, help="Characters (bytes) to generate.")
    parser.add_argument("--temperature", type=float, default=0.5, help="0: greedy; the tutorial uses 0.5.")
    parser.add_argument("--top_k", type=int | None, default=None, help="Sample only from the k likeliest.")
    parser.add_argument("--seed", type=int | None, default=None, help="Random seed, for repeatable samples.")
    parser.add_argument("--no_cache", action="store_true", help="Recompute the window for every character.")
    args = parser.parse_args(argv)
    module, vocab = load_trained(args.ckpt_path, LitCharLM)
    if vocab is None:
        raise ValueError(f"--ckpt_path {args.ckpt_path!r} holds no vocabulary; pass a checkpoint written by fit")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = module.model.to(device)
    prompt = vocab.encode_text(args.prompt).to(device)
    if args.seed is not None:
        torch.manual_seed(args.seed)
    out = model.generate(prompt, args.length, args.temperature, args.top_k, use_cache=not args.no_cache)
    print(vocab.decode(out[0].cpu()))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        if args[:1] == ["sample"]:
            sample(args[1:])
        else:
            build_cli(argv)  # None: LightningCLI reads sys.argv itself
    except (ValueError, OSError, TrainingDiverged, DataError, ArgumentError, MisconfigurationException) as e:
        # The user's input or files: one line.
        if os.environ.get("TS_DEBUG"):
            raise
        print(f"error: {brief(str(e))}\n(set TS_DEBUG=1 to see the traceback)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

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

import atexit
import importlib
import os
import sys
from pathlib import Path

import torch
import yaml
from jsonargparse import ArgumentError, ArgumentParser, set_parsing_settings
from lightning import LightningDataModule
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from ..data import ByteVocab, DataError, WordVocab, checkpoint_vocab
from ..data.vocab import vocab_state
from ..model.config import TransformerConfig
from ..model.pretrained import save_pretrained
from ..training.callbacks import (
    PhaseTimes,
    PredictionWriter,
    ProgressBar,
    SafeModelCheckpoint,
    SampleText,
    TrainingDiverged,
)
from ..training.checkpoints import check_ckpt_path, load_trained, read_checkpoint
from ..training.loggers import CSVLogger, WandbLogger
from ..training.modules import LitCharLM, LitClassifier, LitSeq2Seq, LitTransformer, read_pretrained

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


DESCRIPTION = (
    "Train and evaluate the project's models (LightningCLI: fit, validate, test, predict). "
    "Also: 'cli.py sample --ckpt_path CKPT --prompt TEXT' continues a prompt with a trained character model "
    "(--num_samples, --top_k, --top_p, --prompt_file, --seed; 'cli.py sample --help'), and "
    "'cli.py export --ckpt_path CKPT --out DIR' writes its model for transformers_scratch.from_pretrained; "
    "'cli.py decode --ckpt_path CKPT --input TEXT' (or --input_file) decodes with a trained encoder-decoder; "
    "'cli.py attention --ckpt_path CKPT --text TEXT' draws a classifier's or character model's attention as a PNG; "
    "'cli.py plot logs/NAME/version_N' draws a run's learning curves."
)


def _class_name(item) -> str:
    return str(getattr(item, "class_path", "")).rsplit(".", 1)[-1]


def _shown(path: str) -> str:
    """A path as the user would type it: relative to the working folder when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _get(config, key: str, default):
    """A field of a model config saved as a dataclass or as a plain dict."""
    value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
    return default if value is None else value


class SaveRunConfig(SaveConfigCallback):
    """Lightning's: the run's config.yaml in its log folder. With ``--trainer.logger false`` a run has no log
    folder, and Lightning would write config.yaml into the working directory, over a file of that name: then
    nothing is written."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if trainer.loggers:
            super().setup(trainer, pl_module, stage)


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
            save_config_callback=SaveRunConfig,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={"exit_on_error": False, "description": DESCRIPTION},  # main(): a parse error, one line
            auto_configure_optimizers=False,  # the modules build their own AdamW groups and schedule
            args=args,  # None: read sys.argv
            run=run,
        )

    def subcommands(self) -> dict[str, set[str]]:
        """Lightning builds a parser for every subcommand at start-up; only the one being run is built here
        (``cli.py --help`` still lists them all)."""
        every = LightningCLI.subcommands()
        asked = self.argv[0] if getattr(self, "argv", None) else None
        return {asked: every[asked]} if asked in every else every

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
        parser.add_argument(
            "--final_validation",
            type=bool,
            default=True,
            help="After fit, score the whole validation split once when trainer.limit_val_batches scored part of it.",
        )
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
                {"class_path": f"{PhaseTimes.__module__}.PhaseTimes"},
            ],
            "checkpoint.dirpath": f"checkpoints/{name}",
            "checkpoint.save_last": True,
            "checkpoint.auto_insert_metric_name": False,
        })  # fmt: skip

    def parse_arguments(self, parser, args) -> None:
        super().parse_arguments(parser, args)
        sub = self.config.get("subcommand")
        self.ckpt_vocab, self.ckpt_hparams, self.ckpt_run = None, {}, {}
        if not sub or not self.config[sub].get("ckpt_path"):
            return
        cfg = self.config[sub]
        if cfg.ckpt_path == "last":  # this run's own folder: one run, one place
            last = Path(cfg.checkpoint.dirpath or "checkpoints") / "last.ckpt"
            if not last.is_file():
                raise FileNotFoundError(
                    f"--ckpt_path last: there is no {last} to resume (the run is named {run_name(self.argv)!r}); "
                    "start it without --ckpt_path, or name another run with --name"
                )
            cfg.ckpt_path = str(last)
        check_ckpt_path(cfg.ckpt_path)
        if Path(cfg.ckpt_path).is_file():  # read once: one clear line for a truncated or foreign file
            checkpoint = read_checkpoint(cfg.ckpt_path)
            self.ckpt_vocab = checkpoint_vocab(checkpoint)
            self.ckpt_hparams = dict(checkpoint.get("hyper_parameters") or {})
            self.ckpt_run = checkpoint.get("run") or {}

    def _parse_ckpt_path(self) -> None:
        """Lightning's version puts *every* hyper-parameter of the checkpoint over the command line, so a resumed
        run silently kept its old learning rate. Here the checkpoint decides the architecture (its weights fit
        nothing else) and the command line decides training: a changed ``model.optim`` is applied, with a note
        (``LitTransformer.on_train_start``). A checkpoint of another kind of model is refused.
        (Overrides a private LightningCLI method: no public hook parses checkpoint hyper-parameters;
        tests/test_reliability.py pins the behaviour.)"""
        hparams = {k: v for k, v in self.ckpt_hparams.items() if k != "_instantiator"}
        if not hparams:
            return
        sub = self.config.subcommand
        given, written = self.config[sub].model.class_path, hparams.pop("_class_path", None)
        if written and written.rsplit(".", 1)[-1] != given.rsplit(".", 1)[-1]:
            raise ValueError(
                f"--ckpt_path {self.config[sub].ckpt_path!r} holds a {written.rsplit('.', 1)[-1]} and this config "
                f"runs a {given.rsplit('.', 1)[-1]}; pass the config the checkpoint was trained with"
            )
        if "model" in hparams:
            architecture = {sub: {"model": {"class_path": given, "dict_kwargs": {"model": hparams["model"]}}}}
            self.config = self.parser.parse_object(architecture, self.config)

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        if self.subcommand == "fit" and self.ckpt_run:
            self._continue_logs(cfg)
        self._check_vocab(cfg)
        self._adopt_old_spellings(cfg)
        if self.ckpt_hparams.get("model"):  # the checkpoint set model.context: windows are checked against it
            self._check_context_past_training(cfg)
        else:
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

    def _check_context_past_training(self, cfg) -> None:
        """Windows longer than a checkpoint was trained on: fine for positions that go past it (said once),
        refused for learned embeddings, which have no vector there."""
        trained, data = self.ckpt_hparams.get("model"), cfg.data.get("init_args") or {}
        key = "context" if "context" in data else "max_length"
        window, context = data.get(key), _get(trained, "context", None)
        if window is None or context is None or window <= context:
            return
        positions = _get(trained, "positions", "learned")
        if positions == "learned":
            raise ValueError(
                f"--data.{key} {window} > {context}, the context --ckpt_path {cfg.ckpt_path!r} was trained at: its "
                f"learned position embeddings have no vector past {context}; pass --data.{key} {context} or less, "
                "or train with model.positions sinusoidal, rope or alibi"
            )
        print(
            f"note: data.{key} {window}, past the training context {context} ({positions} positions)", file=sys.stderr
        )

    def _check_vocab(self, cfg) -> None:
        """The data must encode text the way the checkpoint's model reads it."""
        vocab, data = self.ckpt_vocab, cfg.data.get("init_args") or {}
        if isinstance(vocab, ByteVocab) and "vocab" in data:
            kind = "bytes" if vocab.symbols is None else "file"
            if data["vocab"] != kind:
                raise ValueError(
                    f"--ckpt_path {cfg.ckpt_path!r} was trained with data.vocab {kind} ({vocab.size} symbols), and "
                    f"this run has data.vocab {data['vocab']}; pass --data.vocab {kind}"
                )
        if isinstance(vocab, WordVocab):
            # data.vocab_words is a cap: the model was sized for the cap, and a small corpus may fill less of it
            words = _get(self.ckpt_hparams.get("model"), "vocab_size", len(vocab)) - 2
            if data.get("vocab_words") not in (None, words):
                raise ValueError(
                    f"--ckpt_path {cfg.ckpt_path!r} was trained with a vocabulary of {words} words, and this "
                    f"run has data.vocab_words {data['vocab_words']}; pass --data.vocab_words {words}"
                )

    def _continue_logs(self, cfg) -> None:
        """A resumed run logs into the CSV version and the W&B run it started (the checkpoint names them)."""
        for logger in cfg.trainer.get("logger") or []:
            name, version = _class_name(logger), self.ckpt_run.get(_class_name(logger))
            if version is None or not hasattr(logger, "init_args"):
                continue
            logger.init_args["id" if name == "WandbLogger" else "version"] = version

    def before_fit(self) -> None:
        self._restore_vocab()
        self._check_pretrained()
        if rank_zero_only.rank == 0:  # DDP's other processes run this CLI too
            claim_run_folder(Path(self.checkpoint_dir), resuming=bool(self.config.fit.get("ckpt_path")))

    @property
    def checkpoint_dir(self) -> str:
        return next(c.dirpath for c in self.trainer.checkpoint_callbacks if c.dirpath)

    def after_fit(self) -> None:
        release_run_folder(Path(self.checkpoint_dir))
        self._validate_in_full()
        best = self.trainer.checkpoint_callback.best_model_path if self.trainer.checkpoint_callback else ""
        log = next((lg.log_dir for lg in self.trainer.loggers if isinstance(lg, CSVLogger)), None)
        rank_zero_info(
            f"this run: checkpoints in {_shown(self.checkpoint_dir)}/ (newest: last.ckpt"
            + (f", best: {_shown(best)}" if best else "")
            + ")"
            + (f", logs in {log}/" if log else "")
            + "; continue it with --ckpt_path last, or start another with --name"
        )

    def _validate_in_full(self) -> None:
        """Frequent validations may score part of the validation split (``trainer.limit_val_batches``, cheap);
        the trained model is scored on all of it, once, as litgpt's final validation and nanoGPT's last eval."""
        trainer = self.trainer
        if not self.config.fit.final_validation or trainer.interrupted or not trainer.num_val_batches:
            return
        whole = len(self.datamodule.val_dataloader())
        if sum(trainer.num_val_batches) >= whole:
            return
        rank_zero_info(f"final validation: the whole validation split ({whole} batches)")
        limit, trainer.limit_val_batches = trainer.limit_val_batches, 1.0
        try:
            trainer.validate(self.model, datamodule=self.datamodule, verbose=trainer.is_global_zero)
        finally:
            trainer.limit_val_batches = limit

    def _check_pretrained(self) -> None:
        """Fine-tuning (``model.pretrained``): the encoder must fit the classifier, which is checked now, before the
        data is read; and the data must give the ids it was pretrained on, so it gets that vocabulary to check."""
        path = getattr(self.model, "pretrained", None)
        if not path or self.config.fit.get("ckpt_path"):  # a resumed run's weights are its own
            return
        read_pretrained(path, self.model.model.cfg)
        if (vocab := checkpoint_vocab(read_checkpoint(path))) is not None:
            self.datamodule.load_state_dict(vocab_state(vocab))

    def _restore_vocab(self) -> None:
        """Give the data module the vocabulary of the checkpoint it will serve, whatever class wrote it (read
        once, when the arguments were checked)."""
        if self.ckpt_vocab is not None:
            self.datamodule.load_state_dict(vocab_state(self.ckpt_vocab))

    before_validate = before_test = before_predict = _restore_vocab


LOCK = ".fit.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim_run_folder(folder: Path, resuming: bool) -> None:
    """One run, one place: a fit holds its checkpoint folder (a lock file with its process id) until it ends,
    and a fresh fit never starts in a folder that holds another run's checkpoints. A lock left by a killed
    run is taken over, as are temporary files its interrupted writes left."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(lock.read_text() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and pid != os.getpid() and _alive(pid):
                raise ValueError(
                    f"{folder}/ is in use by another fit (process {pid}); wait for it to end, or give this run "
                    "its own --name"
                ) from None
            lock.unlink(missing_ok=True)  # a killed run's
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        atexit.register(release_run_folder, folder)
        break
    if not resuming and (found := sorted(p.name for p in folder.glob("*.ckpt"))):
        release_run_folder(folder)
        raise ValueError(
            f"{folder}/ already holds a run ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}); resume it "
            "with --ckpt_path last, start another with --name NAME, or move that folder away"
        )
    for stale in folder.glob(".*.tmp"):  # an interrupted checkpoint write (the folder is ours now)
        stale.unlink(missing_ok=True)


def release_run_folder(folder: Path) -> None:
    lock = folder / LOCK
    try:
        if int(lock.read_text() or 0) == os.getpid():
            lock.unlink()
    except (OSError, ValueError):
        pass


def build_cli(args: list[str] | None = None, run: bool = True) -> CLI:
    """The one way to build the CLI, for ``main`` and the tests alike."""
    return CLI(args=args, run=run)


MAX_SAMPLE = 1_000_000  # characters per sample call (about half an hour on this project's 2-core CPU)
SAMPLE_PIECE = 2_000  # longer samples are generated in pieces of this length, with progress


MAX_SAMPLES = 1_000  # --num_samples


def text_or_file(text: str | None, path: str | None, flag: str, what: str, kind: str) -> str:
    """The text of ``--FLAG TEXT`` or of the file ``--FLAG_file FILE``: exactly one of the two is given."""
    if (text is None) == (path is None):
        raise ValueError(f"give {what} with --{flag} TEXT or --{flag}_file FILE (one of the two)")
    if path is None:
        return text
    if not Path(path).is_file():
        raise FileNotFoundError(f"--{flag}_file {path!r} does not exist; pass {kind}")
    return Path(path).read_text(encoding="utf-8")


def sample(argv: list[str]) -> None:
    """Continue a prompt with a trained character model and print prompt + continuation, once per sample."""
    parser = ArgumentParser(prog="cli.py sample", description="Continue a prompt with a trained character model.")
    parser.add_argument("--ckpt_path", type=str, required=True, help="A checkpoint written by fit.")
    parser.add_argument("--prompt", type=str | None, default=None, help="Text to continue.")
    parser.add_argument("--prompt_file", type=str | None, default=None, help="Continue this file's text instead.")
    parser.add_argument("--length", type=int, default=600, help="Characters (bytes) to generate.")
    parser.add_argument("--num_samples", type=int, default=1, help="Samples of the same prompt, drawn together.")
    parser.add_argument("--temperature", type=float, default=0.5, help="0: greedy; the tutorial uses 0.5.")
    parser.add_argument("--top_k", type=int | None, default=None, help="Sample only from the k likeliest.")
    parser.add_argument("--top_p", type=float | None, default=None, help="Sample from the nucleus of mass p.")
    parser.add_argument("--seed", type=int | None, default=None, help="Random seed: the same seed, the same text.")
    parser.add_argument("--no_cache", action="store_true", help="Recompute the window for every character.")
    parser.add_argument("--cuda_graph", action="store_true", help="GPU: replay each cached step as a CUDA graph.")
    args = parser.parse_args(argv)
    args.prompt = text_or_file(args.prompt, args.prompt_file, "prompt", "the text to continue", "a text file")
    if not 1 <= args.length <= MAX_SAMPLE:
        raise ValueError(f"--length {args.length} must lie in [1, {MAX_SAMPLE:,}] characters")
    if not 1 <= args.num_samples <= MAX_SAMPLES:
        raise ValueError(f"--num_samples {args.num_samples} must lie in [1, {MAX_SAMPLES:,}]")
    module, vocab = load_trained(args.ckpt_path, LitCharLM)
    if vocab is None:
        raise ValueError(f"--ckpt_path {args.ckpt_path!r} holds no vocabulary; pass a checkpoint written by fit")
    if args.cuda_graph and (args.no_cache or not torch.cuda.is_available()):
        why = "--no_cache turns the cache off" if args.no_cache else "this machine has no GPU"
        raise ValueError(f"--cuda_graph replays the cached decoding step on a GPU, and {why}; leave --cuda_graph off")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = module.model.to(device)
    out = vocab.encode_text(args.prompt).to(device).expand(args.num_samples, -1)  # (n, t): one row a sample
    generator = None if args.seed is None else torch.Generator(device).manual_seed(args.seed)
    left = args.length
    while left:  # long generations in pieces, with progress on stderr
        n = min(left, SAMPLE_PIECE)
        out = model.generate(out, n, args.temperature, args.top_k, not args.no_cache, generator, args.top_p,
                             args.cuda_graph)  # fmt: skip
        left -= n
        if args.length > SAMPLE_PIECE:
            print(f"sampled {args.length - left:,} of {args.length:,} characters", file=sys.stderr, flush=True)
    print("\n---\n".join(vocab.decode(row.cpu()) for row in out))


MAX_INPUTS = 100_000  # --input_file lines


def decode(argv: list[str]) -> None:
    """Decode inputs with a trained encoder-decoder (greedy, with the decoder's caches): one output a line."""
    from ..data import transduction

    parser = ArgumentParser(prog="cli.py decode", description=decode.__doc__)
    parser.add_argument("--ckpt_path", type=str, required=True, help="A LitSeq2Seq checkpoint written by fit.")
    parser.add_argument("--input", type=str | None, default=None, help="One source, e.g. '31415' or '315+4096'.")
    parser.add_argument("--input_file", type=str | None, default=None, help="A file of sources, one a line.")
    parser.add_argument("--batch_size", type=int, default=256, help="Sources decoded together.")
    args = parser.parse_args(argv)
    text = text_or_file(args.input, args.input_file, "input", "the source", "a file, one source a line")
    sources = [line.strip() for line in text.splitlines() if line.strip()] if args.input_file else [text.strip()]
    if not sources or not all(sources):
        raise ValueError("nothing to decode: give at least one non-empty source")
    if len(sources) > MAX_INPUTS:
        raise ValueError(f"--input_file holds {len(sources):,} sources, more than {MAX_INPUTS:,}; split the file")
    if args.batch_size < 1:
        raise ValueError(f"--batch_size {args.batch_size} must be a positive integer")
    module, _ = load_trained(args.ckpt_path, LitSeq2Seq)
    context = module.model.cfg.context
    for source in sources:
        transduction.encode(source)  # every character known, or one line naming the first that is not
        if len(source) > context:
            raise ValueError(
                f"source {source[:40]!r} has {len(source)} characters, more than the model's context {context}; "
                "pass shorter sources, or train with a larger data.max_length"
            )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    module = module.to(device)
    for i in range(0, len(sources), args.batch_size):
        src, mask, _, _ = transduction.collate([(s, "") for s in sources[i : i + args.batch_size]])
        out = module.greedy(src.to(device), mask.to(device), context)
        print("\n".join(transduction.decode(row.tolist()) for row in out.cpu()))


EXPORTABLE = {cls.__name__: cls for cls in (LitCharLM, LitClassifier, LitSeq2Seq)}


def export(argv: list[str]) -> None:
    """Write a checkpoint's model as model.safetensors + config.json, for transformers_scratch.from_pretrained."""
    parser = ArgumentParser(prog="cli.py export", description=export.__doc__)
    parser.add_argument("--ckpt_path", type=str, required=True, help="A checkpoint written by fit.")
    parser.add_argument("--out", type=str, required=True, help="A new or empty folder.")
    args = parser.parse_args(argv)
    module_class = _written_by(args.ckpt_path, EXPORTABLE, "export")
    written_by = module_class.__name__
    module, vocab = load_trained(args.ckpt_path, module_class)
    if module_class is LitSeq2Seq:
        from ..data.transduction import ALPHABET, SPECIALS

        extra = {"vocab": {"specials": ["<pad>", "<bos>", "<eos>"][:SPECIALS], "alphabet": ALPHABET}}
    elif isinstance(vocab, WordVocab):
        extra = {"vocab": {"words": vocab.itos[2:]}}
    else:
        extra = {"vocab": {"bytes": None if vocab is None or vocab.symbols is None else list(vocab.symbols)}}
    folder = save_pretrained(module.model, args.out, extra)
    print(f"exported {written_by}'s model to {folder}/ (model.safetensors, config.json)")


PICTURED = {cls.__name__: cls for cls in (LitClassifier, LitCharLM)}


def _written_by(ckpt_path: str, takes: dict[str, type], command: str) -> type[LitTransformer]:
    """The module class that wrote a checkpoint, if ``command`` takes it; else one line naming what it takes."""
    written_by = str(read_checkpoint(ckpt_path).get("hyper_parameters", {}).get("_class_path", "?"))
    module_class = takes.get(written_by.rsplit(".", 1)[-1])
    if module_class is None:
        raise ValueError(f"--ckpt_path {ckpt_path!r} holds a {written_by}; {command} takes {', '.join(takes)}")
    return module_class


def _shown_token(token: str) -> str:
    return {" ": "␣", "\n": "⏎", "\t": "⇥"}.get(token, token)


def attention(argv: list[str]) -> None:
    """Draw the attention weights of every layer and head of a trained classifier (words) or character model
    (characters) for one text, as one PNG grid with the tokens on the axes."""
    from ..data.imdb import tokenize
    from ..training.pictures import attention_maps, draw_attention

    parser = ArgumentParser(prog="cli.py attention", description=attention.__doc__)
    parser.add_argument("--ckpt_path", type=str, required=True, help="A LitClassifier or LitCharLM checkpoint.")
    parser.add_argument("--text", type=str | None, default=None, help="The text to read.")
    parser.add_argument("--text_file", type=str | None, default=None, help="Read this file's text instead.")
    parser.add_argument("--out", type=str, default="attention.png", help="The PNG to write.")
    parser.add_argument("--max_tokens", type=int, default=32, help="Draw the first N tokens (words or characters).")
    parser.add_argument("--dpi", type=int, default=100, help="Resolution of the PNG.")
    args = parser.parse_args(argv)
    text = text_or_file(args.text, args.text_file, "text", "the text to read", "a text file")
    if not 1 <= args.max_tokens <= MAX_PICTURED:
        raise ValueError(f"--max_tokens {args.max_tokens} must lie in [1, {MAX_PICTURED}]: a panel holds that many")
    module_class = _written_by(args.ckpt_path, PICTURED, "attention")
    module, vocab = load_trained(args.ckpt_path, module_class)
    model = module.model
    if vocab is None:
        raise ValueError(f"--ckpt_path {args.ckpt_path!r} holds no vocabulary; pass a checkpoint written by fit")
    limit = min(args.max_tokens, model.cfg.context)
    if isinstance(vocab, WordVocab):
        words = tokenize(text)
        ids = torch.tensor([vocab.encode(words[:limit])])  # (1, t); a word marked * is unknown (<unk>)
        tokens = [w if i != WordVocab.UNK else f"{w}*" for w, i in zip(words[:limit], ids[0].tolist(), strict=True)]
        total = len(words)
    else:
        encoded = vocab.encode_text(text)  # (1, all)
        ids, total = encoded[:, :limit], encoded.size(1)
        tokens = [_shown_token(vocab.decode(i[None])) for i in ids[0]]
    if ids.size(1) == 0:
        raise ValueError("the text holds no tokens to read; give some words")
    if total > ids.size(1):
        note = f"note: drawing the first {ids.size(1)} of {total} tokens (--max_tokens {args.max_tokens})"
        print(note, file=sys.stderr)
    if getattr(model.cfg, "pool", None) == "cls":
        tokens = ["[CLS]", *tokens]
    weights = attention_maps(model, ids)[:, 0]  # (l, h, t, t)
    kind = "words" if isinstance(vocab, WordVocab) else "characters"
    title = f"{module_class.__name__} attention over {len(tokens)} {kind}: queries down, keys across"
    draw_attention(weights, tokens, args.out, title, args.dpi)
    print(f"wrote {args.out}: {weights.size(0)} layers x {weights.size(1)} heads over {len(tokens)} {kind}")


MAX_PICTURED = 256  # --max_tokens


def plot(argv: list[str]) -> None:
    """Draw a run's learning curves (training loss, validation metrics, learning rate) from its metrics.csv."""
    from ..training.pictures import draw_curves, learning_curves

    parser = ArgumentParser(prog="cli.py plot", description=plot.__doc__)
    parser.add_argument("run", type=str, help="A run's log folder (logs/<name>/version_N) or its metrics.csv.")
    parser.add_argument("--out", type=str | None, default=None, help="The PNG to write (default: RUN/curves.png).")
    parser.add_argument("--dpi", type=int, default=100, help="Resolution of the PNG.")
    args = parser.parse_args(argv)
    run = Path(args.run)
    metrics = run if run.suffix == ".csv" else run / "metrics.csv"
    if not metrics.is_file():
        raise FileNotFoundError(
            f"{str(metrics)!r} does not exist; pass a run's log folder such as logs/imdb/version_0 (fit writes "
            "metrics.csv there)"
        )
    curves = learning_curves(metrics)
    if not curves:
        raise ValueError(f"{str(metrics)!r} holds no training loss, validation metric or learning rate to draw yet")
    out = Path(args.out) if args.out else metrics.parent / "curves.png"
    draw_curves(curves, out, f"{_shown(str(metrics.parent))}", args.dpi)
    print(f"wrote {out}: {', '.join(curves)}")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        if args[:1] == ["sample"]:
            sample(args[1:])
        elif args[:1] == ["export"]:
            export(args[1:])
        elif args[:1] == ["decode"]:
            decode(args[1:])
        elif args[:1] == ["attention"]:
            attention(args[1:])
        elif args[:1] == ["plot"]:
            plot(args[1:])
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

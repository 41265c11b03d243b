"""Lightning's commands (fit, validate, test, predict) through LightningCLI, with what every run shares set once:
the loggers (CSV and W&B), the callbacks (``--checkpoint.*``, ``--sample.*``, ``--predictions.*`` and the rest), and
the links that carry sizes from the data into the model's config. A run's name is its config file's (or ``--name``):
it logs to ``logs/<name>/`` and checkpoints to ``checkpoints/<name>/``."""

from __future__ import annotations

import os
import re
import sys
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal, cast, get_args, get_type_hints

import torch
import yaml
from jsonargparse import ArgumentParser, Namespace, set_parsing_settings
from lightning import LightningDataModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.strategies.launchers import _MultiProcessingLauncher
from lightning.pytorch.trainer.connectors.checkpoint_connector import _CheckpointConnector
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from ..bounds import (
    Count,
    GlobalSeed,
    NonNegative,
    NonNegativeFloat,
    RunName,
    Share,
    Time,
    TopK,
    check_args,
    checked,
    is_count,
    register,
)
from ..data.files import shortened
from ..data.vocab import vocab_state
from ..model.config import ClassifierConfig, EncoderDecoderConfig, LMConfig, MaskedLMConfig, TransformerConfig, XLConfig
from ..model.models import count_parameters
from ..training.callbacks import (
    CALLBACK_GROUPS,
    PhaseTimes,
    ProgressBar,
    SafeModelCheckpoint,
    StopOnSignal,
    Throughput,
    run_checkpoint,
)
from ..training.checkpoints import Checkpoint, check_linked_sizes, restoring, settings_class
from ..training.console import note, quiet, shown, silence
from ..training.loggers import RUN, CSVLogger, WandbLogger
from ..training.modules import LitTransformer
from ..training.optim import OptimConfig
from ..training.run_folder import claim_run_folder, release_run_folder
from .config_files import check_config_files, check_values, written
from .errors import ALLOWED_IMPORTS, FLAG_GROUPS, class_at, damaged, named_as

# A config names classes and callables by import path; only these packages may be named (checked by jsonargparse
# before it imports anything), so a config cannot run os.system, eval or an arbitrary module's import-time code.
set_parsing_settings(import_path_denylist=["*"], import_path_allowlist=ALLOWED_IMPORTS)
register()  # the interval types of the settings: jsonargparse checks each value against its own


LINKED = ("vocab_size", "num_classes", "context")  # model sizes that come from the data


def run_name(cfg) -> str:
    """``--name`` (or a config's ``name:``, checked on its type), else the first config file's stem, else ``run``."""
    if cfg.get("name") is not None:
        return cfg.name
    configs = cfg.get("config") or []
    try:
        return checked(RunName, Path(str(configs[0])).stem if configs else "run", "the run's name")
    except ValueError as e:
        raise ValueError(f"{e}: its config's file name; pass --name NAME") from None


def name_run(cfg) -> str:
    """Put the run's name where the shared defaults hold :data:`RUN`: the loggers' names, the checkpoint folder."""
    name = run_name(cfg)
    loggers = cfg.trainer.get("logger")
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        init = getattr(logger, "init_args", None)
        if init is not None and init.get("name") == RUN:
            init.name = name
    if cfg.get("checkpoint") and cfg.checkpoint.dirpath in (None, f"checkpoints/{RUN}"):  # null: the default
        cfg.checkpoint.dirpath = f"checkpoints/{name}"
    return name


@dataclass
class Run:
    """What the parsed command line tells the later hooks: the run's name, and the checkpoint it reads."""

    name: str
    ckpt: Checkpoint | None = None


def refuse_null_groups(cfg) -> None:
    """``null`` (or one value) for a group of settings (``checkpoint: null``), which jsonargparse takes for the
    Trainer's and each callback's group; a setting's own null meets its type's bound, as any other value does."""
    for key, group in FLAG_GROUPS.items():
        if key in cfg and not hasattr(cfg[key], "items"):
            raise ValueError(f"{key}: {written(cfg[key])}: {key} is a group of {group.__name__}'s settings, not one "
                             f"value; give them as a mapping (e.g. `{key}: {{...}}` in a config), or leave {key} out "
                             "for its defaults")  # fmt: skip


class BoundedTrainer(Trainer):
    """Lightning's Trainer: every aspect of training, as flags; the settings it divides by, clips by or waits for
    bounded on their types."""

    def __init__(self, *, accumulate_grad_batches: Count = 1, log_every_n_steps: Count | None = None,
                 check_val_every_n_epoch: Count | None = 1, gradient_clip_val: NonNegativeFloat | None = None,
                 min_steps: NonNegative | None = None, min_epochs: NonNegative | None = None,
                 num_sanity_val_steps: TopK | None = None, val_check_interval: Count | Share | Time | None = None,
                 max_time: Time | None = None, barebones: Literal[False] = False,
                 enable_checkpointing: Literal[True] | None = None, **kwargs) -> None:  # fmt: skip
        """
        Args:
            accumulate_grad_batches: Accumulate the gradients of this many batches before each optimizer step.
            log_every_n_steps: Log every N training steps (None: Lightning's 50).
            check_val_every_n_epoch: Validate after every N training epochs (None: by val_check_interval alone).
            gradient_clip_val: Clip the gradients' norm to this value (0 or None: no clipping).
            min_steps: Train at least this many steps, whatever stops the run earlier (None: no minimum).
            min_epochs: Train at least this many epochs (None: no minimum).
            num_sanity_val_steps: Validation batches run before training, to catch a bug early (-1: all of them;
                None: Lightning's 2).
            val_check_interval: Validate every N training batches, or after this fraction of an epoch, or after this
                time (None: once an epoch).
            max_time: Stop training after this time, e.g. 00:12:00:00 (None: no limit).
            barebones: Always false: every run keeps its logs and checkpoints (time steps with experiments.bench).
            enable_checkpointing: Never false: every run keeps checkpoints/NAME/last.ckpt, to resume, sample and
                export (--checkpoint.save_top_k 0 keeps it alone).
        """
        bounded = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "__class__")}
        check_args(BoundedTrainer.__init__, bounded, "trainer")
        super().__init__(**bounded, **kwargs)


def bound_trainer(trainer, sub: str | None = None) -> None:
    """What no one setting's type can say: more CPU devices than cores, a GPU that is not there, nodes that no
    launcher starts, float16 weights for AdamW, and a limit of 0 batches for ``sub`` (validate, test, predict)."""
    devices, cores = str(trainer.get("devices")), os.cpu_count() or 1
    if devices.isdigit() and int(devices) > cores and not torch.cuda.is_available():
        raise ValueError(f"trainer.devices={shortened(devices)}: on a CPU each device is a process of its own, and "
                         f"this machine has {cores} cores; pass at most --trainer.devices {cores}")  # fmt: skip
    if str(trainer.get("accelerator")) in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(f"trainer.accelerator {trainer.get('accelerator')}: this machine has no GPU that torch can "
                         "use; pass --trainer.accelerator cpu, or auto")  # fmt: skip
    nodes = trainer.get("num_nodes")
    if isinstance(nodes, int) and nodes > 1 and not any(env in os.environ for env in CLUSTER_ENV):
        raise ValueError(f"trainer.num_nodes={shortened(str(nodes))} with no cluster to join: this process would wait "
                         "for the other nodes without end; launch the command on every node under SLURM or torchrun, "
                         "or with MASTER_ADDR, MASTER_PORT and NODE_RANK set (.readme/going-big.md)")  # fmt: skip
    if sub == "fit" and str(trainer.get("precision")) == "16-true":  # NaN at the first step (test_reliability.py)
        raise ValueError("trainer.precision 16-true keeps the weights and AdamW's state in float16, where its eps "
                         "(1e-8) is 0: a weight whose gradient is 0 becomes NaN at the first step; pass 16-mixed "
                         "(float16 arithmetic over float32 weights) or bf16-true")  # fmt: skip
    if (limit := LIMITS.get(sub or "")) and trainer.get(limit) == 0:  # it printed nothing, and exited 0
        raise ValueError(f"trainer.{limit} 0: {sub} would read no batch; leave it out, or pass a count of batches or "
                         "a fraction of the split")  # fmt: skip


def refuse_unlogged_monitors(cfg, logged: tuple[str, ...] | None) -> None:
    """A monitored metric that the model's validation does not log, refused before anything is written."""
    monitors = [("checkpoint", "SafeModelCheckpoint", cfg.checkpoint.monitor)] + [
        ("trainer.callbacks", _class_name(c), (getattr(c, "init_args", None) or {}).get("monitor"))
        for c in cfg.trainer.get("callbacks") or []]  # fmt: skip
    for key, name, monitor in monitors:
        if logged and isinstance(monitor, str) and monitor.startswith("val/") and monitor not in logged:
            raise ValueError(f"{key}.monitor {monitor!r} ({name}) is no metric that this model's validation logs "
                             f"({', '.join(logged)}); pass one of those")  # fmt: skip


def settle_output(sub: str | None, cfg) -> None:
    """Lightning's and W&B's messages unless ``--verbose``; for predict, no kept predictions, no loggers (it logs no
    metric), and the whole file on every device."""
    if sub != "fit":
        warnings.filterwarnings("ignore", message=r"The dirpath has changed from")
    if not cfg.get("verbose"):
        quiet()
    if sub == "predict":
        if cfg.get("return_predictions") is None:
            cfg.return_predictions = False  # written as they come (PredictionWriter), not kept
        cfg.trainer.logger = False
        cfg.trainer.use_distributed_sampler = False  # each process reads all: rank 0 writes it whole, in order


def read_run_checkpoint(cfg, name: str) -> Checkpoint | None:
    """The run's ``--ckpt_path`` (``last``: this run's own last.ckpt), read once, without its weights."""
    if cfg.get("weights_only") is False:  # Lightning's flag: every checkpoint here is read as data, whatever it says
        raise ValueError("--weights_only false would unpickle the checkpoint, running any code it holds; every "
                         "checkpoint here is read as data: leave the flag out")  # fmt: skip
    if cfg.get("ckpt_path") is None:
        return None
    if cfg.ckpt_path == "last":
        last = Path(cfg.checkpoint.dirpath or "checkpoints") / "last.ckpt"
        if not last.is_file():
            raise FileNotFoundError(f"--ckpt_path last: there is no {last} to resume (the run is named {name!r}); "
                                    "start it without --ckpt_path, or name another run with --name")  # fmt: skip
        cfg.ckpt_path = str(last)
    return Checkpoint(cfg.ckpt_path, weights=False)


DESCRIPTION = "Train and evaluate the project's models. The other commands: cli.py --help."


def sizes_help() -> str:
    """fit's description: the model's sizes and choices."""
    hint = get_type_hints(TransformerConfig)
    shown = ", ".join(f"{f.name} {'|'.join(get_args(hint[f.name])) if f.type.startswith('Literal') else f.default}"
                      for f in fields(TransformerConfig) if f.name not in LINKED)  # fmt: skip
    return (
        "Train a model. Its sizes and choices, as --model.model.NAME VALUE (defaults: the tutorial's enwik8 "
        f"model; vocab_size, num_classes and context come from the data): {shown}. "
        "Every model setting with its meaning: --model.model.help LMConfig (or ClassifierConfig, MaskedLMConfig, "
        "EncoderDecoderConfig, XLConfig); the optimiser's: --model.optim.help OptimConfig; a module's: --model.help "
        "LitCharLM (or LitClassifier, LitMaskedLM, LitSeq2Seq, LitXL); a config's settings: --config CONFIG "
        "--print_config."
    )


CONFIG_CLASSES = {
    c.__name__: c for c in (LMConfig, ClassifierConfig, MaskedLMConfig, EncoderDecoderConfig, XLConfig, OptimConfig)
}


def nested_help(argv: list[str]) -> str | None:
    """The help of a settings class inside the model (``--model.model.help LMConfig``), which jsonargparse's
    help does not reach."""
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        if not re.fullmatch(r"--model\.(init_args\.)?\w+\.help", key):
            continue
        value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        cls = CONFIG_CLASSES.get(value.rsplit(".", 1)[-1])
        if cls is None:
            raise ValueError(f"{key} {value[:60]!r}: not a settings class; use one of {', '.join(CONFIG_CLASSES)}")
        parser = ArgumentParser(prog=f"{Path(sys.argv[0]).name} {argv[0]}", description=cls.__doc__)
        parser.add_class_arguments(cls, nested_key=key.removeprefix("--").removesuffix(".help"))
        return parser.format_help()
    return None


def _class_name(item) -> str:
    return str(getattr(item, "class_path", "")).rsplit(".", 1)[-1]


DATA_OF = {"LitCharLM": "TextDataModule", "LitXL": "OrderedTextDataModule", "LitClassifier": "IMDbDataModule",
           "LitMaskedLM": "IMDbMLMDataModule", "LitSeq2Seq": "TransductionDataModule"}  # fmt: skip
"""The data module whose batches each model reads (a model knows nothing of the data; the command line pairs them)."""

# what a launcher of several nodes sets (torchrun, a manual launch, SLURM, LSF, MPI): Lightning's environments
CLUSTER_ENV = ("MASTER_ADDR", "SLURM_NTASKS", "LSB_JOBID", "OMPI_COMM_WORLD_SIZE")
# the trainer's limit of the batches each scoring command reads
LIMITS = {"validate": "limit_val_batches", "test": "limit_test_batches", "predict": "limit_predict_batches"}


# What every run has; a config's `trainer.callbacks` adds to these (CLI.with_project_callbacks).
PROJECT_CALLBACKS: list[dict[str, Any]] = [
    {"class_path": f"{ProgressBar.__module__}.ProgressBar"},
    {"class_path": "lightning.pytorch.callbacks.LearningRateMonitor", "init_args": {"logging_interval": "step"}},
    {"class_path": f"{PhaseTimes.__module__}.PhaseTimes"},
    {"class_path": f"{Throughput.__module__}.Throughput"},
    {"class_path": f"{StopOnSignal.__module__}.StopOnSignal"},
]


def configs_name_loggers(argv: list[str], configs: list[dict]) -> bool:
    """Whether the ``--config`` files name the run's loggers, and no flag edits the default list: then that list
    need not be read."""
    named = any(isinstance(c.get("trainer"), dict) and "logger" in c["trainer"] for c in configs)
    return named and not any(a == "--trainer" or a.startswith(("--trainer=", "--trainer.logger")) for a in argv)


def nulls_whole(argv: list[str]) -> list[str]:
    """``--model.model.KEY null`` as ``--model.model {KEY: null}``: jsonargparse hands a setting of a class's
    settings (model.model, model.optim) on as text, where null becomes 'None', which no optional setting takes."""
    out, i = [], 0
    while i < len(argv):
        flag, eq, value = argv[i].partition("=")
        if not eq and i + 1 < len(argv) and flag.startswith("--"):
            value = argv[i + 1]
        nested = re.fullmatch(r"(--model\.(?:init_args\.)?(?!init_args\b)\w+)\.([\w.]+)", flag)
        if nested and value in NULLS:
            keys = nested[2].split(".")
            out.append(f"{nested[1]}={{{': {'.join(keys)}: null{'}' * len(keys)}")
            i += 1 if eq else 2
        else:
            out.append(argv[i])
            i += 1
    return out


NULLS = ("null", "Null", "NULL", "~")  # YAML's


class SaveRunConfig(SaveConfigCallback):
    """Lightning's: the run's config.yaml in its log folder; nothing with no logger (not the working folder)."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if trainer.loggers:
            super().setup(trainer, pl_module, stage)


class CLI(LightningCLI):
    """LightningCLI with the project's shared loggers and callbacks, data-to-model links and checks."""

    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        self.argv = sys.argv[1:] if args is None else list(args)
        if text := nested_help(self.argv):
            print(text)
            sys.exit(0)
        parser_kwargs = {"exit_on_error": False, "description": DESCRIPTION}  # main(): a parse error, one line
        if "fit" in self.subcommands():
            parser_kwargs["fit"] = {"description": sizes_help()}  # fit's help names the model's sizes
        super().__init__(
            LitTransformer,
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            save_config_callback=SaveRunConfig,
            save_config_kwargs={"overwrite": True},
            parser_kwargs=parser_kwargs,
            auto_configure_optimizers=False,  # the modules build their own AdamW groups and schedule
            trainer_class=BoundedTrainer,
            args=args,  # None: read sys.argv
            run=run,
        )

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]  # a method here: it reads self.argv
        """Only the subcommand being run gets a parser (``--help`` lists them all); the run's ``--verbose``
        replaces that of ``Trainer.validate`` and ``Trainer.test``."""
        every = LightningCLI.subcommands()
        every = {name: {*skip, "verbose"} if name in ("validate", "test") else skip for name, skip in every.items()}
        asked = self.argv[0] if getattr(self, "argv", None) else None
        return {asked: every[asked]} if asked in every else every

    def add_default_arguments_to_parser(self, parser) -> None:
        """Lightning's ``--seed_everything``, with numpy's bound on seeds declared on its type."""
        parser.add_argument("--seed_everything", type=bool | GlobalSeed, default=self.seed_everything_default,
                            help="Seed every generator with this number before the classes are made; true: a random "
                            "seed.")  # fmt: skip

    def add_arguments_to_parser(self, parser) -> None:
        # Sizes that come from the data are never typed twice.
        parser.link_arguments("data.vocab_size", "model.init_args.model.vocab_size", compute_fn=self.vocab_size,
                              apply_on="instantiate")  # fmt: skip
        parser.link_arguments("data.num_classes", "model.init_args.model.num_classes", apply_on="instantiate")
        parser.link_arguments("data.context", "model.init_args.model.context", apply_on="instantiate")
        # What every run shares; a config changes only what differs (e.g. `checkpoint: {save_top_k: 3}`).
        parser.add_argument("--name", type=RunName | None, default=None,
                            help="Run name: logs/<name>/, checkpoints/<name>/ (default: the config's).")  # fmt: skip
        for key, callback in CALLBACK_GROUPS.items():
            parser.add_lightning_class_args(callback, key)
        for flag, default, text in (
            ("final_validation", True, "After fit, score the whole validation split once when "
             "trainer.limit_val_batches scored part of it."),
            ("verbose", False, "Show Lightning's and W&B's own messages and the model summary."),
        ):  # fmt: skip
            parser.add_argument(f"--{flag}", type=bool, default=default, help=text)
        name = RUN
        self.parsers = [*getattr(self, "parsers", []), parser]  # one per subcommand: parse_arguments may trim them
        parser.set_defaults({
            "trainer.logger": [
                {"class_path": f"{CSVLogger.__module__}.CSVLogger", "init_args": {"save_dir": "logs", "name": name}},
                {"class_path": f"{WandbLogger.__module__}.WandbLogger",
                 "init_args": {"save_dir": "logs", "name": name}},
            ],
            "trainer.callbacks": PROJECT_CALLBACKS,
            "checkpoint.dirpath": f"checkpoints/{name}",
            "checkpoint.save_last": True,
            "checkpoint.auto_insert_metric_name": False,
            # last.ckpt is always the newest state: the run-folder lock keeps other runs out, and a resumed run
            # whose folder moved, or whose cadence changed, would otherwise write last-v1.ckpt beside it
            "checkpoint.enable_version_counter": False,
        })  # fmt: skip

    def parse_arguments(self, parser, args) -> None:
        """Config files read with limits, parsed, then checked, the run named and its checkpoint read: what later
        hooks need travels as ``self.run``."""
        check_values(self.argv)
        if configs_name_loggers(self.argv, check_config_files(self.argv)):
            for each in self.parsers:  # the default list need not be read: reading it imports W&B (0.4 s)
                each.set_defaults({"trainer.logger": None})
        self.config = parser.parse_args(nulls_whole(self.argv))  # as Lightning's parse_arguments, with its nulls
        silence()
        sub = self.config.get("subcommand")
        cfg = self.config[sub] if sub else self.config
        refuse_null_groups(cfg)
        bound_trainer(cfg.get("trainer") or {}, sub)
        settle_output(sub, cfg)
        self.run = Run(name_run(cfg), read_run_checkpoint(cfg, run_name(cfg)) if sub else None)

    def _parse_ckpt_path(self) -> None:
        """The checkpoint decides the architecture and the command line decides training (Lightning's private
        method would put every hyper-parameter of the checkpoint over the command line); another kind of model is
        refused."""
        ckpt = self.run.ckpt
        if ckpt is None or not ckpt.hparams and not ckpt.class_path:
            return
        sub = self.config.subcommand
        cfg = self.config[sub]
        given = cfg.model.class_path.rsplit(".", 1)[-1]
        if ckpt.class_path and ckpt.kind != given:
            raise ValueError(f"{ckpt.source} holds a {ckpt.kind} and this config runs a {given}; pass the config the "
                             "checkpoint was trained with")  # fmt: skip
        if ckpt.model is None:
            return
        trained = ckpt.settings(class_at(cfg.model.class_path))
        ckpt.refuse_changed((cfg.model.get("init_args") or {}).get("model") or {}, trained, self.argv, LINKED)
        architecture = {sub: {"model": {"class_path": cfg.model.class_path, "dict_kwargs": {"model": trained}}}}
        self.config = self.parser.parse_object(architecture, self.config)
        init = self.config[sub].model.get("init_args")
        if init is not None and init.get("init_from"):  # the checkpoint holds what it started from, and more
            init.init_from = None

    def _dump_config(self) -> None:
        """Lightning's private step that records the config in the modules' hparams, without checking the config
        again (it was checked as it was parsed) and read back by libyaml: about a third of a refused run's time."""
        if not hasattr(self, "config_dump"):
            text = self.parser.dump(self.config, format="yaml", skip_none=False, skip_link_targets=False,
                                    skip_validation=True)  # fmt: skip
            dump = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text).get_single_data()
            self.config_dump = dump[self.config.subcommand] if "subcommand" in self.config else dump

    def _run_subcommand(self, subcommand: str) -> None:
        """Lightning's run of the command, where a model whose scores overflow (greedy decoding refuses them) is
        named as its checkpoint (in fit, as the run's own weights)."""
        with damaged(self.run.ckpt.path if self.run.ckpt and subcommand != "fit" else None):
            super()._run_subcommand(subcommand)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer's refusal of its own settings (in words that name the value, not where it was set), named
        as the trainer's."""
        given = (self.config[self.subcommand] if self.subcommand else self.config).get("trainer") or {}
        try:
            trainer: Any = super().instantiate_trainer(**kwargs)
        except (MisconfigurationException, ValueError, ModuleNotFoundError, RuntimeError, TypeError) as e:
            raise ValueError(named_as("trainer", e, dict(given))) from e
        for callback in trainer.callbacks:  # a config's own: a failure in its code is the config's (errors.py)
            callback.from_config = type(callback).__name__ in getattr(self, "added", ())
        return trainer

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        if isinstance(cfg.trainer.get("callbacks"), Namespace):  # one callback, as the Trainer takes it: a list of one
            cfg.trainer.callbacks = [cfg.trainer.callbacks]
        ckpt = self.run.ckpt
        if self.subcommand == "fit" and ckpt is not None and ckpt.run:
            self._continue_logs(cfg, ckpt.run)
        data = cfg.data.get("init_args") or {}
        if ckpt is not None:
            ckpt.check_data(data)
        if ckpt is None or not ckpt.model:  # no checkpoint decides the model: its context comes from the data
            vocab = getattr(class_at(cfg.data.class_path), "vocab_size", None)  # a task's fixed alphabet, or a property
            check_linked_sizes((cfg.model.get("init_args") or {}).get("model") or {}, data, vocab)
        model_class = class_at(cfg.model.class_path)
        if (reads := DATA_OF.get(model_class.__name__)) is None:  # LitTransformer
            raise ValueError(f"model {model_class.__name__} is what the models share, not one to train; pass one of "
                             f"{', '.join(DATA_OF)}")  # fmt: skip
        if reads != _class_name(cfg.data):
            raise ValueError(f"data {_class_name(cfg.data)}: a {model_class.__name__} reads {reads}'s batches; "
                             f"pass --data {reads}, or a config of configs/ that pairs them")  # fmt: skip
        init = cfg.model.get("init_args")
        if init is not None and "model" in init and init.model is None and (sizes := settings_class(model_class)):
            init.model = Namespace(**asdict(sizes()))  # no sizes given: the defaults, which the data's links fill in
        if cfg.checkpoint.monitor is None and hasattr(model_class, "checkpoint_metric"):
            monitor, mode, pattern = model_class.checkpoint_metric
            if cfg.checkpoint.mode not in ("min", mode):  # "min" is the default: only another choice was asked
                raise ValueError(f"checkpoint.mode {cfg.checkpoint.mode} with no checkpoint.monitor, whose default "
                                 f"{monitor} is kept at its {mode}imum; name the metric too, e.g. --checkpoint.monitor "
                                 f"{monitor} --checkpoint.mode {cfg.checkpoint.mode}, or drop the mode")  # fmt: skip
            cfg.checkpoint.monitor, cfg.checkpoint.mode = monitor, mode
            cfg.checkpoint.filename = cfg.checkpoint.filename or pattern
        refuse_unlogged_monitors(cfg, getattr(model_class, "val_metrics", None))
        if not cfg.get("verbose") and cfg.trainer.get("enable_model_summary") is None:
            cfg.trainer.enable_model_summary = False  # the run's header gives the model's size in one line
        if cfg.trainer.precision == "bf16-mixed" and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
            note("note: no GPU with bf16 here, so trainer.precision bf16-mixed runs as 32-true")
            cfg.trainer.precision = "32-true"
        callbacks = self.with_project_callbacks(cfg.trainer.get("callbacks") or [])
        self.added = {_class_name(c) for c in callbacks} - {_class_name(Namespace(**c)) for c in PROJECT_CALLBACKS}
        if cfg.trainer.get("logger") in (False, []) and any(_class_name(c) == "LearningRateMonitor" for c in callbacks):
            # Lightning refuses a LearningRateMonitor without a logger; with logging off it has nothing to do.
            if self.subcommand != "predict":  # predict runs without loggers whatever it is given
                note("note: logging is off (trainer.logger), so the LearningRateMonitor callback is left out")
            callbacks = [c for c in callbacks if _class_name(c) != "LearningRateMonitor"]
        if cfg.trainer.get("enable_progress_bar") is False:  # Lightning refuses a progress bar it may not show
            callbacks = [c for c in callbacks if _class_name(c) != "ProgressBar"]
        cfg.trainer.callbacks = callbacks

    @staticmethod
    def with_project_callbacks(callbacks: list) -> list:
        """A config's ``trainer.callbacks`` with the project's that it left out put back before them (its own
        progress bar stands in for the project's); a second SafeModelCheckpoint is refused."""
        if any(_class_name(c) == SafeModelCheckpoint.__name__ for c in callbacks):
            raise ValueError(
                "trainer.callbacks lists a SafeModelCheckpoint, and every run has one already, which writes "
                "checkpoints/NAME/last.ckpt; set its policy with the checkpoint key instead, e.g. --checkpoint.monitor "
                "val/bpc --checkpoint.save_top_k 1 --checkpoint.dirpath DIR (or `checkpoint:` in a config)"
            )
        given = {_class_name(c) for c in callbacks}
        bar = any(name.endswith("ProgressBar") and name != "ProgressBar" for name in given)  # the config's own
        missing = [Namespace(class_path=d["class_path"], init_args=Namespace(**d.get("init_args", {})))
                   for d in PROJECT_CALLBACKS if (name := d["class_path"].rsplit(".", 1)[-1]) not in given
                   and not (name == "ProgressBar" and bar)]  # fmt: skip
        return missing + [c for c in callbacks if not (bar and _class_name(c) == "ProgressBar")]

    def _continue_logs(self, cfg, run: dict) -> None:
        """A resumed run logs into the CSV version and the W&B run it started (the checkpoint names them)."""
        loggers = cfg.trainer.get("logger")
        for logger in loggers if isinstance(loggers, list) else [loggers] if loggers else []:  # one, or a list
            name, version = _class_name(logger), run.get(_class_name(logger))
            if version is None or not hasattr(logger, "init_args"):
                continue
            logger.init_args["id" if name == "WandbLogger" else "version"] = version

    def check_weights_fit(self) -> None:
        """The checkpoint's weights checked against the module, and its vocabulary given to the data; scoring
        with no checkpoint is said to score untrained weights."""
        if ckpt := self.run.ckpt:
            ckpt.check_fits(self.model)
            if self.subcommand == "fit":
                ckpt.check_resumes()
            self._guard_restore(ckpt.source)
            if ckpt.vocab is not None:  # a file of fewer characters is scored with the trained vocabulary
                self.datamodule.load_state_dict(vocab_state(ckpt.vocab))
            return
        settings = self.config[self.subcommand].model.get("init_args") or {}
        if self.subcommand != "fit" and not settings.get("init_from"):
            note(f"no --ckpt_path: {self.subcommand} scores the model as initialised, untrained; pass --ckpt_path "
                 "checkpoints/NAME/last.ckpt for a trained one")  # fmt: skip

    def _guard_restore(self, source: str) -> None:
        """Lightning's restoring steps, under :func:`restoring` (no public hook wraps them)."""
        connector = self.trainer._checkpoint_connector
        connector.__class__ = GuardedRestore  # a class, not closures: ddp_spawn pickles the trainer
        cast(GuardedRestore, connector).source = source

    def before_fit(self) -> None:
        self.check_weights_fit()
        self._check_pretrained()
        if self.reads_first:  # the data read and checked now: a refused run leaves no folders
            self.datamodule.prepare_data()
            self.datamodule.setup("fit")
        if getattr(rank_zero_only, "rank", 0) == 0:  # DDP's other processes run this CLI too
            folder, ckpt = Path(self.checkpoint_dir), self.config.fit.get("ckpt_path")  # a resume of the folder's run
            claim_run_folder(folder, resuming=bool(ckpt) and Path(ckpt).resolve().is_relative_to(folder.resolve()))
            note(self.header())

    @property
    def reads_first(self) -> bool:  # alone, or starting the others: a refused file is then one line, from this one
        return self.trainer.world_size == 1 or self.trainer.strategy.launcher is not None

    def header(self) -> str:
        """The run in two lines, before the bar: its name and folders, and the model's size."""
        logs = [f"W&B ({lg.mode})" if isinstance(lg, WandbLogger) else f"{lg.log_dir}/" if lg.log_dir
                else type(lg).__name__ for lg in self.trainer.loggers]  # fmt: skip
        model, cfg = self.model.model, self.model.model.cfg
        resuming = f"resuming from {shown(self.config.fit.ckpt_path)}\n" if self.config.fit.get("ckpt_path") else ""
        return resuming + (
            f"run {self.run.name}: checkpoints in {shown(self.checkpoint_dir)}/, logs in {', '.join(logs) or 'none'}\n"
            f"model: {type(model).__name__}, {count_parameters(model) / 1e6:.2f}M parameters, {cfg.depth} blocks x "
            f"{cfg.emb}, {cfg.heads} heads, context {cfg.context}"
            + (f" and a memory of {cfg.mem_len}" if isinstance(cfg, XLConfig) else "")
        ).lstrip("\n")

    @property
    def checkpoint_dir(self) -> str:
        ours = run_checkpoint(self.trainer)
        assert ours is not None and ours.dirpath is not None  # every fit has one, with its folder set
        return str(ours.dirpath)

    def after_fit(self) -> None:
        release_run_folder(Path(self.checkpoint_dir))
        trainer, ckpt = self.trainer, self.run.ckpt
        if self.config.fit.trainer.get("fast_dev_run"):  # Lightning's check of every loop
            note(f"fast_dev_run: {trainer.global_step} steps checked; no checkpoint or log was written")
            return
        spawned = isinstance(trainer.strategy.launcher, _MultiProcessingLauncher)  # they trained, not this process
        if trainer.global_step == (ckpt.step if ckpt else 0) and not spawned:  # no batch, or a resume at its end
            where = f"; {ckpt.source} is at step {ckpt.step} already: raise the limit to go on" if ckpt else ""
            limits = {k: self.config.fit.trainer.get(k) for k in ("max_steps", "max_epochs", "max_time",
                                                                   "limit_train_batches")}  # fmt: skip
            shown_limits = ", ".join(f"trainer.{k}={v}" for k, v in limits.items() if v is not None)
            note(f"this run trained no step ({shown_limits}), so it wrote no checkpoint{where}")
            return
        self._validate_in_full()
        ours = run_checkpoint(self.trainer)
        best = f", best: {shown(ours.best_model_path)}" if ours is not None and ours.best_model_path else ""
        log = next((f", logs in {lg.log_dir}/" for lg in self.trainer.loggers
                    if lg.log_dir and not isinstance(lg, WandbLogger)), "")  # fmt: skip
        others = "".join(f", and {shown(c.dirpath)}/ (trainer.callbacks' {type(c).__name__})"  # where they wrote
                         for c in self.trainer.checkpoint_callbacks if c is not ours and isinstance(c, ModelCheckpoint)
                         and c.dirpath and Path(c.dirpath).is_dir() and any(Path(c.dirpath).iterdir()))  # fmt: skip
        note(f"this run: checkpoints in {shown(self.checkpoint_dir)}/ (newest: last.ckpt{best}){others}{log}; continue "
             "it with --ckpt_path last, or start another with --name")  # fmt: skip
        for lg in self.trainer.loggers:
            if isinstance(lg, WandbLogger) and (lg.mode or "").startswith("offline"):
                note(f"W&B logged offline: upload with `wandb sync {lg.save_dir}/wandb/offline-run-*`, once logged in")

    def _validate_in_full(self) -> None:
        """The trained model scored once on the whole validation split, where the run's validations scored part."""
        trainer = self.trainer
        if not self.config.fit.final_validation or trainer.interrupted or not trainer.num_val_batches:
            return
        whole = len(self.datamodule.val_dataloader())
        if sum(trainer.num_val_batches) >= whole:
            return
        limit, trainer.limit_val_batches = trainer.limit_val_batches, 1.0
        try:
            (scores,) = trainer.validate(self.model, datamodule=self.datamodule, verbose=False)
        finally:
            trainer.limit_val_batches = limit
        shown_scores = ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
        note(f"final validation over the whole validation split ({whole} batches): {shown_scores}")

    def _check_pretrained(self) -> None:
        """``model.pretrained``'s weights read (checked) before the data, and its vocabulary given to the data."""
        path = getattr(self.model, "pretrained", None)
        if not path or self.config.fit.get("ckpt_path"):  # a resumed run's weights are its own
            return
        vocab = self.model.read_pretrained()  # read once: fit loads it
        if vocab is not None:
            self.datamodule.load_state_dict(vocab_state(vocab))

    def vocab_size(self, data_size: int) -> int:
        """The model's vocabulary size: the data's, or the checkpoint's where one decides the architecture."""
        ckpt = self.run.ckpt if hasattr(self, "run") else None
        if ckpt is None or ckpt.vocab is None or not isinstance(ckpt.model, dict):
            return data_size
        trained = ckpt.model.get("vocab_size")
        return trained if isinstance(trained, int) and is_count(trained) else data_size

    def _read_data(self) -> None:
        """validate and test: the data read and checked before the loggers start (a refusal leaves no log)."""
        self.check_weights_fit()
        if self.reads_first:
            self.datamodule.prepare_data()
            self.datamodule.setup()  # no stage: each module's own note of its stage comes with Lightning's call

    def before_predict(self) -> None:  # predict has no loggers
        if type(self.datamodule).predict_dataloader is LightningDataModule.predict_dataloader:  # the generated tasks
            raise ValueError(f"predict reads no file for a {type(self.model).__name__}: its sources are decoded by "
                             "`cli.py decode --ckpt_path CKPT --input_file FILE` (one source a line)")  # fmt: skip
        self.check_weights_fit()
        # its file read now, as validate's: a read that waits ends on a signal (not under ddp_spawn, which pickles)
        if self.reads_first and not isinstance(self.trainer.strategy.launcher, _MultiProcessingLauncher):
            loader = self.datamodule.predict_dataloader()
            self.datamodule.predict_dataloader = lambda: loader

    before_validate = before_test = _read_data


class GuardedRestore(_CheckpointConnector):
    """Lightning's restoring steps, under :func:`restoring` for the checkpoint named ``source``."""

    source = "--ckpt_path"

    def _restore_modules_and_callbacks(self, *args, **kwargs) -> None:
        with restoring(self.source):
            super()._restore_modules_and_callbacks(*args, **kwargs)

    def restore_training_state(self) -> None:
        with restoring(self.source):
            super().restore_training_state()


def build_cli(args: list[str] | None = None, run: bool = True) -> CLI:
    """The one way to build the CLI, for ``main`` and the tests alike."""
    argv = sys.argv[1:] if args is None else args
    # The configs' attribute docstrings (their help) are read only for a help (they cost seconds).
    set_parsing_settings(docstring_parse_attribute_docstrings=any("help" in a or a == "-h" for a in argv))
    command_line = sys.argv
    if args is not None:  # a run of an experiment's (or a test's): Lightning warns of the command line beside it
        sys.argv = sys.argv[:1]
    try:
        return CLI(args=args, run=run)
    finally:
        sys.argv = command_line

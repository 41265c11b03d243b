"""The command line.

    python cli.py fit --config configs/enwik8.yaml            # train (validate, test, predict alike)
    python cli.py fit --config configs/enwik8.yaml --ckpt_path last          # resume
    python cli.py sample --ckpt_path checkpoints/enwik8/last.ckpt --prompt "The "

Everything after the subcommand is LightningCLI: ``--print_config``, ``--trainer.precision bf16-mixed``,
``--trainer.devices 2 --trainer.strategy ddp``, ``--model.init_args.model.depth 6``, ...
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import torch
from jsonargparse import ArgumentParser
from lightning import LightningDataModule
from lightning.pytorch.cli import LightningCLI

from transformers_scratch.callbacks import TrainingDiverged
from transformers_scratch.config import LMConfig
from transformers_scratch.data import ByteVocab
from transformers_scratch.lit import LitCharLM, TransformerModule

CKPT_ALIASES = {"last", "best", "hpc", "registry"}  # names Lightning resolves itself


def check_ckpt_path(ckpt_path: str | None) -> None:
    if ckpt_path and ckpt_path not in CKPT_ALIASES and not Path(ckpt_path).is_file():
        raise FileNotFoundError(
            f"--ckpt_path {ckpt_path!r} does not exist; pass a checkpoint file such as "
            "checkpoints/enwik8/last.ckpt, or 'last' to resume the newest run of this config"
        )


class CLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        # Sizes that come from the data are never typed twice.
        parser.link_arguments("data.vocab_size", "model.init_args.model.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.num_classes", "model.init_args.model.num_classes", apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        check_ckpt_path(cfg.get("ckpt_path"))
        if cfg.trainer.precision == "bf16-mixed" and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
            print("note: no GPU with bf16 here, so trainer.precision bf16-mixed runs as 32-true", file=sys.stderr)
            cfg.trainer.precision = "32-true"
        callbacks = cfg.trainer.get("callbacks") or []
        if cfg.trainer.get("logger") is False and any(_is_lr_monitor(c) for c in callbacks):
            # Lightning refuses a LearningRateMonitor without a logger; with logging off it has nothing to do.
            print("note: --trainer.logger false, so the LearningRateMonitor callback is left out", file=sys.stderr)
            cfg.trainer.callbacks = [c for c in callbacks if not _is_lr_monitor(c)]


def _is_lr_monitor(callback) -> bool:
    return str(getattr(callback, "class_path", "")).endswith("LearningRateMonitor")


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
    check_ckpt_path(args.ckpt_path)
    ckpt = torch.load(args.ckpt_path, map_location="cpu", weights_only=True)
    hparams = ckpt.get("hyper_parameters", {})
    if not (hparams.get("_class_path", "").endswith("LitCharLM") or isinstance(hparams.get("model"), LMConfig)):
        raise ValueError(
            f"{args.ckpt_path!r} is not a character-model checkpoint; sample needs one written by "
            "fit with LitCharLM (e.g. --config configs/enwik8.yaml)"
        )
    accepted = inspect.signature(LitCharLM).parameters
    module = LitCharLM(**{k: v for k, v in hparams.items() if k in accepted})
    module.load_state_dict(ckpt["state_dict"])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = module.model.to(device).eval()
    vocab = ByteVocab(ckpt.get("Enwik8DataModule", {}).get("vocab_symbols"))
    prompt = vocab.encode_text(args.prompt).to(device)
    if args.seed is not None:
        torch.manual_seed(args.seed)
    out = model.generate(prompt, args.length, args.temperature, args.top_k, use_cache=not args.no_cache)
    print(vocab.decode(out[0].cpu()))


def main(argv: list[str] | None = None) -> None:
    args, argv = argv, sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["sample"]:
            sample(argv[1:])
        else:
            CLI(
                TransformerModule,
                LightningDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                save_config_kwargs={"overwrite": True},
                args=args,  # None: read sys.argv
            )
    except (ValueError, OSError, TrainingDiverged) as e:  # the user's input or files: one line, no traceback
        if os.environ.get("TS_DEBUG"):
            raise
        print(f"error: {e}\n(set TS_DEBUG=1 to see the traceback)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

"""Train a tiny LM a few steps: in one process on the global batch, or on 2 CPU processes (gloo) with DDP
or FSDP.

    python tests/distributed_script.py single|ddp|fsdp|fsdp-checkpointing|fsdp-compile OUT_DIR

Writes OUT_DIR/losses_rank{R}.json (loss of every step on each rank), OUT_DIR/writes_rank{R}.txt (every
checkpoint file a rank wrote), OUT_DIR/ckpt/last.ckpt and, under FSDP, OUT_DIR/fsdp.json (what each FSDP
unit wraps, and whether the model ran compiled). tests/test_distributed.py compares the runs.
"""

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.strategies import FSDPStrategy
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from transformers_scratch.model.config import LMConfig  # noqa: E402
from transformers_scratch.training.callbacks import SafeModelCheckpoint  # noqa: E402
from transformers_scratch.training.modules import LitCharLM  # noqa: E402
from transformers_scratch.training.optim import OptimConfig  # noqa: E402

GLOBAL_BATCH, CONTEXT, STEPS = 8, 16, 5
MODEL = LMConfig(vocab_size=256, context=CONTEXT, emb=32, heads=4, depth=2)


class FixedWindows(Dataset):
    """64 fixed windows: the same data in any process, so the only difference is who computes what."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, 256, (64, CONTEXT + 1), generator=g)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        return self.data[i, :-1], self.data[i, 1:]


class CPUFSDP(FSDPStrategy):
    """Lightning's FSDP strategy, unchanged, on CPU processes. Lightning refuses a CPU only when the strategy's
    type is exactly FSDPStrategy, so this subclass passes; see :func:`fsdp_on_cpu` for the other half."""


def fsdp_on_cpu() -> None:
    """torch's FSDP runs on CPU with gloo given two things Lightning does not do on a CPU: device_id=cpu
    (Lightning passes the device's CUDA index, None here) and full state dicts that are not offloaded to the
    CPU (the copy would free the very storage it copies from)."""
    init, state_dict_type = FullyShardedDataParallel.__init__, FullyShardedDataParallel.state_dict_type

    def init_on_cpu(self, module, *args, device_id=None, **kwargs):
        init(self, module, *args, device_id=device_id or torch.device("cpu"), **kwargs)

    def state_dict_type_on_cpu(*args, **kwargs):
        for config in (*args, *kwargs.values()):
            if hasattr(config, "offload_to_cpu"):
                config.offload_to_cpu = False
        return state_dict_type(*args, **kwargs)

    FullyShardedDataParallel.__init__ = init_on_cpu
    FullyShardedDataParallel.state_dict_type = staticmethod(state_dict_type_on_cpu)


class RecordLosses(L.Callback):
    def __init__(self, out: Path) -> None:
        self.out, self.losses = out, []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(outputs["loss"].item())

    def on_train_start(self, trainer, module) -> None:
        wrapped = trainer.strategy.model.modules()
        units = [type(m.module).__name__ for m in wrapped if isinstance(m, FullyShardedDataParallel)]
        if units and trainer.global_rank == 0:
            report = {"units": units, "compiled": module.net is not module.model}
            (self.out / "fsdp.json").write_text(json.dumps(report))

    def on_train_end(self, trainer, module) -> None:
        (self.out / f"losses_rank{trainer.global_rank}.json").write_text(json.dumps(self.losses))


def record_writes(out: Path) -> None:
    """Log every checkpoint file a process writes, with its rank."""
    save = TorchCheckpointIO.save_checkpoint

    def logged(self, checkpoint, path, storage_options=None):
        rank = os.environ.get("LOCAL_RANK", "0")
        with open(out / f"writes_rank{rank}.txt", "a") as f:
            f.write(f"{path}\n")
        return save(self, checkpoint, path, storage_options)

    TorchCheckpointIO.save_checkpoint = logged


def main(mode: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record_writes(out)
    devices = 1 if mode == "single" else 2
    if mode.startswith("fsdp"):
        fsdp_on_cpu()
    L.seed_everything(0)
    module = LitCharLM(
        replace(MODEL, activation_checkpointing=mode == "fsdp-checkpointing"),
        OptimConfig(lr=1e-2, warmup_steps=1, schedule="constant"),
        compile=mode == "fsdp-compile",
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=CPUFSDP(process_group_backend="gloo") if mode.startswith("fsdp") else mode.replace("single", "auto"),
        max_steps=STEPS,
        gradient_clip_val=1.0,
        use_distributed_sampler=False,  # ours below: unshuffled, so rank r takes windows r, r + 2, ...
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[RecordLosses(out), SafeModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=2, save_last=True)],
    )
    data = FixedWindows()
    sampler = DistributedSampler(data, devices, trainer.global_rank, shuffle=False) if devices > 1 else None
    trainer.fit(module, DataLoader(data, batch_size=GLOBAL_BATCH // devices, sampler=sampler))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))

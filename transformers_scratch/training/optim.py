"""The optimizer, its schedule and the rules of an exact resume, for every LightningModule here.

AdamW with weight decay on the weights of linear layers and embeddings only, a linear warm-up, then a cosine
decay or a constant rate. A resumed run continues the checkpoint's random stream, and takes its optimizer
settings from the command line, not from the checkpoint.

One private Lightning attribute is used, with no public way around it: :func:`save_resume_state` corrects the
fit loop's ``_batches_that_stepped`` in the checkpoint (see its docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from .console import note


@dataclass
class OptimConfig:
    """AdamW with linear warm-up, then cosine decay or a constant rate."""

    lr: float = 3e-4
    """Peak learning rate."""
    weight_decay: float = 0.1
    """Decoupled weight decay, on the weights of linear layers and embeddings only (not biases, norms, [CLS])."""
    beta1: float = 0.9
    """AdamW's decay of the gradient's running mean."""
    beta2: float = 0.95
    """AdamW's decay of the squared gradient's running mean (0.95: GPT-3, nanoGPT; PyTorch's default is 0.999)."""
    warmup_steps: int = 100
    """Optimizer steps of linear warm-up from 0 to lr."""
    schedule: Literal["cosine", "constant"] = "cosine"
    """After warm-up: cosine decay to min_lr_ratio * lr by the last step, or constant."""
    min_lr_ratio: float = 0.1
    """The cosine's end, as a fraction of lr."""
    total_steps: int | None = None
    """Length of the cosine; None: the trainer's max_steps (or epochs x batches)."""


def lr_factor(step: int, cfg: OptimConfig, total: int) -> float:
    """Multiplier of the peak learning rate at optimizer step ``step``."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def decay_groups(module: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """Trainable parameters split into (decayed, not decayed): the weights of linear layers and embedding
    tables are decayed; biases, layer norms and lone vectors (a [CLS] vector) are not. Decided by the owning
    module, not by shape: under FSDP every parameter is a flat 1-D shard.

    A shared tensor (tied input/output embeddings) is listed once, under its first owner: AdamW would
    otherwise update it, and decay it, twice a step."""
    decay, plain, seen = [], [], set()
    for m in module.modules():
        for name, p in m.named_parameters(recurse=False):
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                (decay if name == "weight" and isinstance(m, (nn.Linear, nn.Embedding)) else plain).append(p)
    return decay, plain


def build_optimizer(module: nn.Module, cfg: OptimConfig, total: float, scaled: bool) -> tuple[dict, int]:
    """AdamW over :func:`decay_groups` and its per-step schedule over ``total`` steps, as Lightning's
    ``configure_optimizers`` returns them, and the schedule's length. ``scaled``: a GradScaler steps the
    optimizer (fp16), so it cannot be the fused one."""
    decay, plain = decay_groups(module)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    fused = not scaled and all(p.is_cuda for p in decay + plain)  # one kernel for the whole update on GPU
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused or None)
    if not math.isfinite(total):  # unbounded training: fine for a constant rate, not for a cosine
        if cfg.schedule == "cosine":
            raise ValueError("a cosine schedule needs a length: set trainer.max_steps or model.optim.total_steps")
        total = 0
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step, n=int(total): lr_factor(step, cfg, n))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}, int(total)


def save_resume_state(checkpoint: dict, global_step: int, schedule_steps: int | None) -> None:
    """What an exact resume needs beyond Lightning's own state: the global random stream (dropout) and the
    schedule's length.

    Lightning adds one to its logging step when it resumes, assuming the checkpoint was written before the
    step's own increment; one written at the end of an epoch or of training was written after it, and the
    resumed run's log rows were shifted by one. The count is stored as Lightning expects it. (Its loop state
    has no public API; tests/test_reliability.py pins the logged steps of resumed runs.)"""
    checkpoint["rng"] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        checkpoint["rng"]["cuda"] = torch.cuda.get_rng_state_all()
    checkpoint["schedule_steps"] = schedule_steps
    loop = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.state_dict", {})
    if "_batches_that_stepped" in loop:
        loop["_batches_that_stepped"] = min(loop["_batches_that_stepped"], global_step - 1)


def continue_from(checkpoint: dict, cfg: OptimConfig, schedule_steps: int | None, scheduler_configs) -> None:
    """Continue a checkpoint's random stream, and apply the optimizer settings of *this* run: restoring the
    optimizer brought back the old learning rate, betas and weight decay, which would silently win."""
    if rng := checkpoint.get("rng"):
        torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
    old = checkpoint.get("hyper_parameters", {}).get("optim")
    old = vars(old if isinstance(old, OptimConfig) else OptimConfig(**old)) if old is not None else {}
    changed = [f"model.optim.{k} {getattr(cfg, k)} (was {v})" for k, v in old.items() if getattr(cfg, k) != v]
    was = checkpoint.get("schedule_steps")
    if was is not None and schedule_steps != was:
        changed.append(f"schedule length {schedule_steps} steps (was {was})")
    for config in scheduler_configs:
        schedule, groups = config.scheduler, config.scheduler.optimizer.param_groups
        schedule.base_lrs = [cfg.lr] * len(groups)
        for i, group in enumerate(groups):
            group["initial_lr"], group["betas"] = cfg.lr, (cfg.beta1, cfg.beta2)
            group["weight_decay"] = cfg.weight_decay if i == 0 else 0.0
            group["lr"] = cfg.lr * schedule.lr_lambdas[i](schedule.last_epoch)
    if changed:
        note(f"note: resuming with {', '.join(changed)}: applied from this step on")

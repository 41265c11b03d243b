"""The optimizer, its schedule and the rules of an exact resume, for every LightningModule here.

AdamW with weight decay on the weights of linear layers and embeddings only (or Muon for the blocks' weight
matrices and AdamW for the rest), a linear warm-up, then a cosine decay, a constant rate, or a constant rate
ending in a linear decay (wsd). A resumed run continues the checkpoint's random stream, and takes its optimizer
settings from the command line, not from the checkpoint.

One private Lightning attribute is used, with no public way around it: :func:`save_resume_state` corrects the
fit loop's ``_batches_that_stepped`` in the checkpoint (see its docstring).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import nn

from ..bounds import LearningRate, NonNegative, Positive, Rate, Unit, check_fields, not_finite
from .console import note


@dataclass
class OptimConfig:
    """AdamW (or Muon for the blocks' matrices) with linear warm-up, then cosine decay or a constant rate."""

    lr: LearningRate = 3e-4
    """Peak learning rate."""
    weight_decay: LearningRate = 0.1
    """Decoupled weight decay, on the weights of linear layers and embeddings only (not biases, norms, [CLS])."""
    beta1: Rate = 0.9
    """AdamW's decay of the gradient's running mean."""
    beta2: Rate = 0.95
    """AdamW's decay of the squared gradient's running mean (0.95: GPT-3, nanoGPT; PyTorch's default is 0.999)."""
    warmup_steps: NonNegative = 100
    """Optimizer steps of linear warm-up from 0 to lr."""
    schedule: Literal["cosine", "constant", "wsd"] = "cosine"
    """After warm-up: cosine decay to min_lr_ratio * lr by the last step; constant; or wsd (warm-up, stable,
    decay): constant, then a linear decay to min_lr_ratio * lr over the last ``cooldown`` of the steps."""
    min_lr_ratio: Unit = 0.1
    """Where the decay ends, as a fraction of lr."""
    cooldown: Unit = 0.2
    """wsd: the fraction of the steps after warm-up spent decaying."""
    total_steps: Positive | None = None
    """Length of the cosine; None: the trainer's max_steps (or epochs x batches)."""
    optimizer: Literal["adamw", "muon"] = "adamw"
    """adamw for every parameter, or muon: torch.optim.Muon (momentum, then each update orthogonalised by a
    Newton-Schulz iteration; Jordan et al. 2024) for the weight matrices inside the transformer blocks, and
    AdamW for embeddings, the output layer, norms and biases."""
    muon_lr: LearningRate = 0.02
    """Muon's peak learning rate (optimizer muon), scaled per matrix by sqrt(max(1, rows / columns)) as
    torch's Muon does; the schedule scales it with lr's."""
    muon_momentum: Rate = 0.95
    """Muon's momentum (Nesterov)."""
    muon_stacked: bool = False
    """Muon as :class:`StackedMuon`: the same update, with one Newton-Schulz iteration per matrix shape on the
    stacked matrices in place of one per matrix. Its measured cost against torch's Muon, with the command, is
    on the benchmarks page."""

    def __post_init__(self) -> None:
        check_fields(self, "model.optim ")


def lr_factor(step: int, cfg: OptimConfig, total: int) -> float:
    """Multiplier of the peak learning rate at optimizer step ``step``."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    if cfg.schedule == "wsd":
        left = (1.0 - progress) / cfg.cooldown if cfg.cooldown > 0 else float(progress < 1)
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * min(1.0, left)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def decay_groups(module: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """Trainable parameters split into (decayed, not decayed): the weights of linear layers and embedding
    tables are decayed; biases, layer norms and lone vectors (a [CLS] vector) are not. Decided by the owning
    module, not by shape: under FSDP every parameter is a flat 1-D shard.

    A shared tensor (tied input/output embeddings) is listed once, under its first owner: AdamW would
    otherwise update it, and decay it, twice a step."""
    decay: list[nn.Parameter] = []
    plain: list[nn.Parameter] = []
    seen: set[int] = set()
    for m in module.modules():
        for name, p in m.named_parameters(recurse=False):
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                (decay if name == "weight" and isinstance(m, (nn.Linear, nn.Embedding)) else plain).append(p)
    return decay, plain


def muon_matrices(module: nn.Module) -> list[nn.Parameter]:
    """The weight matrices of the linear layers inside transformer blocks: what Muon updates. Embeddings and
    the output layer stay with AdamW (Muon is for hidden layers), and so do norms and biases."""
    from ..model.blocks import TransformerBlock
    from ..model.xl import XLBlock

    found: dict[int, nn.Parameter] = {}
    for block in (m for m in module.modules() if isinstance(m, (TransformerBlock, XLBlock))):
        for m in block.modules():
            if isinstance(m, nn.Linear) and m.weight.requires_grad:
                found[id(m.weight)] = cast(nn.Parameter, m.weight)
    return list(found.values())


class StackedMuon(torch.optim.Muon):
    """``torch.optim.Muon`` with one Newton-Schulz iteration per shape: the updates of every matrix that has the
    same shape once turned wide (rows <= columns, as torch turns them) are stacked and orthogonalised together
    in batched products. The arithmetic is torch's, matrix by matrix (each matrix scaled by its own norm); only
    the number of calls changes, so a model of any depth makes one iteration per shape a step, not one per
    matrix. Its options and its state are torch's, so checkpoints move between the two.

    ``ns_dtype``: the iteration's precision. None: bf16 on a GPU, as torch's, and float32 on a CPU, where a CPU
    without bf16 instructions (AVX-512 BF16, AMX) multiplies bf16 matrices ten times slower than float32 ones
    (measured: 863 against 26 ms a step for the speedrun's 16 matrices, on an AMD EPYC without them)."""

    def __init__(self, params, *args, ns_dtype: torch.dtype | None = None, **kwargs) -> None:
        super().__init__(params, *args, **kwargs)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            bufs = [self.state[p].setdefault("momentum_buffer", torch.zeros_like(p.grad)) for p in params]
            lr, decay, momentum = float(group["lr"]), group["weight_decay"], group["momentum"]
            torch._foreach_lerp_(bufs, grads, 1 - momentum)
            updates = torch._foreach_lerp(grads, bufs, momentum) if group["nesterov"] else bufs
            by_shape: dict[tuple[int, int], list[int]] = {}
            for i, u in enumerate(updates):
                by_shape.setdefault(tuple(sorted(u.shape)), []).append(i)
            for indices in by_shape.values():
                wide = torch.stack([updates[i].T if updates[i].size(0) > updates[i].size(1) else updates[i]
                                    for i in indices])  # fmt: skip
                dtype = self.ns_dtype or (torch.bfloat16 if wide.is_cuda else torch.float32)
                ortho = _newton_schulz(wide, group["ns_coefficients"], group["ns_steps"], group["eps"], dtype)
                for i, o in zip(indices, ortho, strict=True):
                    p, scale = params[i], _muon_scale(group["adjust_lr_fn"], *params[i].shape)
                    p.mul_(1 - lr * decay)
                    p.add_(o.T if p.size(0) > p.size(1) else o, alpha=-lr * scale)
        return loss


def _muon_scale(rule: str | None, rows: int, cols: int) -> float:
    """torch's Muon: a matrix's rate is lr times this."""
    if rule in (None, "original"):
        return math.sqrt(max(1, rows / cols))
    return 0.2 * math.sqrt(max(rows, cols)) if rule == "match_rms_adamw" else 1.0


def _newton_schulz(x: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
                   dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:  # fmt: skip
    """torch's quintic Newton-Schulz iteration (``torch.optim._muon``) on a stack of wide matrices at once, in
    ``dtype`` (torch's: bf16)."""
    a, b, c = coefficients
    x = x.to(dtype)
    x = x / x.flatten(1).norm(dim=1).clamp(min=eps)[:, None, None]
    for _ in range(steps):
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x


class Optimizers(torch.optim.Optimizer):
    """Several optimizers over disjoint parameters, stepped as one; ``param_groups`` lists the parts' own groups
    (read afresh), so the schedule sets every group's rate."""

    def __init__(self, *parts: torch.optim.Optimizer) -> None:
        self.parts = parts
        self.defaults = {}
        self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = {}, {}

    @property  # a view over the parts' groups, not a list of its own
    def param_groups(self) -> list[dict]:  # type: ignore[override]
        return [group for part in self.parts for group in part.param_groups]

    @property  # a view over the parts' states
    def state(self) -> dict:  # type: ignore[override]
        return {p: s for part in self.parts for p, s in part.state.items()}

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for part in self.parts:
            part.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"parts": [part.state_dict() for part in self.parts]}

    def load_state_dict(self, state_dict: dict) -> None:
        parts = state_dict.get("parts") if isinstance(state_dict, dict) else None
        if not isinstance(parts, list) or len(parts) != len(self.parts):
            raise ValueError(f"the checkpoint's optimizer state does not hold {len(self.parts)} optimizers "
                             "(adamw and muon); resume with the model.optim.optimizer it was written with")  # fmt: skip
        for part, state in zip(self.parts, parts, strict=True):
            part.load_state_dict(state)

    def __repr__(self) -> str:
        return f"Optimizers({', '.join(type(part).__name__ for part in self.parts)})"


def build_optimizer(module: nn.Module, cfg: OptimConfig, total: float, scaled: bool) -> tuple[dict, int]:
    """AdamW over :func:`decay_groups` (with ``optimizer: muon``, Muon over :func:`muon_matrices` and AdamW over
    the rest) and its per-step schedule over ``total`` steps, as Lightning's ``configure_optimizers`` returns
    them, and the schedule's length. ``scaled``: a GradScaler steps the optimizer (fp16), so it cannot be the
    fused one. Each group is named (``role``: decay, plain or muon) for :func:`continue_from`."""
    decay, plain = decay_groups(module)
    matrices = muon_matrices(module) if cfg.optimizer == "muon" else []
    if matrices:
        hidden = {id(p) for p in matrices}
        decay = [p for p in decay if id(p) not in hidden]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay, "role": "decay"},
              {"params": plain, "weight_decay": 0.0, "role": "plain"}]  # fmt: skip
    fused = not scaled and all(p.is_cuda for p in decay + plain)  # one kernel for the whole update on GPU
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused or None)
    if matrices:
        if scaled:
            raise ValueError("model.optim.optimizer muon cannot step under a GradScaler (precision 16-mixed); "
                             "use bf16-mixed or 32-true")  # fmt: skip
        muon_class = StackedMuon if cfg.muon_stacked else torch.optim.Muon
        muon = muon_class([{"params": matrices, "role": "muon"}], lr=cfg.muon_lr, weight_decay=cfg.weight_decay,
                          momentum=cfg.muon_momentum)  # fmt: skip
        optimizer = Optimizers(optimizer, muon)  # type: ignore[assignment]  # an Optimizer, of two parts
    if not math.isfinite(total):  # unbounded training: fine for a constant rate, not for a decay
        if cfg.schedule != "constant":
            raise ValueError(f"a {cfg.schedule} schedule needs a length: set trainer.max_steps or "
                             "model.optim.total_steps")  # fmt: skip
        total = 0
    n = int(total)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, cfg, n))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}, int(total)


def save_resume_state(checkpoint: dict, global_step: int, schedule_steps: int | None) -> None:
    """What an exact resume needs beyond Lightning's state: the random stream and the schedule's length; and the
    fit loop's step count stored as Lightning expects it on resume (else a checkpoint of an epoch's end shifts the
    resumed run's log rows by one; tests/test_reliability.py pins them)."""
    checkpoint["rng"] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        checkpoint["rng"]["cuda"] = torch.cuda.get_rng_state_all()
    checkpoint["schedule_steps"] = schedule_steps
    loop = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.state_dict", {})
    if "_batches_that_stepped" in loop:
        loop["_batches_that_stepped"] = min(loop["_batches_that_stepped"], global_step - 1)


def continue_from(checkpoint: dict, cfg: OptimConfig, schedule_steps: int | None, scheduler_configs,
                  step: int) -> None:  # fmt: skip
    """Continue a checkpoint's random stream, and apply the optimizer settings of *this* run: restoring the
    optimizer brought back the old learning rate, betas and weight decay, which would silently win. The schedule
    goes on from the run's ``step`` (a schedule steps with the optimizer: the file's own count is no second
    truth)."""
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
        for weight, state in config.scheduler.optimizer.state.items():  # a moment of another shape fails a step later
            moments = [k for k, t in state.items() if torch.is_tensor(t) and t.dim() and t.shape != weight.shape]
            if moments:
                raise ValueError(f"its optimizer's {moments[0]} for a weight of {list(weight.shape)} is of another "
                                 "shape: the file is damaged, or holds another model's optimizer")  # fmt: skip
            if bad := not_finite(state):  # NaN from the first step on, told as the resumed run's divergence
                raise ValueError(f"its optimizer's {bad[0]} holds NaN or inf: a diverged or damaged run; resume from "
                                 "an earlier checkpoint")  # fmt: skip
        schedule.last_epoch = step
        for i, group in enumerate(groups):
            role = group.get("role", "decay" if i == 0 else "plain")  # unnamed: written before groups had roles
            if role == "muon":
                group["initial_lr"], group["momentum"] = cfg.muon_lr, cfg.muon_momentum
            else:
                group["initial_lr"], group["betas"] = cfg.lr, (cfg.beta1, cfg.beta2)
            group["weight_decay"] = 0.0 if role == "plain" else cfg.weight_decay
            group["lr"] = group["initial_lr"] * schedule.lr_lambdas[i](schedule.last_epoch)
        schedule.base_lrs = [group["initial_lr"] for group in groups]
    if changed:
        note(f"note: resuming with {', '.join(changed)}: applied from this step on")

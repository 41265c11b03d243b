"""End to end: the real ``fit`` on nanoGPT's CPU recipe for Tiny Shakespeare, beside nanoGPT's ``train.py``.

    python -m transformers_scratch.experiments.bench --end-to-end --data.path ../shared/data/tinyshakespeare.txt \
        --nanogpt-train path/to/nanoGPT/train.py --rounds 2

Each run is a fresh process timed from launch to exit, the two alternating: ``cli.py fit`` with
``shakespeare_char.yaml`` + ``shakespeare_char_cpu.yaml`` (loggers and samples on), and nanoGPT's ``train.py`` with
its README's flags in a scratch copy. Reported per run: wall and CPU seconds, start-up, training, validation and
samples (fit's ``phases.json``; nanoGPT's from when its lines arrive), and the loss on the last 5 % of the file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ("configs/shakespeare_char.yaml", "configs/shakespeare_char_cpu.yaml")
NANOGPT_FLAGS = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
                 "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
                 "--n_embd=128", "--max_iters=2000", "--lr_decay_iters=2000", "--dropout=0.0"]  # fmt: skip
SEED_LINE = "torch.manual_seed(1337 + seed_offset)"  # train.py has no seed flag; its scratch copy reads one:
SEEDED = "torch.manual_seed(1337 + seed_offset + int(os.environ.get('NANOGPT_SEED', '0')))"
STOP_LINE = "    local_iter_num += 1\n"  # the end of an iteration; after it, the copy follows the bench's deadline:
STOPPED = STOP_LINE + (
    "    if 'NANOGPT_DEADLINE' in os.environ and iter_num < max_iters:  # the bench's deadline, as fit's Deadline\n"
    "        _left = float(os.environ['NANOGPT_DEADLINE']) - time.time()\n"
    "        if _left <= 0:  # past it: evaluate, save and stop at this iteration\n"
    "            eval_interval = max_iters = iter_num\n"
    "        elif iter_num % 30 == 0 and iter_num > 30:  # the cosine refitted to the iterations the time allows\n"
    "            _more = max(1, int(_left * 30 / (time.time() - _mark)))  # at the last 30 iterations' pace\n"
    "            eval_interval = max_iters = lr_decay_iters = iter_num + _more\n"
    "        if iter_num % 30 == 0:\n"
    "            _mark = time.time()\n"
)
NANOGPT_FILES = ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py",
                 "data/shakespeare_char/prepare.py")  # fmt: skip


class Run:
    """A finished child process: its output lines with their arrival times (seconds after launch), the launch
    time (``time.time()``), wall and CPU seconds, and the exit code."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict) -> None:
        self.lines: list[tuple[float, str]] = []
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.launch = time.time()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1, errors="replace")  # fmt: skip
        reader = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        reader.start()
        self.code = proc.wait()
        self.wall = time.time() - self.launch
        reader.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append((time.time() - self.launch, line.rstrip("\n")))

    def error(self) -> str:
        tail = " | ".join(line for _, line in self.lines[-3:])
        return f"exit code {self.code}: {tail[-300:]}"


def child_env(threads: int | None) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_fit(data: str, steps: int, work: Path, tag: str, threads: int | None, extra: list[str]) -> dict:
    """``cli.py fit`` on the recipe, in ``work``; its phases from the run's ``phases.json``."""
    name = f"e2e-{tag}"
    configs = [a for c in CONFIGS for a in ("--config", str(ROOT / c))]
    cmd = [sys.executable, str(ROOT / "cli.py"), "fit", *configs, "--data.path", str(Path(data).resolve()),
           "--name", name, "--trainer.max_steps", str(steps), *extra]  # fmt: skip
    load = os.getloadavg()[0]
    run = Run(cmd, work, child_env(threads))
    logs = sorted((work / "logs" / name).glob("version_*/phases.json"))
    if run.code or not logs:
        return {"run": "fit", "error": run.error()}
    phases = json.loads(logs[-1].read_text())
    ckpt = work / "checkpoints" / name / "last.ckpt"
    return {"run": "fit", "wall_s": run.wall, "cpu_s": run.cpu, "startup_s": phases["first_batch"] - run.launch,
            "train_s": phases["train_s"], "val_s": phases["val_s"] - phases["sample_s"],
            "sample_s": phases["sample_s"], "load": load, "ckpt": str(ckpt)}  # fmt: skip


def nanogpt_copy(train_py: str, data: str, work: Path) -> Path:
    """A scratch copy of nanoGPT's files, with ``data`` as its shakespeare_char input, prepared once."""
    checkout, copy = Path(train_py).resolve().parent, work / "nanoGPT"
    for name in NANOGPT_FILES:
        if not (checkout / name).is_file():
            raise FileNotFoundError(f"--nanogpt-train {train_py!r}: its checkout has no {name}; pass train.py of a "
                                    "karpathy/nanoGPT checkout")  # fmt: skip
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(checkout / name, copy / name)
    code = (copy / "train.py").read_text()
    for line, what in ((SEED_LINE, "seed with"), (STOP_LINE, "end an iteration with")):
        if line not in code:
            raise FileNotFoundError(f"--nanogpt-train {train_py!r} does not {what} {line.strip()!r}; pass train.py "
                                    "of a karpathy/nanoGPT checkout")  # fmt: skip
    # the copy only: a seed and a deadline from the environment
    (copy / "train.py").write_text(code.replace(SEED_LINE, SEEDED).replace(STOP_LINE, STOPPED, 1))
    shutil.copy(data, copy / "data/shakespeare_char/input.txt")
    prepared = Run([sys.executable, "data/shakespeare_char/prepare.py"], copy, child_env(None))
    if prepared.code:
        raise RuntimeError(f"nanoGPT's prepare.py failed: {prepared.error()}")
    return copy


def run_nanogpt(copy: Path, steps: int, tag: str, threads: int | None) -> dict:
    """nanoGPT's ``train.py`` on the recipe; its phases from the times its lines arrived."""
    out = f"out-{tag}"
    flags = [
        f"--max_iters={steps}",
        f"--lr_decay_iters={steps}",
        f"--eval_interval={min(250, steps)}",
        f"--out_dir={out}",
        "--always_save_checkpoint=True",
    ]  # the final model saved, as fit's last.ckpt
    load = os.getloadavg()[0]
    run = Run([sys.executable, "train.py", *NANOGPT_FLAGS, *flags], copy, child_env(threads))
    if run.code:
        return {"run": "nanoGPT train.py", "error": run.error()}
    startup = next(t for t, line in run.lines if line.startswith("using fused AdamW"))
    evals, last, previous = 0.0, startup, startup
    for t, line in run.lines:
        if t <= startup:
            continue
        if line.startswith("step "):
            evals += t - previous
        if line.startswith("iter "):
            last = t
        previous = t
    return {"run": "nanoGPT train.py", "wall_s": run.wall, "cpu_s": run.cpu, "startup_s": startup,
            "train_s": last - startup - evals, "val_s": evals, "sample_s": 0.0, "load": load,
            "ckpt": str(copy / out / "ckpt.pt")}  # fmt: skip


@torch.no_grad()
def heldout(row: dict, data: str, model_py: Path | None) -> float:
    """The final model's nats per byte on the test split: every byte once, in windows of the run's context
    (``row["context"]``; the end-to-end recipe's 64 where the row has none)."""
    from ..data import TextDataModule
    from .nanogpt import heldout_nats, load_nanogpt, nanogpt_logits

    windows = TextDataModule(data, context=row.get("context", 64), batch_size=64, vocab="file")
    if model_py is not None:
        with contextlib.redirect_stdout(sys.stderr):  # GPT() prints its size
            model = load_nanogpt(str(model_py), row["ckpt"], torch.device("cpu"))
        return heldout_nats(nanogpt_logits(model), windows, torch.device("cpu"), bf16=False)
    from ..training.checkpoints import Checkpoint
    from ..training.modules import LitCharLM

    model = Checkpoint(row["ckpt"]).trained(LitCharLM)[0].model
    return heldout_nats(lambda x, y: model(x), windows, torch.device("cpu"), bf16=False)


def end_to_end(data: str, train_py: str | None, rounds: int, steps: int, threads: int | None,
               extra: list[str] | None = None, workdir: str | None = None) -> dict:  # fmt: skip
    """``rounds`` runs of fit, alternating with nanoGPT's train.py when given; every field per run."""
    work = Path(workdir or tempfile.mkdtemp(prefix="e2e-"))
    copy = nanogpt_copy(train_py, data, work) if train_py else None
    rows = []
    for r in range(rounds):
        for kind in ("fit", "nanogpt") if copy else ("fit",):
            print(f"  round {r + 1}: {'fit' if kind == 'fit' else 'nanoGPT train.py'} ...", file=sys.stderr, flush=True)
            tag = f"{r + 1}-{time.strftime('%H%M%S')}"
            if kind == "fit" or copy is None:
                row = run_fit(data, steps, work, tag, threads, extra or [])
            else:
                row = run_nanogpt(copy, steps, tag, threads)
            if "error" not in row:
                nats = heldout(row, data, copy / "model.py" if kind == "nanogpt" and copy is not None else None)
                row.update(heldout_nats=nats, heldout_bpc=nats / math.log(2))
                row["other_s"] = row["wall_s"] - row["startup_s"] - row["train_s"] - row["val_s"] - row["sample_s"]
            rows.append({"round": r + 1, **row})
    return {"recipe": "nanoGPT shakespeare_char CPU: 4 x 128, 4 heads, context 64, batch 12, dropout 0",
            "steps": steps, "threads": threads or torch.get_num_threads(), "work": str(work), "runs": rows}  # fmt: skip


FIELDS = ("wall_s", "cpu_s", "startup_s", "train_s", "val_s", "sample_s", "other_s")


def format_end_to_end(report: dict) -> list[str]:
    lines = [f"end to end: {report['recipe']}, {report['steps']} steps, {report['threads']} threads", "",
             f"{'run':20s} {'wall s':>7s} {'CPU s':>7s} {'start-up':>8s} {'training':>8s} {'val':>6s} "
             f"{'samples':>7s} {'other':>6s} {'held-out nats':>13s} {'load':>5s}"]  # fmt: skip
    for row in report["runs"]:
        name = f"{row['round']}. {row['run']}"
        if "error" in row:
            lines.append(f"{name:20s} failed: {row['error']}")
            continue
        cells = " ".join(f"{row[f]:{w}.1f}" for f, w in zip(FIELDS, (7, 7, 8, 8, 6, 7, 6), strict=True))
        lines.append(f"{name:20s} {cells} {row['heldout_nats']:13.4f} {row['load']:5.2f}")
    ours = [r["wall_s"] for r in report["runs"] if r["run"] == "fit" and "error" not in r]
    theirs = [r["wall_s"] for r in report["runs"] if r["run"] != "fit" and "error" not in r]
    if ours and theirs:
        lines.append(f"fit / nanoGPT train.py wall time: {sum(ours) / len(ours) / (sum(theirs) / len(theirs)):.3f} "
                     f"(means of {len(ours)} and {len(theirs)} runs)")  # fmt: skip
    return lines


# ---- the speedrun: the best model in a wall-clock budget -------------------------------------------------
SPEEDRUN = "configs/speedrun_cpu.yaml"
DEADLINE = "transformers_scratch.training.callbacks.Deadline"


def speedrun_fit(data: str, budget: float, seed: int, work: Path, threads: int | None, extra: list[str]) -> dict:
    """``fit`` on the speedrun recipe, which must be over ``budget`` seconds after its launch (the Deadline
    callback reads the moment from ``TS_DEADLINE``)."""
    name = f"speedrun-{seed}-{time.strftime('%H%M%S')}"
    cmd = [sys.executable, str(ROOT / "cli.py"), "fit", "--config", str(ROOT / SPEEDRUN), "--data.path",
           str(Path(data).resolve()), "--name", name, "--seed_everything", str(seed),
           f"--trainer.callbacks+={DEADLINE}", *extra]  # fmt: skip
    env = child_env(threads)
    load = os.getloadavg()[0]
    env["TS_DEADLINE"] = repr(time.time() + budget)
    run = Run(cmd, work, env)
    ckpt, logs = work / "checkpoints" / name / "last.ckpt", sorted((work / "logs" / name).glob("version_*"))
    if run.code or not ckpt.is_file() or not logs:
        return {"run": "fit", "error": run.error()}
    import yaml  # jsonargparse's YAML library

    from ..training.checkpoints import Checkpoint

    log = logs[-1]  # phases.json and the run's whole config.yaml
    data_args = yaml.safe_load((log / "config.yaml").read_text())["data"]["init_args"]
    startup = json.loads((log / "phases.json").read_text())["first_batch"] - run.launch
    steps = Checkpoint(str(ckpt), weights=False).step
    tokens = steps * data_args["batch_size"] * data_args["context"]
    return {"run": "fit", "seed": seed, "wall_s": run.wall, "startup_s": startup, "steps": steps, "tokens": tokens,
            "context": data_args["context"], "load": load, "ckpt": str(ckpt)}  # fmt: skip


def speedrun_nanogpt(copy: Path, budget: float, seed: int, threads: int | None, pace: dict) -> dict:
    """nanoGPT's CPU recipe with ``max_iters`` chosen from its last measured ``pace`` to end inside the budget
    (the budget less 1 s and the seconds outside its iterations, over seconds per iteration); the run's own pace
    then replaces ``pace``. The scratch copy also follows a deadline (``NANOGPT_DEADLINE``, :data:`STOPPED`),
    resetting ``max_iters`` every 30 iterations as fit's Deadline callback does."""
    iters = int((budget - 1.0 - pace["other_s"]) / pace["iter_s"])
    reserve = pace["end_s"] + 2 * pace["iter_s"] + 1.0
    out = f"out-speedrun-{seed}-{time.strftime('%H%M%S')}"
    flags = [
        f"--max_iters={iters}",
        f"--lr_decay_iters={iters}",
        f"--eval_interval={iters}",
        f"--out_dir={out}",
        "--always_save_checkpoint=True",
    ]  # fmt: skip
    load = os.getloadavg()[0]
    env = {**child_env(threads), "NANOGPT_SEED": str(seed)}  # read by the scratch copy (SEEDED, STOPPED)
    env["NANOGPT_DEADLINE"] = repr(time.time() + budget - reserve)
    run = Run([sys.executable, "train.py", *NANOGPT_FLAGS, *flags], copy, env)
    if run.code:
        return {"run": "nanoGPT train.py", "error": run.error()}
    last = _pace_of(run)
    pace.update(last, end_s=max(pace["end_s"], last["end_s"]))  # the longest end seen: its spread is the risk
    steps = [int(line.split()[1].rstrip(":")) for _, line in run.lines if line.startswith("step ")][-1]
    return {"run": "nanoGPT train.py", "seed": seed, "wall_s": run.wall, "startup_s": pace["startup_s"],
            "steps": steps, "max_iters": iters, "tokens": steps * _flag("batch_size") * _flag("block_size"),
            "context": _flag("block_size"), "load": load, "ckpt": str(copy / out / "ckpt.pt")}  # fmt: skip


def _flag(name: str) -> int:
    """A number of :data:`NANOGPT_FLAGS`."""
    return int(next(f for f in NANOGPT_FLAGS if f.startswith(f"--{name}=")).split("=")[1])


def _pace_of(run: Run) -> dict:
    """nanoGPT's start-up, seconds per iteration (after the first 10 %), the rest of its wall time (``other_s``)
    and its end (``end_s``), from the times its lines arrived."""
    startup = next(t for t, line in run.lines if line.startswith("using fused AdamW"))
    iters_at = [t for t, line in run.lines if line.startswith("iter ")]
    steady = iters_at[max(1, len(iters_at) // 10) :]
    iter_s = (steady[-1] - steady[0]) / (len(steady) - 1)
    last_eval = max(t for t, line in run.lines if line.startswith("step "))
    end = run.wall - max((t for t in iters_at if t < last_eval), default=last_eval)
    return {"startup_s": startup, "iter_s": iter_s, "other_s": run.wall - len(iters_at) * iter_s, "end_s": end}


def nanogpt_pace(copy: Path, threads: int | None, iters: int = 200) -> dict:
    """nanoGPT's pace (:func:`_pace_of`) from one short run."""
    run = Run([sys.executable, "train.py", *NANOGPT_FLAGS, f"--max_iters={iters}", f"--eval_interval={iters}",
               "--out_dir=out-pace", "--always_save_checkpoint=False"], copy, child_env(threads))  # fmt: skip
    if run.code:
        raise RuntimeError(f"nanoGPT's train.py failed: {run.error()}")
    return _pace_of(run)


def speedrun(data: str, budget: float, train_py: str | None, seeds: int, threads: int | None,
             extra: list[str] | None = None, workdir: str | None = None,
             nanogpt_budget: float | None = None) -> dict:  # fmt: skip
    """The recipe in ``budget`` seconds and, given nanoGPT's train.py, nanoGPT's CPU recipe in ``nanogpt_budget``
    (default: the same), alternating, ``seeds`` runs of each, every run scored on the same held-out bytes (the
    last 5 % of the file, which no run trains on). With nanoGPT, ``verdict`` compares the two means: time to a
    loss, when nanoGPT's budget is the longer."""
    nanogpt_budget = budget if nanogpt_budget is None else nanogpt_budget
    work = Path(workdir or tempfile.mkdtemp(prefix="speedrun-"))
    work.mkdir(parents=True, exist_ok=True)
    copy = nanogpt_copy(train_py, data, work) if train_py else None
    pace = nanogpt_pace(copy, threads) if copy else None
    measured = dict(pace or {})  # the short run's; each nanoGPT run then updates ``pace``
    rows = []
    for seed in range(seeds):
        for kind in ("fit", "nanogpt") if copy else ("fit",):
            print(f"  seed {seed}: {kind} ...", file=sys.stderr, flush=True)
            row = (speedrun_fit(data, budget, seed, work, threads, extra or []) if kind == "fit" or copy is None
                   else speedrun_nanogpt(copy, nanogpt_budget, seed, threads, pace or {}))  # fmt: skip
            if "error" not in row:
                nats = heldout(row, data, copy / "model.py" if kind == "nanogpt" and copy is not None else None)
                limit = budget if row["run"] == "fit" else nanogpt_budget
                row.update(heldout_nats=nats, within_budget=limit - 5.0 <= row["wall_s"] <= limit)
            rows.append(row)
    report = {"budget_s": budget, "nanogpt_budget_s": nanogpt_budget if copy else None,
              "nanogpt_pace": measured or None, "threads": threads or torch.get_num_threads(), "work": str(work),
              "runs": rows}  # fmt: skip
    return {**report, "verdict": verdict(rows, budget, nanogpt_budget)} if copy else report


def verdict(rows: list[dict], budget: float, nanogpt_budget: float) -> dict:
    """The mean held-out loss of each program's runs, and whether the recipe's, at its budget, is below nanoGPT's
    at its own (None while a run of either failed)."""

    def mean(run: str) -> float | None:
        scores = [r.get("heldout_nats") for r in rows if r["run"] == run]
        return None if not scores or None in scores else sum(scores) / len(scores)  # type: ignore[arg-type]

    ours, theirs = mean("fit"), mean("nanoGPT train.py")
    below, said = None, "a run failed: no verdict"
    if ours is not None and theirs is not None:
        below = ours < theirs
        said = (f"the recipe in {budget:g} s: {ours:.4f} nats/char, {'below' if below else 'NOT below'} nanoGPT's "
                f"{theirs:.4f} in {nanogpt_budget:g} s ({theirs - ours:+.4f})")  # fmt: skip
    return {"fit_mean_nats": ours, "nanogpt_mean_nats": theirs, "fit_below_nanogpt": below, "said": said}

"""Benchmark: training throughput, memory and MFU of the character model, and generation speed.

    python -m transformers_scratch.experiments.bench                    # the CPU target: 4 x 256, ctx 256, batch 8
    python -m transformers_scratch.experiments.bench --config configs/enwik8.yaml  # a config's sizes (GPU: bf16)
    python -m transformers_scratch.experiments.bench --json             # machine-readable
    python -m transformers_scratch.experiments.bench --long-context --depth 6 --plot scaling.png  # dense vs sparse
    python -m transformers_scratch.experiments.bench --long-context --search --emb 64 --heads 2 --depth 2 --batch 1
    python -m transformers_scratch.experiments.bench --nanogpt ../nanoGPT/model.py   # beside nanoGPT's GPT
    python -m transformers_scratch.experiments.bench --end-to-end --data.path input.txt \
        --nanogpt-train ../nanoGPT/train.py

Every variant runs in its own process. Training tokens/s is batch x context / the median time of an optimizer
step after warm-up; peak memory is the GPU allocator's, or the CPU process's resident set; MFU = tokens/s x FLOPs
per token / the device's dense bf16 peak. ``--end-to-end`` times whole ``fit`` runs (:mod:`.endtoend`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..atomic import debugging, output_closed, stopped_reading
from ..bounds import Count, Depth, NonNegative, PositiveFloat
from ..data.files import path_refused
from ..model.config import EncoderDecoderConfig, LMConfig
from ..model.models import CausalLM, EncoderDecoder
from ..training.checkpoints import absent
from ..training.perf import peak_flops, train_flops_per_token
from ..training.pictures import out_file
from . import Parser, bounded
from .nanogpt import import_model_py
from .scaling import KERNELS, attention_job, attention_sweep, draw_scaling, format_scaling, scaling, sparse_settings


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_job(job: dict) -> dict:
    """One measurement, in this process."""
    device = torch.device(job["device"])
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
    if job["kind"] == "seq2seq":
        return decode_job(job, device)
    if job["kind"] == "attention":
        return attention_job(job)
    if job["kind"] == "attention_sweep":
        return attention_sweep(job)
    cfg = LMConfig(**job["model"])
    nanogpt = job.get("nanogpt")  # the same step on nanoGPT's GPT, for a side-by-side comparison
    model: Any = (nanogpt_model(nanogpt, cfg) if nanogpt else CausalLM(cfg)).to(device)
    b, t = job["batch"], job["context"]
    if job["kind"] == "generate":
        model.eval()
        prompt = torch.randint(cfg.vocab_size, (1, min(t, cfg.context)), device=device)
        graph = job.get("cuda_graph", False)
        generate = lambda n: model.generate(prompt, n, temperature=0, use_cache=job["cache"], cuda_graph=graph)  # noqa: E731
        load = os.getloadavg()[0]
        return {"tokens_per_s": tokens_per_second(generate, job["new_tokens"], device), "load": load}

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda" or None)
    graphs = job.get("cuda_graphs", False)  # compiled, and each step replayed as CUDA graphs
    forward = torch.compile(model, mode="reduce-overhead" if graphs else None) if job["compile"] else model
    bf16 = job["precision"] == "bf16-mixed"
    data = torch.randint(cfg.vocab_size, (b, t + 1), device=device)
    inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()  # as a data loader hands them over

    def step() -> None:
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs are free to overwrite
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            if nanogpt:
                loss = forward(inputs, targets)[1]  # nanoGPT computes its loss inside
            else:
                logits = forward(inputs)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(job["warmup"]):
        step()
    _sync(device)
    times = []
    for _ in range(job["steps"]):
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    result = {"tokens_per_s": b * t / seconds, "step_ms": 1000 * seconds}
    if device.type == "cuda":
        result["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 2**30
    else:
        result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    peak = peak_flops(device)
    if peak:
        result["mfu"] = result["tokens_per_s"] * train_flops_per_token(cfg, t) / peak
    if job.get("profile"):
        result["profile"] = profile_steps(step, device, seconds, steps=5)
    return result


def profile_steps(step, device: torch.device, step_seconds: float, steps: int) -> dict:
    """Where a step's time goes: the share of the step that the device is busy (below 1: the host cannot
    launch work fast enough), and the operators that take the most device (or, on a CPU, host) time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        _sync(device)
    cuda = device.type == "cuda"
    field = "self_device_time_total" if cuda else "self_cpu_time_total"
    # On a GPU count the kernels only: an operator's device time is its kernels' time again.
    kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    events = [e for e in prof.key_averages() if e.device_type == kind and getattr(e, field, 0) > 0]
    busy_us = sum(getattr(e, field) for e in events) / steps
    if not busy_us:
        return {"busy": None, "top": []}
    top = sorted(events, key=lambda e: getattr(e, field), reverse=True)[:12]
    return {"busy": busy_us / 1e6 / step_seconds if cuda else None,
            "top": [[e.key[:60], getattr(e, field) / steps / 1000, getattr(e, field) / steps / busy_us]
                    for e in top]}  # fmt: skip


def decode_job(job: dict, device: torch.device) -> dict:
    """Greedy encoder-decoder decoding of ``new_tokens`` tokens from one source of half the context, with or
    without the decoder's caches (self-attention keys/values cached, the memory's projected once)."""
    fields = {k: v for k, v in job["model"].items() if k in EncoderDecoderConfig.__dataclass_fields__}
    model = EncoderDecoder(EncoderDecoderConfig(**fields)).to(device).eval()
    n = min(job["new_tokens"], model.cfg.context)  # a target fits the decoder's positions
    src = torch.randint(model.cfg.vocab_size, (1, max(1, model.cfg.context // 2)), device=device)
    generate = lambda n: model.generate(src, bos_id=0, max_new_tokens=n, use_cache=job["cache"])  # noqa: E731
    return {"tokens_per_s": tokens_per_second(generate, n, device), "new_tokens": n}


def tokens_per_second(generate, n: int, device: torch.device) -> float:
    """Speed of ``generate(n)``, which makes n tokens, after a short untimed warm-up call."""
    generate(min(n, 8))
    _sync(device)
    start = time.perf_counter()
    generate(n)
    _sync(device)
    return n / (time.perf_counter() - start)


def nanogpt_model(path: str, cfg: LMConfig) -> torch.nn.Module:
    """nanoGPT's ``GPT`` (from its ``model.py`` at ``path``) at this config's sizes, with its own defaults
    otherwise (biases, GELU, tied embeddings, no dropout)."""
    module = import_model_py(path)
    sizes = {"block_size": cfg.context, "vocab_size": cfg.vocab_size, "n_layer": cfg.depth, "n_head": cfg.heads,
             "n_embd": cfg.emb, "dropout": 0.0}  # fmt: skip
    return module.GPT(module.GPTConfig(**sizes))


def train_job(device: str, model: dict, batch: int, context: int, steps: int, warmup: int, precision: str,
              compile_: bool = False, cuda_graphs: bool = False) -> dict:  # fmt: skip
    """A training measurement, as :func:`run_job` reads it."""
    return {"kind": "train", "device": device, "model": model, "batch": batch, "context": context, "steps": steps,
            "warmup": warmup, "precision": precision, "compile": compile_, "cuda_graphs": cuda_graphs}  # fmt: skip


def run_isolated(job: dict, memory_cap_gb: float | None = None, timeout: float = 900) -> dict:
    """Run a job in a child process: its result (the last JSON line it printed), or the error it died of with
    the lines it printed before (``printed``)."""
    cmd = [sys.executable, "-m", "transformers_scratch.experiments.bench", "--job", json.dumps(job)]
    limit = None
    if memory_cap_gb:  # a hard cap on the child's heap, so a search past the budget cannot swamp the machine
        cap = int(memory_cap_gb * 2**30)
        limit = lambda: resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))  # noqa: E731
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    error = None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()  # what it printed before
        error = f"timed out after {timeout:.0f} s"
    lines = [json.loads(line) for line in out[: out.rfind("\n") + 1].splitlines() if line.startswith("{")]
    if error is None and (proc.returncode != 0 or not lines):
        error = (err.strip().splitlines() or ["no output"])[-1][:200]
    return {"error": error, "printed": lines} if error else lines[-1]


def default_precision(device: str) -> str:
    """What training runs at by default: bf16-mixed on a GPU, fp32 on a CPU."""
    return "bf16-mixed" if device == "cuda" else "32-true"


def variants(device: str, compile_: bool) -> list[tuple[str, dict]]:
    """One change at a time from the default path (fused attention; bf16-mixed on GPU, fp32 on CPU)."""
    base = {"attention": "sdpa", "precision": default_precision(device), "compile": False, "cuda_graphs": False,
            "activation_checkpointing": False}  # fmt: skip
    out = [("fused (default)", base), ("reference attention", {**base, "attention": "reference"})]
    if device == "cuda":
        out.append(("fp32", {**base, "precision": "32-true"}))
    if compile_:
        out.append(("torch.compile", {**base, "compile": True}))
    if compile_ and device == "cuda":  # --model.compile reduce-overhead
        out.append(("torch.compile + CUDA graphs", {**base, "compile": True, "cuda_graphs": True}))
    out.append(("activation checkpointing", {**base, "activation_checkpointing": True}))
    return out


def load_sizes(config: str | None) -> tuple[dict, int, int]:
    """Model fields, context and batch from a project config (or the issue's CPU benchmark sizes)."""
    if config is None:
        return {"vocab_size": 256, "context": 256, "emb": 256, "heads": 8, "depth": 4}, 256, 8
    import yaml

    try:
        cfg = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
        model = dict(cfg["model"]["init_args"].get("model", {}))
        data = cfg.get("data", {}).get("init_args", {})
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError, AttributeError) as e:  # UTF-8's: ValueError
        why = f": {e.strerror}" if isinstance(e, OSError) else " is not a project config (YAML with model.init_args)"
        raise ValueError(f"--config {config!r}{why}; pass one of configs/, e.g. configs/enwik8.yaml") from None
    model.setdefault("vocab_size", 256)
    return model, data.get("context", model.get("context", 256)), data.get("batch_size", 32)


def long_context(args, model: dict, device: str) -> list[dict]:
    """The largest power-of-two context that trains one step at the given batch, per attention kernel (the
    sparse ones with a block of about sqrt(t))."""
    rows = []
    for attention in ("reference", "sdpa", "strided/split", "fixed/split"):
        best, t = None, args.start_context or 512
        while t <= args.max_context:
            kernel = {"attention": attention} if "/" not in attention else sparse_settings(attention, t)
            job = train_job(device, {**model, "context": t, **kernel}, args.batch, t, steps=1, warmup=0,
                            precision=args.precision)  # fmt: skip
            res = run_isolated(job, args.memory_budget_gb if device == "cpu" else None, timeout=args.timeout)
            peak = res.get("peak_rss_gb", res.get("peak_mem_gb", 0.0))
            over = device == "cpu" and peak > args.memory_budget_gb
            timing = "over budget" if over else f"{res.get('step_ms', 0) / 1000:.1f} s/step, {peak:.2f} GB"
            status = res.get("error") or timing
            print(f"  {attention:9s} context {t:6d}: {status}", file=sys.stderr, flush=True)
            if "error" in res or over:
                break
            best, t = {"attention": attention, "max_context": t, **res}, t * 2
        rows.append(best or {"attention": attention, "max_context": None})
    return rows


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m transformers_scratch.experiments.bench", description=__doc__.split("\n\n")[0])
    count, positive = bounded(Count), bounded(PositiveFloat)
    p.add_argument("--config", help="a project config whose model sizes, context and batch to use")
    for name in ("depth", "emb", "heads", "context", "batch"):
        p.add_argument(f"--{name}", type=bounded(Depth) if name == "depth" else count, help=f"override the {name}")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=count, default=10, help="timed optimizer steps per variant (median reported)")
    p.add_argument("--warmup", type=bounded(NonNegative), default=3, help="untimed steps first (compile happens here)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant (slow to compile)")
    p.add_argument("--new-tokens", type=count, default=1000, help="characters generated, with and without cache")
    p.add_argument("--long-context", action="store_true",
                   help="time and memory of attention and of a model step from --start-context to --max-context, "
                   "dense and sparse (with --search: the largest context that trains, per kernel)")  # fmt: skip
    p.add_argument("--search", action="store_true", help="long context: search the largest context that trains")
    p.add_argument("--plot", metavar="PNG", help="long context: draw the log-log scaling picture here")
    p.add_argument("--attn-heads", type=count, default=4, help="long context: heads of the one-attention table")
    p.add_argument("--attn-head-width", type=count, default=32, help="long context: their width")
    p.add_argument("--kernels", nargs="+", choices=KERNELS, metavar="KERNEL",
                   help="long context: the one-attention table's kernels (default: all of them)")  # fmt: skip
    p.add_argument("--model-steps", type=bounded(NonNegative), default=2,
                   help="long context: timed steps of each model step (0: no model table)")  # fmt: skip
    p.add_argument("--model-kernels", nargs="+", choices=[k for k in KERNELS if k != "explicit"], metavar="KERNEL",
                   help="long context: the whole-model table's (default: sdpa strided/split fixed/split)")  # fmt: skip
    p.add_argument("--start-context", type=count, help="long context: the first context (1024; the search: 512)")
    p.add_argument("--max-context", type=count, default=65536)
    p.add_argument("--memory-budget-gb", type=positive, default=4.0, help="CPU long-context budget (peak RSS)")
    p.add_argument("--precision", choices=("32-true", "bf16-mixed"), default="32-true",
                   help="precision of the long-context search")  # fmt: skip
    p.add_argument("--timeout", type=positive, default=600, help="seconds per measurement before giving up")
    p.add_argument("--nanogpt", metavar="MODEL_PY", help="also time nanoGPT's GPT from this model.py, same step")
    p.add_argument("--seq2seq", action="store_true", help="also time encoder-decoder decoding, with and without cache")
    p.add_argument("--profile", action="store_true", help="profile the default variant's step (torch.profiler)")
    p.add_argument("--end-to-end", action="store_true", help="time whole fit runs on nanoGPT's CPU recipe")
    p.add_argument("--data.path", dest="data_path", help="end to end: Tiny Shakespeare (nanoGPT's input.txt)")
    p.add_argument("--nanogpt-train", metavar="TRAIN_PY", help="end to end: also run nanoGPT's train.py, alternating")
    p.add_argument("--rounds", type=count, default=1, help="end to end: runs of each")
    p.add_argument("--max-steps", type=count, default=2000, help="end to end: training steps of each run")
    p.add_argument("--threads", type=count, help="end to end: OMP_NUM_THREADS of the runs (default: PyTorch's)")
    p.add_argument("--fit-args", default="", help="end to end: more arguments for fit, as one string")
    p.add_argument("--speedrun", action="store_true", help="the best model in --budget seconds (configs/speedrun_cpu)")
    p.add_argument("--budget", type=positive, default=300.0, help="speedrun: wall seconds per run, counted from launch")
    p.add_argument(
        "--nanogpt-budget",
        type=positive,
        help="speedrun: nanoGPT's wall seconds per run (default: --budget); longer states time to a loss",
    )
    p.add_argument("--seeds", type=count, default=2, help="speedrun: runs of each, alternating")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--job", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> None:
    """The command; a refused flag or setting (argparse's, through :class:`Parser`, or the project's), a path the
    system refuses (named by its flag), or a nanoGPT checkout that cannot serve, is one ``error:`` line, written
    here only."""
    try:
        bench(build_parser().parse_args(argv))
    except BrokenPipeError:
        if not output_closed():  # another pipe (a worker's): a fault
            raise
        stopped_reading()
    except (ValueError, OSError, KeyboardInterrupt) as e:
        line = path_refused(e, sys.argv[1:] if argv is None else argv) if isinstance(e, OSError) else str(e)
        if debugging() or line is None:  # as the command line: the traceback on demand, or of a fault
            raise
        from ..training.console import INTERRUPTED

        print(INTERRUPTED if isinstance(e, KeyboardInterrupt) else f"error: {line}", file=sys.stderr)
        raise SystemExit(130 if isinstance(e, KeyboardInterrupt) else 1) from None


# Flags that one kind of run reads, by the flags that ask for it: given without one, a flag would do nothing
ONLY = {
    ("--long-context",): ("--search", "--plot", "--attn-heads", "--attn-head-width", "--kernels", "--model-steps",
                          "--model-kernels", "--start-context", "--max-context", "--memory-budget-gb", "--precision"),
    ("--end-to-end", "--speedrun"): ("--data.path", "--nanogpt-train", "--threads", "--fit-args"),
    ("--end-to-end",): ("--rounds", "--max-steps"),
    ("--speedrun",): ("--budget", "--nanogpt-budget", "--seeds"),
}  # fmt: skip
DEFAULT_ONLY = ("--steps", "--warmup", "--nanogpt", "--new-tokens", "--seq2seq", "--profile")
"""Flags that the default run alone reads (none of the kinds above asked for); --no-compile, which turns off
what the others do not do, is taken by any."""


def dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_").replace(".", "_")


def bench(args: argparse.Namespace) -> None:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: this machine (or this build of torch) has no CUDA device; pass --device cpu")
    if args.job:  # a child process: one measurement
        print(json.dumps(run_job(json.loads(args.job))))
        return
    defaults = build_parser().parse_args([])  # the command's own flags, checked once, not in every measurement

    def given(flags: tuple[str, ...]) -> list[str]:
        return [flag for flag in flags if getattr(args, dest(flag)) != getattr(defaults, dest(flag))]

    for runs, flags in ONLY.items():
        if (extra := given(flags)) and not given(runs):
            raise ValueError(f"{extra[0]} is a setting of {' or '.join(runs)} runs, and does nothing without one; "
                             f"add {' or '.join(runs)}, or leave {extra[0]} out")  # fmt: skip
    if (kind := given(("--long-context", "--end-to-end", "--speedrun"))) and (extra := given(DEFAULT_ONLY)):
        raise ValueError(f"{extra[0]} is a setting of the default run, which {kind[0]} replaces; leave it out")
    if args.nanogpt and not (Path(args.nanogpt).is_file() and args.nanogpt.endswith(".py")):  # it is imported
        raise ValueError(f"--nanogpt {args.nanogpt!r} is no Python file; pass model.py of a karpathy/nanoGPT checkout")
    if args.plot:  # before the minutes of measuring: a folder, or a format matplotlib cannot write, is refused
        if args.search:
            raise ValueError("--plot draws the sweep over contexts, which --search does not run; leave one of them out")
        out_file(args.plot, "--plot", "scaling.png")
    if args.speedrun or args.end_to_end:  # the text, before any run starts
        from .endtoend import end_to_end, format_end_to_end, speedrun

        text = "the text to train on and score" if args.speedrun else "the Tiny Shakespeare text (nanoGPT's input.txt)"
        if not args.data_path:
            raise ValueError(f"{'--speedrun' if args.speedrun else '--end-to-end'} needs --data.path, {text}")
        if not Path(args.data_path).is_file():
            raise ValueError(f"--data.path {args.data_path!r} {absent(args.data_path)}; pass {text}")
        try:
            if args.speedrun:
                report = speedrun(args.data_path, args.budget, args.nanogpt_train, args.seeds, args.threads,
                                  args.fit_args.split(), nanogpt_budget=args.nanogpt_budget)  # fmt: skip
            else:
                report = end_to_end(args.data_path, args.nanogpt_train, args.rounds, args.max_steps, args.threads,
                                    args.fit_args.split())  # fmt: skip
        except (FileNotFoundError, RuntimeError) as e:  # a path or a nanoGPT checkout that cannot serve
            raise ValueError(str(e)) from None
        report.update(hardware=f"CPU, {os.cpu_count()} cores", torch=torch.__version__, date=time.strftime("%Y-%m-%d"))
        print(json.dumps(report, indent=2) if args.json or args.speedrun else "\n".join(format_end_to_end(report)))
        if "verdict" in report:  # the speedrun's, beside nanoGPT
            print(report["verdict"]["said"], file=sys.stderr)
        return

    model, context, batch = load_sizes(args.config)
    model.update({k: getattr(args, k) for k in ("depth", "emb", "heads") if getattr(args, k)})
    context, batch = args.context or context, args.batch or batch
    model["context"] = max(model.get("context", context), context)
    full, model = model, {k: v for k, v in model.items() if k in LMConfig.__dataclass_fields__}  # seq2seq: the full
    args.batch = batch
    LMConfig(**model)  # validate before spending time
    device = args.device
    hardware = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {os.cpu_count()} cores"
    report = {"hardware": hardware, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
              "model": model, "batch": batch, "context": context, "train": [], "generate": []}  # fmt: skip

    if args.long_context and args.search:
        report["long_context"] = long_context(args, model, device)
    elif args.long_context:
        args.start_context = args.start_context or 1024
        if args.start_context > args.max_context:
            raise ValueError(f"--start-context {args.start_context} is past --max-context {args.max_context}; "
                             "give a first context at most the last")  # fmt: skip
        report["scaling"] = scaling(args, model, device, run_isolated, train_job)
        if args.plot:
            draw_scaling(report["scaling"], args.plot, f"one attention, forward + backward: {hardware}, "
                         f"torch {torch.__version__}, {report['date']}")  # fmt: skip
    else:
        for name, v in variants(device, not args.no_compile):
            kernel = {"attention": v["attention"], "activation_checkpointing": v["activation_checkpointing"]}
            job = train_job(device, {**model, **kernel}, batch, context, args.steps, args.warmup, v["precision"],
                            v["compile"], v["cuda_graphs"])  # fmt: skip
            job["profile"] = args.profile and name == "fused (default)"
            print(f"  measuring {name} ...", file=sys.stderr, flush=True)
            report["train"].append({"variant": name, **v, **run_isolated(job, timeout=args.timeout)})
        if args.nanogpt:
            precision = default_precision(device)
            job = train_job(device, model, batch, context, args.steps, args.warmup, precision)
            job["nanogpt"] = str(Path(args.nanogpt).resolve())
            print("  measuring nanoGPT's GPT ...", file=sys.stderr, flush=True)
            report["train"].append({"variant": "nanoGPT GPT", "precision": precision,
                                    **run_isolated(job, timeout=args.timeout)})  # fmt: skip
        graphs = [(True, True)] if device == "cuda" else []  # the cached step replayed as a CUDA graph
        for cache, graph in [(True, False), (False, False), *graphs]:
            job = {"kind": "generate", "device": device, "batch": 1, "context": context, "cache": cache,
                   "cuda_graph": graph, "new_tokens": args.new_tokens, "model": model}  # fmt: skip
            how = "with cache" + (", CUDA graph" if graph else "") if cache else "without cache"
            print(f"  measuring generation {how} ...", file=sys.stderr, flush=True)
            report["generate"].append({"cache": cache, "cuda_graph": graph, **run_isolated(job, timeout=args.timeout)})
        for cache in (True, False) if args.seq2seq else ():
            job = {"kind": "seq2seq", "device": device, "cache": cache, "new_tokens": args.new_tokens, "model": full}
            print(f"  measuring encoder-decoder decoding {'with' if cache else 'without'} cache ...", file=sys.stderr,
                  flush=True)  # fmt: skip
            report.setdefault("seq2seq", []).append({"cache": cache, **run_isolated(job, timeout=args.timeout)})

    print(json.dumps(report, indent=2) if args.json else format_report(report))


def format_report(r: dict) -> str:
    m = r["model"]
    lines = [f"{r['hardware']} | torch {r['torch']} | {r['date']}",
             f"model: depth {m['depth']}, width {m['emb']}, heads {m['heads']}, vocab {m['vocab_size']}; "
             f"context {r['context']}, batch {r['batch']}", ""]  # fmt: skip
    if r.get("train"):
        fused = r["train"][0].get("tokens_per_s")
        lines += [f"{'training':28s} {'tokens/s':>10s} {'step ms':>9s} {'peak GB':>8s} {'MFU':>6s} {'vs fused':>9s}"]
        for row in r["train"]:
            if "error" in row:
                lines.append(f"{row['variant']:28s} failed: {row['error']}")
                continue
            mem = row.get("peak_mem_gb", row.get("peak_rss_gb"))
            mfu = f"{100 * row['mfu']:.1f}%" if "mfu" in row else "-"
            ratio = f"{row['tokens_per_s'] / fused:.2f}x" if fused else "-"
            lines.append(f"{row['variant']:28s} {row['tokens_per_s']:10,.0f} {row['step_ms']:9.1f} "
                         f"{mem:8.2f} {mfu:>6s} {ratio:>9s}")  # fmt: skip
        ref = next((x for x in r["train"] if x["variant"] == "reference attention" and "error" not in x), None)
        if fused and ref:
            lines.append(f"fused / reference attention: {fused / ref['tokens_per_s']:.2f}x")
        nano = next((x for x in r["train"] if x["variant"] == "nanoGPT GPT" and "error" not in x), None)
        if fused and nano:
            lines.append(f"fused / nanoGPT GPT: {fused / nano['tokens_per_s']:.2f}x")
        for row in r["train"]:
            if prof := row.get("profile"):
                busy = f"the GPU is busy {100 * prof['busy']:.0f} % of the step; " if prof["busy"] else ""
                lines += ["", f"profile of {row['variant']}: {busy}most time per step:"]
                lines += [f"  {name:60s} {ms:8.2f} ms {100 * share:5.1f} %" for name, ms, share in prof["top"]]
    if r.get("generate"):
        names = ("with KV cache", "recomputing the window")
        lines += _cache_table("generation (batch 1)", r["generate"], names, "KV cache speed-up")
    if r.get("seq2seq"):
        names = ("decoder caches", "decoding the whole target")
        speed_up = f"decoder cache speed-up ({r['seq2seq'][0].get('new_tokens')} tokens)"
        lines += _cache_table("encoder-decoder greedy (b 1)", r["seq2seq"], names, speed_up)
    if r.get("scaling"):
        lines += format_scaling(r["scaling"], m)
    for row in r.get("long_context", []):
        lines.append(f"largest context that trains, {row['attention']} attention, batch {r['batch']}: "
                     f"{row['max_context'] or 'none tried fits'}")  # fmt: skip
    return "\n".join(lines)


def _cache_table(title: str, rows: list[dict], names: tuple[str, str], speed_up: str) -> list[str]:
    """Lines of a with/without-cache pair of speed rows (cache first, then any CUDA-graph row), and the
    speed-ups over recomputation where both ran."""
    lines = ["", f"{title:28s} {'tokens/s':>10s}"]
    for row in rows:
        name = (names[0] + (", CUDA graph" if row.get("cuda_graph") else "")) if row["cache"] else names[1]
        load = f"   (load {row['load']:.2f})" if "load" in row else ""
        lines.append(f"{name:28s} " + (f"{row['tokens_per_s']:10,.0f}{load}" if "error" not in row else row["error"]))
    without = rows[1].get("tokens_per_s")
    for row in [rows[0], *rows[2:]]:
        if row.get("tokens_per_s") and without:
            label = speed_up + (", CUDA graph" if row.get("cuda_graph") else "")
            lines.append(f"{label}: {row['tokens_per_s'] / without:.2f}x")
    return lines


if __name__ == "__main__":
    main()

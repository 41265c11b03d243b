"""How attention's time and memory grow with the context: the bench's ``--long-context`` mode.

    python -m transformers_scratch.experiments.bench --long-context --plot scaling.png

Two tables, each measurement in its own process: one attention's forward and backward pass, and a whole model's
training step, at contexts 1,024 to 65,536, dense and in each sparse pattern (block length the power of two nearest
sqrt(t)). Peak memory is what the pass adds; the fitted exponent is the slope of log time over log context from
4,096 up. How each is measured: .readme/benchmarks.md.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

KERNELS = ["sdpa", "explicit"] + [f"{p}/{lay}" for p in ("strided", "fixed") for lay in ("split", "alternate", "union")]
"""One attention's kernels: dense causal SDPA, the explicit matrix, and pattern/layout of the sparse path."""
MODEL_KERNELS = ["sdpa", "strided/split", "fixed/split"]
SUMMARY = 4
FIT_FROM = 4096


def block_for(t: int) -> int:
    """The sparse block length for context t: the power of two nearest sqrt(t) (halves round up)."""
    return 2 ** math.floor(math.log2(t) / 2 + 0.5)


def sparse_settings(kernel: str, t: int) -> dict:
    """Model settings of a sparse kernel name ("fixed/split") at context t; {} for dense SDPA."""
    if kernel == "sdpa":
        return {"attention": "sdpa"}
    pattern, layout = kernel.split("/")
    return {"sparse": {"pattern": pattern, "layout": layout, "block": block_for(t), "summary": SUMMARY}}


def attention_job(job: dict) -> dict:
    """One attention's forward and backward at one context: seconds (best of the timed passes) and the MB the
    first pass added."""
    from ..model.attention import reference_attention
    from ..model.sparse import SparsePattern, flex_sparse_attention, sparse_attention

    device, t, kernel = torch.device(job["device"]), job["context"], job["kernel"]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # bf16: SDPA's flash kernel on a GPU
    torch.manual_seed(0)
    q, k, v = (torch.randn(job["batch"], job["heads"], t, job["head_width"], device=device, dtype=dtype,
                           requires_grad=True) for _ in range(3))  # fmt: skip
    if kernel == "sdpa":
        passes = [lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)]
    elif kernel == "explicit":
        passes = [lambda: reference_attention(q, k, v, causal=True)]
    else:
        s = sparse_settings(kernel, t)
        sp = SparsePattern(**s["sparse"])
        attend = flex_sparse_attention if device.type == "cuda" else sparse_attention
        layers = (0, 1) if sp.layout == "alternate" else (0,)  # alternate: a layer of each part, time averaged
        passes = [partial(attend, q, k, v, sp, layer, True) for layer in layers]

    def run() -> float:
        start = time.perf_counter()
        for one in passes:
            one().sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / len(passes)

    compiled = {}
    if device.type == "cuda":
        compiled["first_s"] = run()  # FlexAttention compiles on its first pass
        torch.cuda.reset_peak_memory_stats()
        before: float = torch.cuda.memory_allocated()
        first = run()
        added = (torch.cuda.max_memory_allocated() - before) / 1e6
    else:
        from .soak import rss_mb

        before = rss_mb() * 2**20 / 1e6  # MiB -> MB
        first = run()
        added = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6 - before  # KiB -> MB
    times = [first] if first > job.get("single_pass_s", 2.0) else [run() for _ in range(3)]
    return {"seconds": min(times), "added_mb": max(added, 0.0), **compiled}


def attention_sweep(job: dict) -> dict:
    """One kernel at every context of ``job["contexts"]`` in this process, on a GPU (whose allocator gives each
    pass a peak of its own): each point is printed as it is measured, so that a sweep cut short keeps them."""
    points = []
    for t in job["contexts"]:
        try:
            point = {"context": t, **attention_job({**job, "context": t})}
        except torch.OutOfMemoryError:
            point = {"context": t, "error": "out of GPU memory"}
        print(json.dumps(point), flush=True)
        points.append(point)
        if "error" in point:
            break
        torch.cuda.empty_cache()
    return {"points": points}


def attention_points(kernel: str, sizes: list[int], args, device: str, run_isolated):
    """(context, result) of one attention kernel, up to the first failure: a process per context on a CPU (a
    clean peak of the resident set), one process for them all on a GPU (one start, one CUDA context)."""
    job = {"kind": "attention", "device": device, "kernel": kernel, "batch": 1, "heads": args.attn_heads,
           "head_width": args.attn_head_width}  # fmt: skip
    if not device.startswith("cuda"):
        for t in sizes:
            yield t, run_isolated({**job, "context": t}, args.memory_budget_gb, timeout=args.timeout)
        return
    res = run_isolated({**job, "kind": "attention_sweep", "contexts": sizes}, None, timeout=args.timeout * len(sizes))
    points = res.get("points") or [p for p in res.get("printed", []) if "context" in p]
    for p in points:
        yield p.pop("context"), p
    if "error" in res and len(points) < len(sizes):
        yield sizes[len(points)], {"error": res["error"]}


def exponent(points: list[tuple[int, float]]) -> float | None:
    """The least-squares slope of log(seconds) over log(context), from :data:`FIT_FROM` up."""
    xs = [(math.log(t), math.log(s)) for t, s in points if t >= FIT_FROM and s > 0]
    if len(xs) < 2:
        return None
    mx, my = sum(x for x, _ in xs) / len(xs), sum(y for _, y in xs) / len(xs)
    return sum((x - mx) * (y - my) for x, y in xs) / sum((x - mx) ** 2 for x, _ in xs)


def contexts(start: int, end: int) -> list[int]:
    out, t = [], start
    while t <= end:
        out.append(t)
        t *= 2
    return out


def scaling(args, model: dict, device: str, run_isolated, train_job) -> dict:
    """Both tables, measured one process at a time. A kernel stops at the first context that fails, runs
    past the timeout, or (CPU) goes over the memory budget."""
    sizes = contexts(args.start_context, args.max_context)
    kernels = []
    for kernel in args.kernels or KERNELS:
        row: dict[str, Any] = {"kernel": kernel, "points": []}
        for t, res in attention_points(kernel, sizes, args, device, run_isolated):
            over = res.get("added_mb", 0.0) > 1000 * args.memory_budget_gb
            measured = "over budget" if over else f"{res.get('seconds', 0):.3g} s, +{res.get('added_mb', 0):.0f} MB"
            measured += f" (first pass {res['first_s']:.1f} s)" if "first_s" in res else ""
            status = res.get("error") or measured
            print(f"  attention {kernel:17s} context {t:6d}: {status}", file=sys.stderr, flush=True)
            if "error" in res or over:
                row["stopped"] = f"{t}: {res.get('error', 'over the memory budget')}"
                break
            row["points"].append({"context": t, **res})
        row["exponent"] = exponent([(p["context"], p["seconds"]) for p in row["points"]])
        kernels.append(row)
    models = []
    for kernel in (args.model_kernels or MODEL_KERNELS) if args.model_steps > 0 else ():  # 0: the attention table alone
        row = {"kernel": kernel, "points": []}
        for t in sizes:
            sizes_t = {**model, "context": t, **sparse_settings(kernel, t)}
            job = train_job(device, sizes_t, 1, t, steps=args.model_steps, warmup=1, precision=args.precision)
            res = run_isolated(job, args.memory_budget_gb if device == "cpu" else None, timeout=args.timeout)
            status = res.get("error") or f"{res['tokens_per_s']:,.0f} tokens/s"
            print(f"  model {kernel:17s} context {t:6d}: {status}", file=sys.stderr, flush=True)
            if "error" in res:
                row["stopped"] = f"{t}: {res['error']}"
                break
            row["points"].append({"context": t, **res})
        models.append(row)
    return {"contexts": sizes, "attention": kernels, "model": models, "summary": SUMMARY,
            "attention_shape": f"batch 1, {args.attn_heads} heads of {args.attn_head_width}"}  # fmt: skip


def _at(row: dict, t: int, key: str):
    return next((p[key] for p in row["points"] if p["context"] == t), None)


def format_scaling(report: dict, model: dict) -> list[str]:
    """The two tables as text: seconds and added MB per context, speed-ups over SDPA, exponents."""
    sizes = report["contexts"]
    sdpa: dict = next((r for r in report["attention"] if r["kernel"] == "sdpa"), {"points": []})
    lines = ["", f"one attention, forward + backward ({report['attention_shape']}; sparse block = nearest power "
             f"of two to sqrt(t), fixed c = {report['summary']}): seconds (+MB)",
             f"{'kernel':17s} " + " ".join(f"{t:>15,d}" for t in sizes) + f" {'exponent':>9s}"]  # fmt: skip
    for row in report["attention"]:
        cells = []
        for t in sizes:
            s, mb = _at(row, t, "seconds"), _at(row, t, "added_mb")
            cells.append(f"{s:.3g} (+{mb:.0f})" if s is not None else "-")
        exp = f"{row['exponent']:.2f}" if row["exponent"] is not None else "-"
        lines.append(f"{row['kernel']:17s} " + " ".join(f"{c:>15s}" for c in cells) + f" {exp:>9s}")
    for row in (r for r in report["attention"] if "/" in r["kernel"]):
        ups = [f"{_at(sdpa, t, 'seconds') / _at(row, t, 'seconds'):.1f}x at {t:,}" for t in sizes
               if _at(sdpa, t, "seconds") and _at(row, t, "seconds")]  # fmt: skip
        wins = next((t for t in sizes if (s := _at(row, t, "seconds")) and s < (_at(sdpa, t, "seconds") or 0)), None)
        lines.append(f"  {row['kernel']} over SDPA: " + ", ".join(ups[-3:])
                     + (f"; faster from {wins:,}" if wins else "; never faster"))  # fmt: skip
    if not report["model"]:  # --model-steps 0
        return lines
    lines += ["", f"a whole model's training step (depth {model['depth']}, width {model['emb']}, heads "
              f"{model['heads']}, batch 1): tokens/s",
              f"{'attention':17s} " + " ".join(f"{t:>10,d}" for t in sizes)]  # fmt: skip
    for row in report["model"]:
        cells = [f"{v:,.0f}" if (v := _at(row, t, "tokens_per_s")) else "-" for t in sizes]
        lines.append(f"{row['kernel']:17s} " + " ".join(f"{c:>10s}" for c in cells))
    dense = report["model"][0]
    for row in report["model"][1:]:
        ups = [f"{_at(row, t, 'tokens_per_s') / _at(dense, t, 'tokens_per_s'):.1f}x at {t:,}" for t in sizes
               if _at(row, t, "tokens_per_s") and _at(dense, t, "tokens_per_s")]  # fmt: skip
        lines.append(f"  {row['kernel']} over SDPA: " + ", ".join(ups[-3:]))
    return lines


def draw_scaling(report: dict, out: str, title: str = ""):
    """A log-log picture: one attention's seconds and added memory over the context, per kernel, each line
    labelled with its fitted exponent. Returns the figure (closed, for its data)."""
    from ..training.pictures import _pyplot, save_figure

    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    for row in report["attention"]:
        ts = [p["context"] for p in row["points"]]
        if not ts:
            continue
        exp = f", t^{row['exponent']:.2f}" if row["exponent"] is not None else ""
        style = "--" if row["kernel"] in ("sdpa", "explicit") else "-"
        left.plot(ts, [p["seconds"] for p in row["points"]], style, marker="o", label=f"{row['kernel']}{exp}")
        right.plot(ts, [max(p["added_mb"], 1.0) for p in row["points"]], style, marker="o", label=row["kernel"])
    for ax, what in ((left, "seconds, forward + backward"), (right, "memory added, MB")):
        ax.set_xscale("log", base=2), ax.set_yscale("log")
        ax.set_xlabel("context t"), ax.set_ylabel(what), ax.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    fig.suptitle(title or "one attention over the context")
    fig.tight_layout()
    save_figure(fig, out, 100)
    plt.close(fig)
    return fig

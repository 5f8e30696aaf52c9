"""Printing results as tables a person reads."""

import math
from typing import Any


def duration(seconds: float | None) -> str:
    """Seconds as the largest sensible unit."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def money(usd: float | None) -> str:
    """Dollars with cents."""
    return "-" if usd is None else f"${usd:,.2f}"


def energy(kwh: float | None) -> str:
    """An energy upper bound in kWh."""
    return "-" if kwh is None else f"<={kwh:.3g} kWh"


def training(config: dict[str, Any]) -> str:
    """How the CNN is trained, as a PyTorch user says it: 'adamw (weight decay 0.01), amp_fp16, channels_last,
    cudnn.benchmark on'; the layout and cudnn.benchmark are said either way, since both change a GPU's step."""
    extras = [f"{name} {config[key]:g}" for key, name in (("momentum", "momentum"), ("weight_decay", "weight decay"))
              if config.get(key)]  # fmt: skip
    text = config.get("optimizer", "sgd") + (f" ({', '.join(extras)})" if extras else "")
    layout = "channels_last" if config.get("channels_last") else "NCHW (default)"
    tuned = "cudnn.benchmark on" if config.get("cudnn_benchmark") else "cudnn.benchmark off (default)"
    return ", ".join([text, config.get("precision", "fp32"), layout, tuned])


def band(point: dict[str, Any]) -> str:
    """The point's P10-P90 as multiples of its answer, 'x0.85-x1.21', or a dash where it has none."""
    mid, low, high = (point.get(k) for k in ("iteration_seconds", "iteration_seconds_p10", "iteration_seconds_p90"))
    if not mid or low is None or high is None:
        return "-"
    return f"x{low / mid:.2f}-x{high / mid:.2f}"


def table(rows: list[list[str]], header: list[str]) -> str:
    """Left-aligned text table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def result(job: dict[str, Any]) -> str:
    """A finished job as a prediction table and the best choices."""
    res = job["result"]
    # GPU and node columns only where a point trains on more than one GPU.
    spread = any(p.get("gpus_used", 1) > 1 or p.get("nodes", 1) > 1 for p in res["predictions"])
    fed = any(p.get("input_ms") is not None for p in res["predictions"])
    spot = any(p.get("spot_cost_usd") is not None for p in res["predictions"])
    rows = []
    for p in res["predictions"]:
        ok = p["fits_in_memory"] is not False  # a point that does not fit has no time or cost worth reading
        rows.append([
            p["cnn"],
            p["machine"],
            str(p["batch_size"]),
            *([_layout(p), _efficiency(p)] if spread else []),
            duration(p["iteration_seconds"]) if ok else "out of memory",
            duration(p["epoch_seconds"]) if ok else "-",
            duration(p["total_seconds"]) if ok else "-",
            money(p["cost_usd"]) if ok else "-",
            *([money(p.get("spot_cost_usd")) if ok else "-"] if spot else []),
            energy(p.get("energy_kwh")) if ok else "-",
            *([_input(p)] if fed else []),
            band(p) if ok else "-",
            _memory(p),
            _source(p),
        ])  # fmt: skip
    header = ["cnn", "machine", "batch", *(["gpus x nodes (global batch)", "scaling"] if spread else []), "iteration",
              "epoch", "total", "cost", *(["spot"] if spot else []), "energy", *(["input"] if fed else []), "P10-P90",
              "memory",
              "source"]  # fmt: skip
    out = [table(rows, header)]
    if res.get("training"):
        out.append("training: " + training(res["training"]))
    out += decision_lines(res.get("decisions") or [])
    for b in res["best"]:
        largest = b.get("max_batch_size")
        fits = f"; largest batch that fits {largest} (modelled)" if largest is not None else ""
        if b["min_time"]:
            t, c = b["min_time"], b["min_cost"]
            out.append(
                f"{b['cnn']} on {b['machine']}: fastest at batch {t['batch_size']}{_on(t, spread)} "
                f"({duration(t['total_seconds'])}, {money(t['cost_usd'])}{_free(t)}); "
                f"cheapest at batch {c['batch_size']}{_on(c, spread)} "
                f"({duration(c['total_seconds'])}, {money(c['cost_usd'])})"
                + fits
                + (" [reference]" if t.get("source") == "reference" else "")
            )
        elif fits:
            out.append(f"{b['cnn']} on {b['machine']}: no usable batch size{fits}")
    for sched in res.get("schedules") or []:
        out.append(_schedule_line(sched))
    asked = (job.get("request") or {}).get("gpus")
    if isinstance(asked, list):  # a type with fewer GPUs than some counts asked is answered for those it holds
        held: dict[str, set[int]] = {}
        for p in res["predictions"]:
            held.setdefault(p["machine"], set()).add(p["gpus_used"])
        for machine_type, counts in held.items():
            if lacking := sorted(set(asked) - counts):
                out.append(f"{machine_type}: not answered for gpus {', '.join(map(str, lacking))} (it has fewer GPUs)")
    # One GPU alone reduces nothing ("none"): only the several-GPU points' algorithms are named.
    algorithms = sorted({p["allreduce_algorithm"] for p in res["predictions"]
                         if p.get("allreduce_algorithm") not in (None, "none")})  # fmt: skip
    if algorithms:
        out.append(f"all-reduce assumed: {', '.join(algorithms)}")
    losses = [p["ddp_losses_ms"] for p in res["predictions"] if p.get("ddp_losses_ms")]
    if losses:
        waits = any(x["stragglers"] > 0 for x in losses)
        out.append(
            "scaling also counts DDP's bucket copies and NCCL slowing backward"
            + (" and the wait for the slowest replica (images decoded)" if waits
               else "; replicas waiting for the slowest are counted only where images are decoded (--input)")
        )  # fmt: skip
    given = (job.get("request") or {}).get("internode_gbps")
    networks = {p["machine"]: (p["internode_gbps"], p.get("internode_network"))
                for p in res["predictions"] if p.get("internode_gbps") is not None}  # fmt: skip
    for machine_type, (gbps, kind) in networks.items():
        source = "--internode-gbps" if given is not None else (kind or "the catalog's network")
        out.append(f"between machines on {machine_type}: {gbps:g} Gbit/s ({source})")
    if res.get("spot_note"):
        out.append(f"spot: {res['spot_note'].removeprefix('spot_cost_usd: ')}")
    for machine_type, fed_by in (res.get("inputs") or {}).items():
        out.append(f"input on {machine_type}: {fed_by['detail']}")
    for machine_type, model in res["models"].items():
        if model["status"] == "ok":
            mape = model.get("loco_mape")
            err = f", leave-one-CNN-out error {mape:.1f}%" if mape is not None else ""
            on = f", measured on {model['measured_on']}" if model.get("measured_on") else ""
            out.append(f"model for {machine_type}: version {model['version']} ({model['kind']}{err}{on})")
        else:
            out.append(f"{machine_type}: {model['detail']}")
    return "\n".join(out)


QUESTIONS = {
    "fastest": "fastest",
    "cheapest": "cheapest",
    "cheapest_within_deadline": "cheapest within the deadline",
    "fastest_within_budget": "fastest within the budget",
}


def decision_lines(found: list[dict[str, Any]]) -> list[str]:
    """Each question's winner across machine types and layouts, its figures with their band, and why."""
    out = []
    for d in found:
        head = f"{QUESTIONS[d['question']]} for {d['cnn']}: "
        w = d["winner"]
        if w is None:
            out.append(head + "; ".join(d["reasons"]))
            continue
        low, high = w.get("total_seconds_p10"), w.get("total_seconds_p90")
        spread = f" (P10-P90 {duration(low)}-{duration(high)})" if low is not None and high is not None else ""
        label = " [reference]" if w["source"] == "reference" else ""
        spot = f" (spot {money(w['spot_cost_usd'])})" if w.get("spot_cost_usd") is not None else ""
        out.append(
            f"{head}{d['reasons'][0]}: {duration(w['total_seconds'])}{spread}, {money(w['cost_usd'])}{spot}{label}"
        )
        out += [f"  {reason}" for reason in d["reasons"][1:]]
    return out


def _free(choice: dict[str, Any]) -> str:
    """', 25% memory free' where the choice says its headroom."""
    pct = choice.get("memory_headroom_pct")
    return "" if pct is None else f", {pct:.0f}% memory free"


def _input(point: dict[str, Any]) -> str:
    """Whether the input pipeline or the GPU sets the step, by how much, and the echo factor that would hide it."""
    ratio = point.get("input_bound_ratio")
    if ratio is None:
        return "-"
    if not point.get("input_bound"):
        return f"keeps up ({ratio:.2f}x)"
    return f"BOUND {ratio:.1f}x, echo {point['echo_factor']}"


def _schedule_line(sched: dict[str, Any]) -> str:
    """A schedule's phases, its total and the best constant batch size beside it."""
    phases = " then ".join(
        f"{p['epochs']} epochs at global batch {p['batch_size'] * p['gpus'] * p['nodes']} "
        f"({p['batch_size']} per GPU on {p['gpus']} GPUs x {p['nodes']})" for p in sched["phases"]
    )  # fmt: skip
    head = f"{sched['cnn']} on {sched['machine']}: schedule {phases}: "
    if sched["total_seconds"] is None:
        return head + f"no total ({sched['missing']})"
    line = head + f"{duration(sched['total_seconds'])}, {money(sched['cost_usd'])}"
    best = sched.get("best_constant")
    if best:
        line += (f"; best constant batch {best['batch_size']} ({best['gpus']} GPUs x {best['nodes']}): "
                 f"{duration(best['total_seconds'])}, {money(best['cost_usd'])}")  # fmt: skip
    return line


def _layout(point: dict[str, Any]) -> str:
    """GPUs x nodes and the global batch."""
    return f"{point.get('gpus_used', 1)} x {point.get('nodes', 1)} ({point.get('global_batch_size')})"


def _efficiency(point: dict[str, Any]) -> str:
    """Scaling efficiency as a percentage, or a dash."""
    eff = point.get("scaling_efficiency")
    return "—" if eff is None else f"{eff * 100:.0f}%"


def _on(choice: dict[str, Any], spread: bool) -> str:
    """' on 8 GPUs x 4 nodes' (' on one GPU', ' on 8 GPUs of one node') where layouts differ."""
    if not spread:
        return ""
    gpus, nodes = choice.get("gpus", 1), choice.get("nodes", 1)
    each = "one GPU" if gpus == 1 else f"{gpus} GPUs"
    return f" on {each}" + (f" x {nodes} nodes" if nodes > 1 else (" of one node" if gpus > 1 else ""))


def _memory(point: dict[str, Any]) -> str:
    """Modelled peak memory, marked when it does not fit."""
    gib = point.get("peak_memory_gib")
    shown = "-" if gib is None else f"{gib:.2f} GiB"
    return shown + (" (no fit)" if point.get("fits_in_memory") is False and gib is not None else "")


def _source(point: dict[str, Any]) -> str:
    """'benchmarked' (with the machine type measured on, when another), or 'reference' (its band is the P10-P90
    column: one figure of uncertainty, not a second one beside it)."""
    if point.get("source") == "reference":
        return "reference"
    others = [m for m in point.get("measured_on") or [] if m != point["machine"]]
    return "benchmarked" + (f" on {', '.join(others)}" if others else "")


SPLITS = (
    ("loco", "leave-one-CNN-out"), ("sizes", "CNN and image size held out"),
    ("batches", "CNN and larger batches held out"), ("lofo", "leave-one-family-out"),
)  # fmt: skip


def evaluation(ev: dict[str, Any]) -> str:
    """Held-out error of the model beside its baselines per split, its interval's coverage, per held-out CNN."""
    names = ("model", "lightgbm", "base_only", "base_shrunk", "conv_scale", "flops_scale")
    lines = []
    for split, label in SPLITS:
        if not ev.get(split):
            continue
        # A model stored before a baseline existed has no figure for it.
        scores = ev[split]
        parts = [f"{n} {scores[n]['mape']:.1f}%" for n in names if n in scores and scores[n]["mape"] is not None]
        coverage = ev[split]["model"]["coverage"]
        inside = f"; P10-P90 holds {coverage:.0%} of steps" if coverage is not None else ""
        lines.append(f"{label} MAPE: " + ", ".join(parts) + inside)
    groups = ev["loco"]["model"]["groups"]
    base = {n: ev["loco"][n]["groups"] for n in ("conv_scale", "flops_scale")}
    rows = [
        [cnn, f"{g['mape']:.1f}%", f"{g['median_ape']:.1f}%", f"{g['max_ape']:.1f}%",
         f"{base['conv_scale'][cnn]['mape']:.1f}%", f"{base['flops_scale'][cnn]['mape']:.1f}%",
         f"{g['inside']}/{g['rows']}" if g["inside"] is not None else "-", g["chosen"]]
        for cnn, g in groups.items()
    ]  # fmt: skip
    header = ["held-out cnn", "model", "median", "max", "conv x k", "flops x k", "in P10-P90", "chosen"]
    return "\n".join(lines) + "\n" + table(rows, header)


def stored(params: dict[str, Any]) -> str:
    """What the stored model answers with: the candidate its inner folds chose, its P10-P90 as factors of the answer."""
    inner = (params.get("selection") or {}).get("inner_mape") or {}
    scores = ", ".join(f"{name} {mape:.1f}%" for name, mape in inner.items() if mape is not None)
    line = f"stored: {params.get('choice', '?')}" + (f" (inner folds: {scores})" if scores else "")
    band = params.get("interval")
    if not band:
        return line
    seen, unseen = (f"x{math.exp(min(lo, 0.0)):.2f}-x{math.exp(max(hi, 0.0)):.2f}" for lo, hi in
                    (band["seen"], band["unseen"]))  # fmt: skip
    low, high = band["batch_range"]
    wider = f", wider per doubling beyond batch {low}-{high}" if band.get("scale") else ""
    sizes = "/".join(map(str, band["image_sizes"]))
    return f"{line}; P10-P90 {seen} of the answer at {sizes} px and batch {low}-{high}, {unseen} elsewhere{wider}"

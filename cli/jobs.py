"""`traincast predict`, `status`, `jobs`, `cancel` and `agents`: prediction jobs and the agents that measure for
them, over HTTP."""

import argparse
import math
import sys
import time
from typing import Any

from cli import flags, render
from cli.client import Api, CliError, dumps
from shared.jobs.models import JobStatus


def parse_batch_sizes(text: str) -> list[int] | dict[str, int]:
    """The one batch-size parser: '8,16,32' → list; '1-256' or '1-256:8' → range {min, max, step}."""
    try:
        if "-" in text:
            span, _, step = text.partition(":")
            lo, hi = span.split("-", 1)
            return {"min": int(lo), "max": int(hi), "step": int(step or 1)}
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"--batch-sizes {text!r}: use a list like 8,16,32 or a range like 1-256 or 1-256:8") from None


def batch_size_list(text: str | None) -> list[int]:
    """--batch-sizes as a list (a range spelt out); none given: an empty list."""
    parsed = parse_batch_sizes(text or "")
    if isinstance(parsed, dict):
        return list(range(parsed["min"], parsed["max"] + 1, max(parsed["step"], 1)))
    return parsed


def split_values(values: list[str]) -> list[str]:
    """Repeated or comma-separated values of a flag, one list."""
    return [v for item in values for v in item.split(",") if v]


def _counts(text: str, flag: str) -> list[int]:
    """GPU or node counts: 8, or 1,2,4,8 to compare them."""
    try:
        counts = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise CliError(f"{flag} {text!r}: give whole numbers, e.g. 8 or 1,2,4,8") from None
    if not counts:
        raise CliError(f"{flag} is empty: give whole numbers, e.g. 8 or 1,2,4,8")
    return counts


def _schedule(text: str) -> list[dict[str, int]]:
    """Phases EPOCHSxBATCH[:GPUS[:NODES]], comma-separated (an empty GPUS: the job's most): 5x256,85x1024::4."""
    phases = []
    for item in (v.strip() for v in text.split(",") if v.strip()):
        epochs, _, rest = item.partition("x")
        fields = [epochs, *rest.split(":")]
        if len(fields) > 4 or not all(f.isdigit() for f in fields[:2]) or not all(f.isdigit() or not f for f in fields):
            raise CliError(f"--schedule {item!r}: write EPOCHSxBATCH[:GPUS[:NODES]], e.g. 5x256,85x1024")
        names = ("epochs", "batch_size", "gpus", "nodes")
        phases.append({name: int(f) for name, f in zip(names, fields, strict=False) if f})
    return phases


def cmd_predict(api: Api, args: argparse.Namespace) -> int:
    """Submit a job, follow its progress, print the table."""
    unnamed = not args.machine_type
    args.machine_type = args.machine_type or ["local"]
    body = {
        "cnns": split_values(args.cnns),
        "machines": split_values(args.machine_type),
        "batch_sizes": parse_batch_sizes(args.batch_sizes),
        "epochs": args.epochs,
        "dataset_size": args.dataset_size,
        "image_size": args.image_size,
        **flags.training_of(args).model_dump(),
        "wait_for_benchmarks": args.wait_for_benchmarks,
    }
    if args.gpus is not None:
        body["gpus"] = _counts(args.gpus, "--gpus")
    if args.nodes is not None:
        body["nodes"] = _counts(args.nodes, "--nodes")
    if args.internode_gbps is not None:
        body["internode_gbps"] = args.internode_gbps
    if args.allreduce != "nccl":
        body["allreduce"] = args.allreduce
    for name in ("deadline_hours", "budget_usd", "torus_x"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    if args.schedule:
        body["schedule"] = _schedule(args.schedule)
        body["schedule_batch"] = "per_gpu" if args.schedule_per_gpu else "global"
    if args.input != "memory" or args.dataloader_workers is not None or args.network_gbps is not None:
        body["input"] = {"source": args.input} | {
            k: v for k, v in (("dataloader_workers", args.dataloader_workers), ("network_gbps", args.network_gbps))
            if v is not None
        }  # fmt: skip
    if unnamed:  # said once the flags are known good, before anything is sent
        print("no --machine given: predicting for local (this machine); `traincast machines list` names the others",
              file=sys.stderr)  # fmt: skip
    try:
        job = api.call("POST", "/v1/jobs", json=body)
    except CliError as exc:
        raise CliError(flags.named(str(exc))) from None
    if not args.quiet:
        print(f"job {job['id']} submitted", file=sys.stderr)
    job = follow(api, job["id"], show=not args.quiet)
    return print_job(job, as_json=args.json)


def follow(api: Api, job_id: str, *, show: bool, poll_s: float = 0.5, deadline: float = math.inf) -> dict[str, Any]:
    """Poll a job until it finishes (each request held by the API until then, or a while), drawing a progress bar;
    past deadline (a time.monotonic()), the job as it stands, unfinished."""
    last = ""
    # Shown: the bar moves each second; not shown: fewer requests. The answer comes as soon as the job ends.
    wait = 1.0 if show else 10.0
    while True:
        asked = time.monotonic()
        job = api.call("GET", f"/v1/jobs/{job_id}", params={"wait": max(min(wait, deadline - asked), 0.5)})
        if show:
            line = progress_bar(job)
            if line != last:
                end = "\r" if sys.stderr.isatty() else "\n"
                print(line.ljust(len(last)), end=end, file=sys.stderr, flush=True)
                last = line
        if JobStatus(job["status"]).terminal:
            if show and sys.stderr.isatty():
                print(file=sys.stderr)
            return job
        if time.monotonic() >= deadline:
            return job
        if time.monotonic() - asked < wait / 2:  # an API that does not hold answers: poll at our own pace
            time.sleep(poll_s)


def progress_bar(job: dict[str, Any], width: int = 30) -> str:
    """A job's state as one line: its layer benchmarks' bar, or what answered it without them."""
    lb = job.get("progress", {}).get("layer_benchmarks")
    if not lb:
        return f"{job['status']}…"
    needed, done = lb["needed"], lb["done"]
    if JobStatus(job["status"]) == JobStatus.SUCCEEDED and done < needed:
        # Answered without waiting for them (the reference): "0/736" would read as stuck or failed; and "queued"
        # only where an agent will take them.
        machines = job.get("progress", {}).get("machines", {})
        unserved = sorted(m for m, p in machines.items() if p.get("pending") and p.get("agent_alive") is False)
        served = needed - done - sum(machines[m].get("pending", 0) for m in unserved)
        said = [f"{served} layer benchmarks queued for their agents"] if served > 0 else []
        if unserved:
            said.append(f"no agent serves {', '.join(unserved)}: not measured until one does (traincast agents)")
        return "succeeded: answered from reference; " + "; ".join(said)
    filled = int(width * done / needed) if needed else width
    return f"{job['status']:<9} [{'#' * filled}{'.' * (width - filled)}] {done}/{needed} layer benchmarks"


def print_job(job: dict[str, Any], *, as_json: bool) -> int:
    """A finished job as its table (or JSON); the exit status says whether it succeeded."""
    if as_json:
        print(dumps(job))
    elif job["status"] == JobStatus.SUCCEEDED:
        print(render.result(job))
    else:
        print(f"job {job['id']} {job['status']}" + (f": {job['error']}" if job.get("error") else ""))
    return 0 if job["status"] == JobStatus.SUCCEEDED else 1


def cmd_status(api: Api, args: argparse.Namespace) -> int:
    """Show one job."""
    job = api.call("GET", f"/v1/jobs/{args.id}")
    if JobStatus(job["status"]).terminal:
        return print_job(job, as_json=args.json)
    print(dumps(job) if args.json else progress_bar(job))
    return 0


def cmd_jobs(api: Api, args: argparse.Namespace) -> int:
    """List recent jobs."""
    page = api.call("GET", "/v1/jobs", params={"limit": args.limit})
    rows = [
        [j["id"], j["status"], ",".join(j["request"]["cnns"]), ",".join(j["request"]["machines"]), j["created_at"][:19]]
        for j in page["jobs"]
    ]
    print(render.table(rows, ["id", "status", "cnns", "machines", "created"]) if rows else "no jobs yet")
    return 0


def cmd_cancel(api: Api, args: argparse.Namespace) -> int:
    """Cancel a job."""
    job = api.call("POST", f"/v1/jobs/{args.id}/cancel")
    print(f"job {job['id']} {job['status']}")
    return 0


def cmd_agents(api: Api, args: argparse.Namespace) -> int:
    """List benchmark agents: alive or not, and what each is measuring."""
    params: dict[str, Any] = {"machine": args.machine_type} if args.machine_type else {}
    found = api.call("GET", "/v1/agents", params=params)["agents"]
    if args.json:
        print(dumps(found))
        return 0
    rows = [
        [
            a["machine_type"],
            f"{a['host']}:{a['pid']}",
            a["device"],
            "alive" if a["alive"] else (f"stopped: {a.get('stop_reason') or '?'}" if a["stopped_at"] else "silent"),
            f"{a['heartbeat_age_s']:.0f} s",
            _work(a["current_work"]),
        ]
        for a in found
    ]
    headers = ["machine", "agent", "device", "state", "last beat", "measuring"]
    print(render.table(rows, headers) if rows else "no agents have registered")
    return 0


def _work(work: dict[str, Any] | None) -> str:
    if not work:
        return "idle"
    what = work.get("cnn") or f"signature {work.get('signature_id')}"
    return f"{work['task'].split('.')[-1]} {what} bs {','.join(map(str, work.get('batch_sizes', [])))}"


class _Defaults(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each default, unless there is none or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `predict`, `status`, `jobs`, `cancel` and `agents` to the command-line grammar."""
    pr = sub.add_parser("predict", help="predict training time and cost", formatter_class=_Defaults)
    pr.add_argument("cnns", nargs="+", help="CNN names (`traincast cnns` lists them)")
    pr.add_argument(
        "--machine",
        dest="machine_type",
        action="append",
        default=None,
        help="machine type(s), repeat or comma-separate (`traincast machines list`); none given: local, this "
        "machine, said on stderr",
    )
    pr.add_argument("--batch-sizes", default="8,16,32,64", help="8,16,32 or 1-256 or 1-256:8 (per GPU)")
    pr.add_argument("--epochs", type=int, default=90, help="epochs of training")
    pr.add_argument("--dataset-size", type=int, default=1_281_167, help="images an epoch (ImageNet's)")
    pr.add_argument("--image-size", type=int, default=224, help="image height and width in pixels")
    pr.add_argument(
        "--gpus",
        default=None,
        help="GPUs per machine, data parallel (batch sizes are per GPU); 1,2,4,8 compares them "
        "(default: every GPU of each machine type)",
    )
    pr.add_argument(
        "--schedule",
        default=None,
        help="batch-size schedule, phases EPOCHSxBATCH[:GPUS[:NODES]] with global batches (all GPUs together): "
        "5x256,85x1024 with --gpus 8 (priced beside the best constant; its epochs are the job's)",
    )
    pr.add_argument("--schedule-per-gpu", action="store_true", help="--schedule's batch sizes are per GPU")
    pr.add_argument("--nodes", default=None, help="machines of the type trained together; 1,2,4 compares (default 1)")
    pr.add_argument(
        "--allreduce", choices=["nccl", "hierarchical", "torus_2d"], default="nccl",
        help="the gradient all-reduce: NCCL's ring or tree, hierarchical, or a 2D torus (--torus-x)",
    )  # fmt: skip
    pr.add_argument("--torus-x", type=int, default=None, help="--allreduce torus_2d: GPUs along X (whole machines)")
    pr.add_argument("--deadline-hours", type=float, default=None, help="decide also the cheapest within this time")
    pr.add_argument("--budget-usd", type=float, default=None, help="decide also the fastest within this cost")
    pr.add_argument(
        "--internode-gbps",
        type=float,
        default=None,
        help="Gbit/s between machines in place of the catalog's (e.g. 5: NCCL over one TCP flow on AWS); needed for "
        "your own machine types with --nodes",
    )
    pr.add_argument(
        "--input",
        choices=("memory", "local_jpeg", "network_jpeg"),
        default="memory",
        help="how images arrive: memory (no input cost), JPEGs decoded from local disk or read over a network",
    )
    pr.add_argument("--dataloader-workers", type=int, default=None, help="DataLoader workers per GPU (default: vCPUs "
                    "split over the GPUs)")  # fmt: skip
    pr.add_argument("--network-gbps", type=float, default=None, help="network_jpeg: the read bandwidth in Gbit/s")
    flags.add_training_flags(pr)
    pr.add_argument(
        "--wait-for-benchmarks",
        action="store_true",
        help="wait for layer benchmarks on every machine type instead of answering GPUs with no agent by reference",
    )
    pr.add_argument("--json", action="store_true", help="print the job as JSON")
    pr.add_argument("--quiet", action="store_true", help="no progress on stderr")

    st = sub.add_parser("status", help="show a job")
    st.add_argument("id")
    st.add_argument("--json", action="store_true")
    jb = sub.add_parser("jobs", help="list recent jobs")
    jb.add_argument("--limit", type=int, default=20)
    cn = sub.add_parser("cancel", help="cancel a job")
    cn.add_argument("id")

    ag = sub.add_parser("agents", help="list benchmark agents and what they are doing")
    ag.add_argument("--machine", dest="machine_type", default=None)
    ag.add_argument("--json", action="store_true")


COMMANDS = {"predict": cmd_predict, "status": cmd_status, "jobs": cmd_jobs, "cancel": cmd_cancel, "agents": cmd_agents}


def run(api: Api, args: argparse.Namespace) -> int:
    """Run one of this module's COMMANDS."""
    return COMMANDS[args.command](api, args)

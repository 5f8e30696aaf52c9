"""`traincast`: submit and follow prediction jobs (over HTTP), calibrate and train (admin, direct)."""

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import ValidationError

from cli import catalog, flags, fleet, keys, machines, measurements, render
from cli.client import Api, CliError, dumps
from shared.core.errors import InvalidRequest
from shared.jobs.models import JobStatus
from shared.training import OPTIMIZERS, PRECISIONS, TrainConfig, config_of

if TYPE_CHECKING:  # the CLI loads the worker only for the commands that train
    from worker.predictor import PredictorModel

DEFAULT_API = "http://127.0.0.1:8000"


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


def _split(values: list[str]) -> list[str]:
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
        "cnns": _split(args.cnns),
        "machines": _split(args.machine_type),
        "batch_sizes": parse_batch_sizes(args.batch_sizes),
        "epochs": args.epochs,
        "dataset_size": args.dataset_size,
        "image_size": args.image_size,
        **training_of(args).model_dump(),
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
    return _print_job(job, as_json=args.json)


def cmd_cnns(api: Api, args: argparse.Namespace) -> int:
    """List the CNNs a job may name (built-in and registered), or register or delete one of your own."""
    if args.cnns_command == "add":
        try:
            data = Path(args.file).read_bytes()
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        added = api.call("POST", "/v1/cnns", data={"name": args.name}, files={"file": (Path(args.file).name, data)})
        if args.json:
            print(dumps(added))
            return 0
        size = f"at {added['image_size']} px only" if "image_size" in added else "at any image size"
        params = "" if added.get("parameters") is None else f", {added['parameters'] / 1e6:.1f} M parameters"
        print(f"registered {added['name']} ({added['source']}{params}), usable {size}")
        for warning in added.get("warnings", []):
            print(f"warning: {warning}", file=sys.stderr)
        return 0
    if args.cnns_command == "delete":
        api.call("DELETE", f"/v1/cnns/{args.name}")
        print(f"deleted {args.name}")
        return 0
    rows = api.call("GET", "/v1/cnns")["cnns"]
    if args.json:
        print(dumps(rows))
        return 0
    table = [[c["name"], c["source"], "-" if c.get("parameters") is None else f"{c['parameters'] / 1e6:.1f} M",
              str(c.get("image_size", "any"))] for c in rows]  # fmt: skip
    print(render.table(table, ["cnn", "source", "parameters", "image size"]))
    return 0


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
            line = _bar(job)
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


def _bar(job: dict[str, Any], width: int = 30) -> str:
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


def _print_job(job: dict[str, Any], *, as_json: bool) -> int:
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
        return _print_job(job, as_json=args.json)
    print(dumps(job) if args.json else _bar(job))
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


def _ints(text: str | None, flag: str) -> list[int]:
    try:
        return [int(v) for v in (text or "").split(",") if v.strip()]
    except ValueError:
        raise CliError(f"{flag} {text!r}: use comma-separated whole numbers, e.g. 64,112,160") from None


def calibration_plan(args: argparse.Namespace) -> Any:
    """The calibrate.Plan the flags name: the machine type's spread of settings unless sizes are given."""
    from calibration import run as calibrate

    sizes, batches = _ints(args.image_size, "--image-size"), batch_size_list(args.batch_sizes)
    if sizes or batches:
        settings = tuple(
            (size, tuple(batches or calibrate.DEFAULT_BATCH_SIZES))
            for size in sizes or [calibrate.default_image_size(args.machine_type)]
        )
    else:
        settings = calibrate.default_settings(args.machine_type)
    configs = tuple(calibrate.config_from_key(k, args.precision) for k in _split(args.configs or []))
    return calibrate.Plan(
        machine_type=args.machine_type,
        cnns=tuple(_split(args.cnns)) if args.cnns else calibrate.SETS[args.set],
        config=training_of(args),
        settings=settings,
        configs=configs,
    )


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure whole steps on a machine type and fit its model(s) (talks to the database and broker)."""
    from calibration import run as calibrate

    plan = calibration_plan(args)
    print(f"calibrating {plan.machine_type}: {plan.describe()}", file=sys.stderr)

    def show(done: int, needed: int) -> None:
        end = "\r" if sys.stderr.isatty() else "\n"
        print(
            f"calibrating {plan.machine_type}: {done}/{needed} measurements stored",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    for model in calibrate.run(plan, timeout_s=args.timeout, on_progress=show):
        print(file=sys.stderr)
        _print_model(model)
    for f in calibrate.failures(plan):
        print(
            f"not measurable: {f['cnn_name']} at batch size {f['batch_size']}: {f['reason']} "
            f"({f['image_size']} px, {f['training']})"
        )
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


def cmd_train(args: argparse.Namespace) -> int:
    """Fit a model from the stored measurements (talks to the database)."""
    from worker import predictor

    _print_model(predictor.train(machine_type=args.machine_type, pool=args.pool, config=training_of(args)))
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Apply database migrations."""
    from shared.core import migrate

    return migrate.main()


def cmd_db_logins(args: argparse.Namespace) -> int:
    """Create or update the processes' PostgreSQL logins."""
    from shared.core import logins

    return logins.main()


def _print_model(model: "PredictorModel") -> None:
    ev = model["evaluation"]
    pooled = ev.get("pooled_from", [])
    print(
        f"model {model['machine_type']} v{model['version']} ({model['kind']}, {model['cost_key']}) from "
        f"{ev['rows']} measured steps of {ev['cnns']} CNNs at {'/'.join(map(str, ev['image_sizes']))} px, "
        f"batch sizes {','.join(map(str, ev['batch_sizes']))}"
        + (f", pooled from {', '.join(pooled)} ({ev['own_rows']} steps of its own)" if len(pooled) > 1 else "")
    )
    print(render.evaluation(ev))
    print(render.stored(model["params"]))


def add_training_flags(p: argparse.ArgumentParser) -> None:
    """--optimizer, --momentum, --weight-decay, --precision, --channels-last, --cudnn-benchmark (shared/training.py)."""
    p.add_argument("--optimizer", choices=list(OPTIMIZERS), default="sgd", help="torch.optim's (default: sgd)")
    p.add_argument("--momentum", type=float, default=0.0, help="SGD only (default 0, as PyTorch)")
    p.add_argument("--weight-decay", type=float, default=None, help="default PyTorch's: 0, or 0.01 for adamw")
    p.add_argument("--precision", choices=list(PRECISIONS), default="fp32", help="fp32 (PyTorch's defaults), tf32, or "
                   "autocast amp_fp16 / amp_bf16 (default: fp32)")  # fmt: skip
    p.add_argument("--channels-last", action="store_true", help="model and images in channels_last memory format "
                   "(default: NCHW, PyTorch's)")  # fmt: skip
    p.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True, as "
                   "torchvision's train.py, timm and DeepLearningExamples set it "
                   "(default: off, PyTorch's)")  # fmt: skip


def training_of(args: argparse.Namespace) -> TrainConfig:
    """The training configuration the flags name; a bad combination is a one-line error."""
    try:
        return config_of(
            optimizer=args.optimizer, precision=args.precision, momentum=args.momentum,
            weight_decay=args.weight_decay, channels_last=args.channels_last, cudnn_benchmark=args.cudnn_benchmark,
        )  # fmt: skip
    except ValidationError as exc:
        reasons = (
            f"{'.'.join(map(str, e['loc'])) + ': ' if e['loc'] else ''}{e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise InvalidRequest(flags.named("; ".join(reasons))) from None


class _Defaults(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each default, unless there is none or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line, as every other CLI error (the usage is one --help away)."""

    def error(self, message: str) -> NoReturn:
        """Print the mistake and where the usage is; exit 2, argparse's status for a usage error."""
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The command-line grammar."""
    p = _Parser(prog="traincast", description=__doc__)
    p.add_argument("--api-url", default=os.environ.get("TRAINCAST_API_URL", DEFAULT_API), help="API base URL")
    sub = p.add_subparsers(dest="command", required=True)

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
    add_training_flags(pr)
    pr.add_argument(
        "--wait-for-benchmarks",
        action="store_true",
        help="wait for layer benchmarks on every machine type instead of answering GPUs with no agent by reference",
    )
    pr.add_argument("--json", action="store_true", help="print the job as JSON")
    pr.add_argument("--quiet", action="store_true", help="no progress on stderr")

    cn = sub.add_parser("cnns", help="the CNNs a job may name (built-in and registered); add or delete your own")
    cn.add_argument("--json", action="store_true")
    cs = cn.add_subparsers(dest="cnns_command")
    ad = cs.add_parser("add", help="register your own CNN: an ONNX model or a JSON layer list (nothing in it is run)")
    ad.add_argument("name", help="1-64 letters, digits, '_', '.' or '-'")
    ad.add_argument("file", help="the .onnx file, or the JSON layer list (docs/API.md, 'Your own CNN')")
    dl = cs.add_parser("delete", help="delete a CNN you registered")
    dl.add_argument("name")

    st = sub.add_parser("status", help="show a job")
    st.add_argument("id")
    st.add_argument("--json", action="store_true")
    jb = sub.add_parser("jobs", help="list recent jobs")
    jb.add_argument("--limit", type=int, default=20)
    cn = sub.add_parser("cancel", help="cancel a job")
    cn.add_argument("id")

    ca = sub.add_parser("calibrate", help="measure whole steps on a machine type and fit its model")
    ca.add_argument("--machine", dest="machine_type", required=True)
    ca.add_argument("--set", choices=["default", "full"], default="default", help="CNN set (full: 29 CNNs)")
    ca.add_argument("--cnns", action="append", default=None, help="CNN names instead of a set")
    ca.add_argument(
        "--image-size", default=None,
        help="image size(s), comma-separated; with neither this nor --batch-sizes: the machine type's spread "
        "(a CPU: 64 px at batch 8,32, 112 px at 4,16, 160 px at 2)",
    )  # fmt: skip
    ca.add_argument(
        "--batch-sizes", default=None, help="8,16,32 or 1-64 or 1-64:8, at every --image-size (default 4,8)"
    )
    ca.add_argument("--timeout", type=float, default=1800)
    add_training_flags(ca)
    ca.add_argument(
        "--configs", action="append", default=None,
        help="several training configurations in one calibration, a model each: comma-separated or repeated "
        "optimizer[+momentum][+wd][/precision][/channels_last][/cudnn_benchmark], "
        "e.g. sgd,sgd+momentum,adamw,sgd/amp_bf16 "
        "(instead of --optimizer/--momentum/--weight-decay; --precision is the default precision)",
    )  # fmt: skip
    ag = sub.add_parser("agents", help="list benchmark agents and what they are doing")
    ag.add_argument("--machine", dest="machine_type", default=None)
    ag.add_argument("--json", action="store_true")
    tr = sub.add_parser("train", help="fit a model from stored measurements")
    tr.add_argument("--machine", dest="machine_type", required=True)
    tr.add_argument(
        "--pool", action=argparse.BooleanOptionalAction, default=None,
        help="learn from every machine type's steps (default: when this type has steps of fewer than 5 CNNs)",
    )  # fmt: skip
    add_training_flags(tr)
    sub.add_parser("migrate", help="apply database migrations")
    sub.add_parser(
        "db-logins",
        help="create or update a PostgreSQL login per process kind (API_DB_PASSWORD, WORKER_DB_PASSWORD, "
        "FLEET_DB_PASSWORD, AGENT_DB_PASSWORD with AGENT_DB_MACHINE_TYPES); as the owner, after migrate",
    )
    fleet.add_parser(sub)
    machines.add_parser(sub)
    catalog.add_parser(sub)
    keys.add_parser(sub)
    measurements.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point: every failure is one line on stderr and exit status 1."""
    from shared.core import logs
    from shared.core.errors import TraincastError

    # Warnings and errors of the modules operator commands run (calibrate, train, migrate) as the other processes'.
    logs.setup("cli", level="WARNING")
    args = build_parser().parse_args(argv)
    api = Api(args.api_url)
    try:
        if args.command == "predict":
            return cmd_predict(api, args)
        if args.command == "cnns":
            return cmd_cnns(api, args)
        handlers = {"status": cmd_status, "jobs": cmd_jobs, "cancel": cmd_cancel, "agents": cmd_agents}
        if args.command in handlers:
            return handlers[args.command](api, args)
        if args.command == "fleet":
            return fleet.run(api, args)
        if args.command == "machines":
            return machines.run(api, args)
        if args.command == "catalog":
            return catalog.run(args)
        if args.command == "keys":
            return keys.run(args)
        if args.command == "measurements":
            return measurements.run(args)
        admin = {"calibrate": cmd_calibrate, "train": cmd_train, "migrate": cmd_migrate, "db-logins": cmd_db_logins}
        return admin[args.command](args)
    except (CliError, TraincastError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `traincast machines list | head`: the reader has gone; say nothing more, as cat and ls do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
        return 141


if __name__ == "__main__":
    sys.exit(main())

"""`traincast calibrate`, `train`, `migrate` and `db-logins`: operator commands that talk to the database and the
broker directly, not to the API."""

import argparse
import sys
from typing import TYPE_CHECKING, Any

from cli import flags, render
from cli.client import CliError
from cli.jobs import batch_size_list, split_values

if TYPE_CHECKING:  # the CLI loads the worker only for the commands that train
    from worker.predictor import PredictorModel


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
    configs = tuple(calibrate.config_from_key(k, args.precision) for k in split_values(args.configs or []))
    return calibrate.Plan(
        machine_type=args.machine_type,
        cnns=tuple(split_values(args.cnns)) if args.cnns else calibrate.SETS[args.set],
        config=flags.training_of(args),
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


def cmd_train(args: argparse.Namespace) -> int:
    """Fit a model from the stored measurements (talks to the database)."""
    from worker import predictor

    _print_model(predictor.train(machine_type=args.machine_type, pool=args.pool, config=flags.training_of(args)))
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


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `calibrate`, `train`, `migrate` and `db-logins` to the command-line grammar."""
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
    flags.add_training_flags(ca)
    ca.add_argument(
        "--configs", action="append", default=None,
        help="several training configurations in one calibration, a model each: comma-separated or repeated "
        "optimizer[+momentum][+wd][/precision][/channels_last][/cudnn_benchmark], "
        "e.g. sgd,sgd+momentum,adamw,sgd/amp_bf16 "
        "(instead of --optimizer/--momentum/--weight-decay; --precision is the default precision)",
    )  # fmt: skip
    tr = sub.add_parser("train", help="fit a model from stored measurements")
    tr.add_argument("--machine", dest="machine_type", required=True)
    tr.add_argument(
        "--pool", action=argparse.BooleanOptionalAction, default=None,
        help="learn from every machine type's steps (default: when this type has steps of fewer than 5 CNNs)",
    )  # fmt: skip
    flags.add_training_flags(tr)
    sub.add_parser("migrate", help="apply database migrations")
    sub.add_parser(
        "db-logins",
        help="create or update a PostgreSQL login per process kind (API_DB_PASSWORD, WORKER_DB_PASSWORD, "
        "FLEET_DB_PASSWORD, AGENT_DB_PASSWORD with AGENT_DB_MACHINE_TYPES); as the owner, after migrate",
    )


COMMANDS = {"calibrate": cmd_calibrate, "train": cmd_train, "migrate": cmd_migrate, "db-logins": cmd_db_logins}


def run(args: argparse.Namespace) -> int:
    """Run one of this module's COMMANDS."""
    return COMMANDS[args.command](args)

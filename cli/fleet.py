"""`traincast fleet status | scale TYPE N|auto | drain TYPE` (over HTTP, like `agents`)."""

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from cli import fleet_aws, fleet_publish, render
from cli.client import Api, CliError


def add_parser(sub: Any) -> None:
    """Add the `fleet` command and its sub-commands."""
    fl = sub.add_parser("fleet", help="the self-hosted AWS fleet: status, scale, drain")
    fsub = fl.add_subparsers(dest="fleet_command", required=True)
    st = fsub.add_parser("status", help="instances, what each type wants and why, spend rate, recent events")
    st.add_argument("--json", action="store_true")
    sc = fsub.add_parser("scale", help="hold a machine type at N agents ('auto': follow the work again)")
    sc.add_argument("machine_type")
    sc.add_argument("count", help="a number, or auto")
    dr = fsub.add_parser("drain", help="terminate a type's instances now and hold it at 0")
    dr.add_argument("machine_type")
    fleet_aws.register(fsub)
    fleet_publish.register(fsub)


def run(api: Api, args: argparse.Namespace) -> int:
    """Dispatch a `fleet` sub-command."""
    if (code := fleet_aws.run(args)) is not None:
        return code
    if (code := fleet_publish.run(args)) is not None:
        return code
    if args.fleet_command == "status":
        return _status(api, as_json=args.json)
    if args.fleet_command == "scale":
        held = _count(args.count)
        row = api.call("PUT", f"/v1/fleet/{args.machine_type}", json={"held": held})
        print(f"{row['machine_type']}: " + ("automatic" if row["held"] is None else f"held at {row['held']}"))
        return 0
    row = api.call("POST", f"/v1/fleet/{args.machine_type}/drain")
    print(f"{row['machine_type']}: draining (instances terminate on the next pass), held at 0")
    return 0


def _count(text: str) -> int | None:
    if text == "auto":
        return None
    if text.isdigit():
        return int(text)
    raise CliError(f"count {text!r}: give a number of agents (0 or more) or 'auto'")


def _status(api: Api, *, as_json: bool) -> int:
    fleet = api.call("GET", "/v1/fleet")
    if as_json:
        print(json.dumps(fleet, indent=2))
        return 0
    lim = fleet["limits"]
    print(
        f"fleet {fleet['fleet']} in {fleet['region']}: {'enabled' if fleet['enabled'] else 'DISABLED'}; "
        f"${fleet['usd_per_hour']:.2f}/h of ${lim['max_usd_per_hour']:.2f}/h, at most {lim['max_per_type']} per type"
    )
    types = [
        [
            t["machine_type"],
            "drain" if t["drain"] else ("auto" if t["held"] is None else f"held {t['held']}"),
            str(t["wanted"]),
            str(sum(1 for i in fleet["instances"] if i["machine_type"] == t["machine_type"])),
            str(t["queued_tasks"]),
            str(t["waiting_jobs"]),
            _paused(t),
            t["note"] or "",
        ]
        for t in fleet["types"]
    ]
    if types:
        print(render.table(types, ["machine", "mode", "wanted", "running", "queued", "jobs", "paused", "note"]))
    for t in fleet["types"]:
        if t.get("paused_until") and t.get("pause_reason"):
            print(f"{t['machine_type']} paused: {t['pause_reason']}")
    inst = [
        [
            i["instance_id"],
            i["machine_type"],
            i["market"],
            f"${i['price_usd_per_hour']:.2f}/h",
            i["launched_at"][:19],
            "alive" if i["agent_alive"] else "no heartbeat",
        ]
        for i in fleet["instances"]
    ]
    headers = ["instance", "machine", "market", "at most", "launched", "agent"]
    print(render.table(inst, headers) if inst else "no instances")
    for e in fleet["events"][:10]:
        print(f"{e['at'][:19]} {e['machine_type']} {e['action']} {e['instance_id'] or ''} {_one_line(e['detail'])}")
    return 0


# Why a type is paused, in a word (the full reason follows the table).
PAUSE_KINDS = {"capacity": "capacity", "quota": "quota", "refused": "refused", "early_deaths": "early deaths"}


def _paused(t: dict[str, Any]) -> str:
    """'until 14:05 UTC (quota, 3 in a row)' while a type's launches are paused, else ''."""
    if not t.get("paused_until"):
        return ""
    kind = t.get("pause_kind") or ""
    # A capacity pause is a fixed wait, not a failure in a row.
    count = {"early_deaths": t.get("early_deaths"), "quota": t.get("failures"), "refused": t.get("failures")}.get(kind)
    why = PAUSE_KINDS.get(kind, kind) + (f", {count} in a row" if count else "")
    until = datetime.fromisoformat(t["paused_until"]).astimezone(UTC)
    return f"until {until:%H:%M} UTC ({why})"


def _one_line(detail: str) -> str:
    """An event's detail on one line: console output keeps its last line here (--json has all)."""
    lines = detail.strip().splitlines() or [""]
    return lines[-1] + (f"  [{len(lines)} lines; --json shows all]" if len(lines) > 1 else "")

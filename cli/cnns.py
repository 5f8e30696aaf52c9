"""`traincast cnns`: the CNNs a job may name; add or delete your own (over HTTP)."""

import argparse
import sys
from pathlib import Path

from cli import render
from cli.client import Api, CliError, dumps


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `cnns` with its sub-commands `add` and `delete` to the command-line grammar."""
    cn = sub.add_parser("cnns", help="the CNNs a job may name (built-in and registered); add or delete your own")
    cn.add_argument("--json", action="store_true")
    cs = cn.add_subparsers(dest="cnns_command")
    ad = cs.add_parser("add", help="register your own CNN: an ONNX model or a JSON layer list (nothing in it is run)")
    ad.add_argument("name", help="1-64 letters, digits, '_', '.' or '-'")
    ad.add_argument("file", help="the .onnx file, or the JSON layer list (docs/API.md, 'Your own CNN')")
    dl = cs.add_parser("delete", help="delete a CNN you registered")
    dl.add_argument("name")


def run(api: Api, args: argparse.Namespace) -> int:
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

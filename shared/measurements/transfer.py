"""Export and import measurement bundles (the format: shared/measurements/bundle.py, docs/BUNDLES.md)."""

import gzip
import json
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, Any

from pydantic import ValidationError

from shared import machine_types as machines
from shared.cnn import registry as cnns
from shared.core.db import jsonable, transaction
from shared.core.errors import InvalidRequest, NotFound, PayloadTooLarge
from shared.measurements import environments, layers, ops
from shared.measurements.bundle import (
    FORMAT,
    KEYS,
    MAX_BYTES,
    MAX_COMPRESSED_BYTES,
    MAX_LINE_BYTES,
    MAX_ROWS,
    OWNERS,
    RECORD,
    ROW_KINDS,
    VERSION,
    Bundle,
    ConvSignatureLine,
    End,
    Environment,
    Header,
    ImportReport,
    MachineRecord,
    OpSignatureLine,
)  # fmt: skip

# How each kind of row names its signature in its table (the bundle says "signature", by hash).
SIGNATURE_COLUMN = {"layer": "signature_id", "op": "op_signature_id"}


def export(*, machine_types: list[str], out: IO[bytes], source: str = "") -> dict[str, int]:
    """Write the rows of these machine types, with what they name, as a bundle; the count of each kind."""
    names = sorted(set(machine_types))
    infos = machines.by_names(names=names)
    if missing := [n for n in names if n not in infos]:
        raise NotFound(f"unknown machine type {', '.join(map(repr, missing))}", machine_types=missing)
    with transaction() as cur:
        rows = {kind: OWNERS[kind].export_rows(cur, machine_types=names) for kind in ROW_KINDS}
        env_ids = [r["environment_id"] for kind in ROW_KINDS for r in rows[kind]]
        envs = environments.rows(cur, ids=env_ids)
        convs = layers.signature_rows(cur, ids=[r["signature_id"] for r in rows["layer"]])
        op_sigs = ops.signature_rows(cur, ids=[r["op_signature_id"] for r in rows["op"]])
    env_hash = {e["id"]: e["hash"] for e in envs}
    sig_hash = {"layer": {c["id"]: c["hash"] for c in convs}, "op": {o["id"]: o["hash"] for o in op_sigs}}
    header = Header(
        kind="header", format="traincast-measurements", version=VERSION, exported_at=datetime.now(UTC),
        source=source[:200], machine_types=[MachineRecord(name=n, figures=jsonable(infos[n])) for n in names],
    )  # fmt: skip
    body: list[dict[str, Any]] = [{"kind": "environment", "hash": e["hash"], "details": e["details"]} for e in envs]
    body += [{"kind": "conv_signature", "hash": c["hash"], "spec": c["spec"]} for c in convs]
    body += [{"kind": "op_signature", "hash": o["hash"], "op": o["op"], "spec": o["spec"]} for o in op_sigs]
    for kind in ROW_KINDS:
        for r in rows[kind]:
            env = env_hash[r.pop("environment_id")]
            line = {"kind": kind, **r, "environment": env}
            if kind in SIGNATURE_COLUMN:
                line["signature"] = sig_hash[kind][line.pop(SIGNATURE_COLUMN[kind])]
            body.append(line)
    # mtime 0: the same rows give the same bytes, whenever exported.
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(header.model_dump_json().encode() + b"\n")
        for line in body:
            gz.write(json.dumps(line, sort_keys=True, separators=(",", ":")).encode() + b"\n")
        gz.write(End(kind="end", lines=len(body)).model_dump_json().encode() + b"\n")
    counts = {kind: len(rows[kind]) for kind in ROW_KINDS}
    return counts | {"environment": len(envs), "conv_signature": len(convs), "op_signature": len(op_sigs)}


class _Counted:
    """A byte stream that refuses to be read past a limit (the compressed size of an upload)."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        self.raw, self.limit, self.read_bytes = raw, limit, 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            raise PayloadTooLarge(f"bundle larger than {self.limit // 2**20} MiB compressed")
        return data


def _lines(raw: IO[bytes], max_compressed: int) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a gzip stream, within the size bounds; a cut or foreign file is a clear error."""
    total = 0
    try:
        with gzip.GzipFile(fileobj=_Counted(raw, max_compressed), mode="rb") as gz:  # type: ignore[call-overload]
            number = 0
            while line := gz.readline(MAX_LINE_BYTES + 1):
                number += 1
                total += len(line)
                if len(line) > MAX_LINE_BYTES:
                    raise InvalidRequest(f"line {number}: longer than {MAX_LINE_BYTES // 1024} KiB")
                if total > MAX_BYTES:
                    raise PayloadTooLarge(f"bundle larger than {MAX_BYTES // 2**30} GiB uncompressed")
                if not line.endswith(b"\n"):
                    raise InvalidRequest(f"the bundle is cut short: line {number} ends without a newline")
                yield number, line
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise InvalidRequest(f"not a gzip-compressed bundle ({exc})") from None
    except EOFError:
        raise InvalidRequest("the bundle is cut short: its compressed stream ends before its end") from None


def _header(number: int, line: bytes) -> Header:
    """The first line, its format and version checked before anything else is read."""
    try:
        first = json.loads(line)
    except ValueError:
        first = None
    if not isinstance(first, dict) or first.get("format") != FORMAT:
        raise InvalidRequest(f"line {number}: not a Traincast measurement bundle (its first line names no {FORMAT!r})")
    if first.get("version") != VERSION:
        raise InvalidRequest(
            f"bundle format version {first.get('version')!r}; this Traincast reads version {VERSION}: export it "
            "with a Traincast of this version"
        )
    try:
        return Header.model_validate_json(line)
    except ValidationError as exc:
        raise InvalidRequest(f"line {number}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else err["msg"]


def read(raw: IO[bytes], *, max_lines: int | None = None, max_compressed: int | None = None) -> Bundle:
    """A bundle read and checked whole (hashes, references, duplicates) before anything is stored; the limits
    default to MAX_ROWS and MAX_COMPRESSED_BYTES (the API's are lower: the whole bundle is held while checked)."""
    max_lines = MAX_ROWS if max_lines is None else max_lines
    max_compressed = MAX_COMPRESSED_BYTES if max_compressed is None else max_compressed
    header: Header | None = None
    end: End | None = None
    envs: dict[str, Environment] = {}
    convs: dict[str, ConvSignatureLine] = {}
    op_sigs: dict[str, OpSignatureLine] = {}
    rows: dict[str, list[Any]] = {kind: [] for kind in ROW_KINDS}
    seen: dict[str, set[tuple[Any, ...]]] = {kind: set() for kind in ROW_KINDS}
    count = 0
    for number, line in _lines(raw, max_compressed):
        if header is None:
            header = _header(number, line)
            continue
        if end is not None:
            raise InvalidRequest(f"line {number}: lines after the end line")
        count += 1
        if count > max_lines:
            raise PayloadTooLarge(
                f"bundle of more than {max_lines:,} lines (`traincast measurements import` takes up to {MAX_ROWS:,})"
            )
        try:
            record = RECORD.validate_json(line)
            if isinstance(record, ConvSignatureLine | OpSignatureLine):
                record.signature()
        except ValidationError as exc:
            raise InvalidRequest(f"line {number}: {_first_error(exc)}") from None
        except ValueError as exc:
            raise InvalidRequest(f"line {number}: {exc}") from None
        if isinstance(record, End):
            end, count = record, count - 1
        elif isinstance(record, Environment):
            envs[record.hash] = record
        elif isinstance(record, ConvSignatureLine):
            convs[record.hash] = record
        elif isinstance(record, OpSignatureLine):
            op_sigs[record.hash] = record
        else:
            _check_row(number, record, envs, convs if record.kind == "layer" else op_sigs, seen[record.kind])
            rows[record.kind].append(record)
    if header is None:
        raise InvalidRequest("the bundle is empty")
    if end is None or end.lines != count:
        raise InvalidRequest(f"the bundle is cut short: {count} lines after the header and no end line counting them")
    return Bundle(
        header=header, environments=list(envs.values()), conv_signatures=list(convs.values()),
        op_signatures=list(op_sigs.values()), rows=rows,
    )  # fmt: skip


def _check_row(number: int, row: Any, envs: dict[str, Any], sigs: dict[str, Any], seen: set[tuple[Any, ...]]) -> None:
    """A row names an environment (and signature) given above it, and a key no other row of its kind has."""
    if row.environment not in envs:
        raise InvalidRequest(f"line {number}: environment {row.environment} is not given before it")
    if row.kind in SIGNATURE_COLUMN and row.signature not in sigs:
        raise InvalidRequest(f"line {number}: {row.kind} signature {row.signature} is not given before it")
    key = tuple(getattr(row, f) for f in KEYS[row.kind])
    if key in seen:
        raise InvalidRequest(f"line {number}: a second {row.kind} row for the same measurement (duplicate)")
    seen.add(key)


def renames(pairs: list[str], *, flag: str) -> dict[str, str]:
    """OLD=NEW pairs (the CLI's --as, the API's ?as=) as a mapping; one clear error for a malformed one."""
    out = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise InvalidRequest(f"{flag} {pair!r}: give OLD=NEW, e.g. {flag} local=lab-a100")
        out[old] = new
    return out


def load(*, bundle: Bundle, rename: dict[str, str] | None = None, owner: str | None = None) -> ImportReport:
    """Store a checked bundle's rows here in one transaction, each once; under other machine type names if asked."""
    rename = rename or {}
    present = bundle.machine_types
    if stray := sorted(set(rename) - set(present)):
        raise InvalidRequest(f"the bundle has no rows of {', '.join(map(repr, stray))} to import under another name")
    if "local" in present and "local" not in rename:
        raise InvalidRequest(
            "the bundle's 'local' rows were measured on the exporting installation's own machine, not this one: "
            "import them under a machine type of their own (--as local=NAME; register NAME first with "
            "`traincast machines add`, using the figures in the bundle's header)"
        )
    target = {m: rename.get(m, m) for m in present}
    if "local" in target.values():
        raise InvalidRequest("'local' is this installation's own machine: measurements of another are never its own")
    if unknown := machines.missing(names=sorted(set(target.values())), owner=owner):
        raise InvalidRequest(
            f"unknown machine type {', '.join(map(repr, unknown))} here: register it first (`traincast machines add`, "
            "POST /v1/machines; the bundle's header has its figures), or import under a known name with --as OLD=NEW",
            machine_types=unknown,
        )
    cnn_names = sorted({r.cnn_name for r in bundle.rows["step"]})
    if unknown_cnns := cnns.unknown(names=cnn_names):
        raise InvalidRequest(
            f"whole steps of CNNs unknown here: {', '.join(unknown_cnns)}; register them first (POST /v1/cnns)",
            cnns=unknown_cnns,
        )
    stored: dict[str, int] = {}
    with transaction() as cur:
        env_ids = {e.hash: environments.ensure(cur, details=e.details) for e in bundle.environments}
        sig_ids = {
            "layer": layers.ensure_signatures(cur, signatures=[c.signature() for c in bundle.conv_signatures]),
            "op": ops.ensure_signatures(cur, signatures=[o.signature() for o in bundle.op_signatures]),
        }
        for name in cnn_names:
            cnns.ensure_row(cur, name=name)
        for kind in ROW_KINDS:
            mapped = []
            for row in bundle.rows[kind]:
                values = row.model_dump(exclude={"kind", "environment", "signature"})
                values |= {"machine_type": target[row.machine_type], "environment_id": env_ids[row.environment]}
                if kind in SIGNATURE_COLUMN:
                    values[SIGNATURE_COLUMN[kind]] = sig_ids[kind][row.signature]
                mapped.append(values)
            stored[kind] = OWNERS[kind].import_rows(cur, rows=mapped)
    return ImportReport(
        machine_types=sorted(set(target.values())), stored=stored,
        already={kind: len(bundle.rows[kind]) - stored[kind] for kind in ROW_KINDS},
        renamed={k: v for k, v in target.items() if k != v},
    )  # fmt: skip

"""Measurement bundles read: every line checked before anything is stored; hostile files get one clear error."""

import gzip
import io
import json
from typing import Any

import pytest

from shared.cnn.op_signatures import OpSignature
from shared.cnn.signatures import ConvSignature
from shared.core.errors import InvalidRequest, PayloadTooLarge
from shared.measurements import bundle, environments, transfer

DETAILS = {"device": "cpu", "torch": "2.14.1", "host": "lab-1"}
CONV = ConvSignature(3, 8, 32, 32, (3, 3), (1, 1), (1, 1), (1, 1), 1, False, False, (0, 0), "float32")
OP = OpSignature.of("relu", (8, 32, 32))


def lines(**changes: Any) -> list[dict[str, Any]]:
    """A small valid bundle's lines (header first, end last), with one row of a kind changed if asked."""
    env = environments.digest(DETAILS)
    body: list[dict[str, Any]] = [
        {"kind": "environment", "hash": env, "details": DETAILS},
        {"kind": "conv_signature", "hash": CONV.hash, "spec": CONV.to_json()},
        {"kind": "op_signature", "hash": OP.hash, "op": OP.op, "spec": OP.to_json()},
        {"kind": "layer", "signature": CONV.hash, "machine_type": "g4dn.xlarge", "batch_size": 8, "precision": "fp32",
         "channels_last": False, "environment": env, "oom": False, "forward_ms": 1.5, "backward_data_ms": 2.0,
         "backward_weight_ms": 2.5, "stats": {"forward": {"runs": 10}}, "measured_at": "2026-11-27T08:00:00+00:00"},
        {"kind": "op", "signature": OP.hash, "machine_type": "g4dn.xlarge", "batch_size": 8, "variant": "fp32",
         "environment": env, "oom": False, "forward_ms": 0.1, "backward_ms": 0.2, "stats": {},
         "measured_at": "2026-11-27T08:00:01+00:00"},
    ]  # fmt: skip
    for i, line in enumerate(body):
        if line["kind"] in changes:
            body[i] = {**line, **changes[line["kind"]]}
    header = {"kind": "header", "format": bundle.FORMAT, "version": bundle.VERSION, "source": "lab-1",
              "exported_at": "2026-11-27T09:00:00+00:00", "machine_types": []}  # fmt: skip
    return [header, *body, {"kind": "end", "lines": len(body)}]


def packed(rows: list[dict[str, Any]], raw: list[bytes] | None = None) -> io.BytesIO:
    """The lines gzip-compressed as an export writes them (raw lines appended before the end line if given)."""
    text = [json.dumps(r).encode() for r in rows]
    if raw:
        text[-1:-1] = raw
    return io.BytesIO(gzip.compress(b"\n".join(text) + b"\n"))


def test_a_valid_bundle_is_read_with_its_rows_by_kind() -> None:
    """The hand-made bundle reads back: its machine types, environments, signatures and rows."""
    read = transfer.read(packed(lines()))
    assert read.machine_types == ["g4dn.xlarge"]
    assert [e.details for e in read.environments] == [DETAILS]
    assert [c.signature() for c in read.conv_signatures] == [CONV]
    assert [r.forward_ms for r in read.rows["layer"]] == [1.5] and len(read.rows["op"]) == 1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: io.BytesIO(b"layer,1.5\n"), "not a gzip-compressed bundle"),
        (lambda: io.BytesIO(gzip.compress(b"\n".join(json.dumps(r).encode() for r in lines())[:-300])), "cut short"),
        (lambda: io.BytesIO(packed(lines()).getvalue()[:-40]), "cut short"),
        (lambda: packed([{**lines()[0], "version": 2}, *lines()[1:]]), "version 2; this Traincast reads version 1"),
        (lambda: packed([{"kind": "header", "format": "csv"}]), "not a Traincast measurement bundle"),
        (lambda: packed(lines(layer={"forward_ms": float("nan")})), "forward_ms"),
        (lambda: packed(lines(op={"stats": {"spread": float("inf")}})), "NaN or infinity"),
        (lambda: packed(lines(layer={"forward_ms": None})), "needs forward_ms"),
        (lambda: packed(lines(layer={"batch_size": -1})), "batch_size"),
        (lambda: packed(lines(layer={"code": "__import__('os')"})), "Extra inputs are not permitted"),
        (lambda: packed(lines(environment={"details": {"device": "cuda"}})), "not that of its details"),
        (lambda: packed(lines(conv_signature={"spec": {**CONV.to_json(), "groups": 2}})), "not that of its spec"),
        (lambda: packed(lines(layer={"environment": "0" * 32})), "is not given before it"),
        (lambda: packed(lines(), raw=[json.dumps(lines()[4]).encode()]), "duplicate"),
        (lambda: packed(lines(), raw=[b'{"kind": "layer", "x": "' + b"a" * (300 * 1024) + b'"}']), "longer than"),
    ],
    ids=[
        "not-gzip",
        "truncated-lines",
        "truncated-gzip",
        "version",
        "foreign",
        "nan",
        "inf-in-stats",
        "missing-timing",
        "negative-batch",
        "unknown-field",
        "env-hash",
        "sig-hash",
        "dangling",
        "duplicate",
        "long-line",
    ],
)
def test_hostile_bundles_get_one_clear_error(make: Any, message: str) -> None:
    """Each hostile file is refused while read, saying what is wrong (and where), before anything is stored."""
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(")):
        transfer.read(make())


def test_a_bundle_over_the_compressed_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compressed size is bounded while reading (a gzip bomb's output too: MAX_BYTES)."""
    monkeypatch.setattr(transfer, "MAX_COMPRESSED_BYTES", 200)
    with pytest.raises(PayloadTooLarge, match="compressed"):
        transfer.read(packed(lines()))
    monkeypatch.setattr(transfer, "MAX_COMPRESSED_BYTES", 2**20)
    monkeypatch.setattr(transfer, "MAX_BYTES", 1000)
    with pytest.raises(PayloadTooLarge, match="uncompressed"):
        transfer.read(packed(lines()))


def test_a_caller_may_lower_the_line_limit() -> None:
    """The API holds a bundle whole while it checks it: it reads with a lower line limit, and says so."""
    with pytest.raises(PayloadTooLarge, match="more than 4 lines"):
        transfer.read(packed(lines()), max_lines=4)
    assert len(transfer.read(packed(lines()), max_lines=6).rows["op"]) == 1

"""The COPY rows of a result's points (shared/jobs/predictions.py): rendered as PostgreSQL reads them."""

import struct
import uuid

import orjson

from shared.jobs import predictions


def rows(points: list[dict[str, object]], job_id: uuid.UUID, size: int) -> bytes:
    """Everything the reader gives, read `size` bytes at a time until it is empty."""
    reader = predictions._CopyRows(job_id.bytes, predictions.render(points))
    out = bytearray()
    while chunk := reader.read(size):
        assert len(chunk) <= size
        out += chunk
    return bytes(out)


def test_rows_are_binary_copy_of_each_part_whatever_the_read_size() -> None:
    """Header, one row per part of PART_POINTS points (job id, part, first, points, body), trailer: the same bytes
    read whole or a few at a time."""
    job_id = uuid.uuid4()
    points: list[dict[str, object]] = [{"batch_size": i, "total_seconds": i / 7} for i in range(600)]
    whole = rows(points, job_id, 1 << 20)
    assert rows(points, job_id, 7) == whole
    assert whole.startswith(b"PGCOPY\n\xff\r\n\x00") and whole.endswith(struct.pack("!h", -1))
    at, parts = 19, []  # after the 11-byte signature and two int32s
    while whole[at : at + 2] != struct.pack("!h", -1):
        count, _, job, _, part, _, first, _, n, size = struct.unpack_from("!hi16siiiiiii", whole, at)
        at += struct.calcsize("!hi16siiiiiii")
        assert count == 5 and job == job_id.bytes
        parts.append((part, first, n, orjson.loads(b"[" + whole[at : at + size] + b"]")))
        at += size
    assert [(p, f, n) for p, f, n, _ in parts] == [(0, 0, 256), (1, 256, 256), (2, 512, 88)]
    assert [x for *_, body in parts for x in body] == points


def test_no_points_read_as_nothing_but_header_and_trailer() -> None:
    """An empty result: store sends no COPY; the reader itself gives a valid empty COPY stream."""
    assert rows([], uuid.uuid4(), 1 << 20) == b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0) + struct.pack("!h", -1)

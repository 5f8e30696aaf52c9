"""The `job_predictions` table: a succeeded job's points, stored apart from its row as parts of JSON text.

The worker renders each part once (orjson) and writes it in the transaction that finishes the job; GET splices
the parts into its answer without parsing them, and a page needs only the parts it overlaps, of which only the two
at its ends are parsed and cut.
"""

import io
import json
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg2.extensions

from shared.core.db import Cursor, one, transaction

# Points per part: a page's two end parts are parsed (a few ms each); the whole set is ~250 rows for 63,488 points.
PART_POINTS = 256

# COPY's binary format: each value length-prefixed, so PostgreSQL never scans the ~40 MB of a large job's JSON for
# escapes (0.17 s → 0.12 s for 63,488 points against the text format).
COPY_PARTS = "COPY job_predictions (job_id, part, first, points, body) FROM STDIN (FORMAT binary)"
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)  # signature, flags, no header extension
# A row: 5 columns; uuid (16 bytes), three int4s, then the body's length (its bytes follow).
_COPY_ROW = struct.Struct("!hi16siiiiiii")
_COPY_TRAILER = struct.pack("!h", -1)
SELECT_TOTAL = "SELECT COALESCE(sum(points), 0) AS total FROM job_predictions WHERE job_id = %s"
# A page's parts without their bodies (those overlapping [start, end); all of them when end is NULL): where each
# starts and how long its text is. A page past the end is empty, however far: the bound is a bigint.
SELECT_EXTENT = """
SELECT part, first, points, octet_length(body) AS size FROM job_predictions
WHERE job_id = %(id)s AND first + points > %(start)s AND (%(end)s::bigint IS NULL OR first < %(end)s)
ORDER BY part"""
SELECT_BODIES = """
SELECT part, body FROM job_predictions WHERE job_id = %(id)s AND part >= %(from)s AND part <= %(to)s ORDER BY part"""
# Parts read per query while an answer streams: ~256 points each, a few MB in memory at once whatever the result.
STREAM_PARTS = 16


def render(points: list[dict[str, Any]]) -> Iterator[tuple[int, int, bytes]]:
    """(first index, points, body) of each part of a result's points, rendered to JSON (UTF-8 bytes) as asked."""
    for first in range(0, len(points), PART_POINTS):
        chunk = points[first : first + PART_POINTS]
        yield first, len(chunk), orjson.dumps(chunk, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]


def store(*, cur: Cursor, job_id: uuid.UUID, points: list[dict[str, Any]]) -> None:
    """Write a finishing job's points (in the caller's transaction, the one that marks it succeeded)."""
    if points:
        # Rendered as PostgreSQL reads: it compresses and writes the parts on another core while the rest render.
        cur.copy_expert(COPY_PARTS, _CopyRows(uuid.UUID(str(job_id)).bytes, render(points)), size=1 << 20)


class _CopyRows(io.RawIOBase):
    """COPY's binary rows of a result's parts, rendered as they are read (a file for copy_expert)."""

    def __init__(self, job_id: bytes, parts: Iterator[tuple[int, int, bytes]]) -> None:
        super().__init__()
        self._rows = self._encode(job_id, parts)
        self._pending = b""

    @staticmethod
    def _encode(job_id: bytes, parts: Iterator[tuple[int, int, bytes]]) -> Iterator[bytes]:
        yield _COPY_HEADER
        for part, (first, n, body) in enumerate(parts):
            yield _COPY_ROW.pack(5, 16, job_id, 4, part, 4, first, 4, n, len(body)) + body
        yield _COPY_TRAILER

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        """The next rendered row (or the rest of one), at most `size` bytes when size is given."""
        if not self._pending:
            self._pending = next(self._rows, b"")
        if size is None or size < 0 or size >= len(self._pending):
            out, self._pending = self._pending, b""
        else:
            out, self._pending = self._pending[:size], self._pending[size:]
        return out


def chunks(*, job_id: uuid.UUID, offset: int = 0, limit: int | None = None) -> tuple[list[bytes], int]:
    """predictions[offset:offset + limit] (all when limit is None) as a JSON array's UTF-8 bytes, in chunks whose
    concatenation is the array, and how many points there are: a Stream read whole."""
    stream = Stream(job_id=job_id, offset=offset, limit=limit)
    return list(stream), stream.total


def _cut(first: int, n: int, offset: int, end: int | None) -> bool:
    """Whether the page [offset, end) takes only some of the part's points [first, first + n)."""
    return first < offset or (end is not None and first + n > end)


def _page_of(first: int, n: int, body: bytes, offset: int, end: int | None) -> bytes:
    """The page's points of a part as JSON array members: the part as stored when the page takes it whole, else it
    parsed and cut (b"" when none of it is on the page)."""
    if not _cut(first, n, offset, end):
        return body
    cut = json.loads(b"[" + body + b"]")[max(0, offset - first) : None if end is None else end - first]
    return orjson.dumps(cut)[1:-1] if cut else b""


class Stream:
    """predictions[offset:offset + limit] as a JSON array whose byte length is known before a byte is read: the
    page's cut end parts are read and cut at once, the whole parts between them are read STREAM_PARTS at a time
    as the answer is sent (a succeeded job's parts never change, so each read may be a transaction of its own)."""

    def __init__(self, *, job_id: uuid.UUID, offset: int = 0, limit: int | None = None) -> None:
        end = offset + limit if limit is not None else None
        self.job_id = job_id
        with transaction() as cur:
            psycopg2.extensions.register_type(psycopg2.extensions.BYTES, cur)
            cur.execute(SELECT_EXTENT, {"id": job_id, "start": offset, "end": end})
            extent = cur.fetchall()
            cur.execute(SELECT_TOTAL, (job_id,))
            self.total = int(one(cur)["total"])
            # The page's end parts (two at most) are read now and cut: their length must be known before sending.
            edges = [r["part"] for r in extent if _cut(r["first"], r["points"], offset, end)]
            bodies: dict[int, bytes] = {}
            for part in edges:
                cur.execute(SELECT_BODIES, {"id": job_id, "from": part, "to": part})
                bodies[part] = one(cur)["body"]
        # (part, bytes or None: read as it streams, its size)
        self.pieces: list[tuple[int, bytes | None, int]] = []
        for row in extent:
            if row["part"] in bodies:
                cut = _page_of(row["first"], row["points"], bodies[row["part"]], offset, end)
                if cut:
                    self.pieces.append((row["part"], cut, len(cut)))
            else:
                self.pieces.append((row["part"], None, int(row["size"])))
        self.length = 2 + sum(size for _, _, size in self.pieces) + max(0, len(self.pieces) - 1)

    def __iter__(self) -> Iterator[bytes]:
        yield b"["
        for start in range(0, len(self.pieces), STREAM_PARTS):
            batch = self.pieces[start : start + STREAM_PARTS]
            lazy = [part for part, body, _ in batch if body is None]
            read: dict[int, bytes] = {}
            if lazy:
                with transaction() as cur:
                    psycopg2.extensions.register_type(psycopg2.extensions.BYTES, cur)
                    cur.execute(SELECT_BODIES, {"id": self.job_id, "from": min(lazy), "to": max(lazy)})
                    read = {r["part"]: r["body"] for r in cur.fetchall()}
            # One chunk per batch (~4 MB): each chunk is a trip through the event loop that answers /healthz too.
            joined = b",".join(body if body is not None else read[part] for part, body, _ in batch)
            yield (b"," + joined) if start else joined
        yield b"]"


def points(*, job_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every point of a succeeded job, parsed (in-process readers; HTTP answers splice the bytes instead)."""
    out: list[dict[str, Any]] = json.loads(b"".join(chunks(job_id=job_id)[0]))
    return out

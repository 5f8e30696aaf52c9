"""The `job_predictions` table: a succeeded job's points, stored apart from its row as parts of JSON text.

The worker renders each part once (orjson) and writes it in the transaction that finishes the job; GET splices
the parts into its answer without parsing them, and a page needs only the parts it overlaps, of which only the two
at its ends are parsed and cut.
"""

import json
import uuid
from typing import Any

import orjson
import psycopg2.extras

from shared.core.db import Cursor, one, transaction

# Points per part: a page's two end parts are parsed (a few ms each); the whole set is ~250 rows for 63,488 points.
PART_POINTS = 256

INSERT_PARTS = "INSERT INTO job_predictions (job_id, part, first, points, body) VALUES %s"
# The parts overlapping [start, end); all of them when end is NULL.
SELECT_PARTS = """
SELECT first, points, body FROM job_predictions
WHERE job_id = %(id)s AND first + points > %(start)s AND (%(end)s::int IS NULL OR first < %(end)s)
ORDER BY part"""
SELECT_TOTAL = "SELECT COALESCE(sum(points), 0) AS total FROM job_predictions WHERE job_id = %s"


def render(points: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """(first index, points, body) of each part of a result's points, rendered to JSON text."""
    return [
        (first, len(chunk), orjson.dumps(chunk, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].decode())
        for first in range(0, len(points), PART_POINTS)
        if (chunk := points[first : first + PART_POINTS])
    ]


def store(*, cur: Cursor, job_id: uuid.UUID, points: list[dict[str, Any]]) -> None:
    """Write a finishing job's points (in the caller's transaction, the one that marks it succeeded)."""
    rows = [(job_id, part, first, n, body) for part, (first, n, body) in enumerate(render(points))]
    if rows:
        psycopg2.extras.execute_values(cur, INSERT_PARTS, rows, page_size=64)


def text(*, job_id: uuid.UUID, offset: int = 0, limit: int | None = None) -> tuple[str, int]:
    """predictions[offset:offset + limit] as a JSON array's text (all when limit is None), and how many there are."""
    end = offset + limit if limit is not None else None
    with transaction() as cur:
        cur.execute(SELECT_PARTS, {"id": job_id, "start": offset, "end": end})
        parts = cur.fetchall()
        cur.execute(SELECT_TOTAL, (job_id,))
        total = int(one(cur)["total"])
    bodies = []
    for row in parts:
        first, n, body = row["first"], row["points"], row["body"]
        if first >= offset and (end is None or first + n <= end):
            bodies.append(body)  # whole: spliced as stored
            continue
        # A part the page cuts: parse it and keep the page's points of it.
        points = json.loads(f"[{body}]")[max(0, offset - first) : None if end is None else end - first]
        if points:
            bodies.append(orjson.dumps(points).decode()[1:-1])
    return "[" + ",".join(bodies) + "]", total


def points(*, job_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every point of a succeeded job, parsed (in-process readers; HTTP answers splice the text instead)."""
    out: list[dict[str, Any]] = json.loads(text(job_id=job_id)[0])
    return out

"""A succeeded job's points live apart from its row (shared/jobs/predictions.py): parts of JSON text, spliced back."""

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from shared import jobs
from shared.core import migrate
from shared.core.db import one, transaction
from shared.jobs import JobStatus, predictions
from shared.jobs.request import JobRequest
from tests.support.services import fresh_database, server_urls

REQUEST = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1]}
PARTS = "SELECT part, first, points FROM job_predictions WHERE job_id = %s ORDER BY part"
OLD_JOB = """
INSERT INTO jobs (id, status, request, request_hash, result, finished_at)
VALUES (%s, 'succeeded', '{"cnns": ["resnet18"], "machines": ["local"]}', 'h', %s, now())"""


def points(n: int) -> list[dict[str, Any]]:
    """n distinct points with the kinds of values a result holds (floats, nulls, lists, text); some text needs
    JSON's escapes (a backslash, a quote, a tab, a newline), which COPY must carry through unchanged."""
    return [
        {"cnn": f"net-{i // 7}", "batch_size": i + 1, "total_seconds": i / 3 if i % 5 else None,
         "layer_environments": [i, i + 1], "source": "référence", "fits_in_memory": bool(i % 2),
         "note": 'C:\\runs\\"x"\tcol\nrow \\N' if i % 3 == 0 else None}
        for i in range(n)
    ]  # fmt: skip


def finished(n: int) -> tuple[uuid.UUID, dict[str, Any]]:
    """A job finished with n points and the result it was given."""
    row, _ = jobs.create(request=JobRequest.model_validate(REQUEST))
    result = {"predictions": points(n), "best": [{"cnn": "net-0"}], "energy_note": "e"}
    assert jobs.finish(job_id=row["id"], status=JobStatus.SUCCEEDED, result=result) is not None
    return row["id"], result


def test_points_are_stored_in_parts_and_read_back_whole_or_by_page(clean_db: None) -> None:
    """600 points make parts of 256, 256 and 88; every page, across part ends or not, is that slice."""
    job_id, result = finished(600)
    with transaction() as cur:
        cur.execute(PARTS, (job_id,))
        assert [(r["part"], r["first"], r["points"]) for r in cur.fetchall()] == [
            (0, 0, 256),
            (1, 256, 256),
            (2, 512, 88),
        ]
        cur.execute("SELECT result FROM jobs WHERE id = %s", (job_id,))
        assert "predictions" not in one(cur)["result"]  # the row keeps the rest only
    everything = result["predictions"]
    assert predictions.points(job_id=job_id) == everything
    for offset, limit in [
        (0, 1),
        (0, 256),
        (255, 2),
        (250, 300),
        (256, 256),
        (511, 89),
        (599, 10),
        (600, 5),
        (3, None),
        (2**31 - 1, 1),  # the largest offset the API takes, plus a limit: past int4, an empty page
        (2**31 - 1, 10_000),
    ]:
        chunks, total = predictions.chunks(job_id=job_id, offset=offset, limit=limit)
        assert total == 600
        page = everything[offset : None if limit is None else offset + limit]
        assert json.loads(b"".join(chunks)) == page, (offset, limit)
    assert jobs.get(job_id=job_id)["result"] == result
    view = jobs.view(job_id=job_id, offset=250, limit=10)
    assert view["result_json"] is not None
    assert json.loads(b"".join(view["result_json"])) == {**result, "predictions": everything[250:260]}
    assert view["predictions_total"] == 600
    assert json.loads(b"".join(jobs.view(job_id=job_id)["result_json"] or [])) == result


def test_a_job_that_had_ended_gets_no_points(clean_db: None) -> None:
    """Finishing a canceled job stores nothing: neither its result nor its points."""
    row, _ = jobs.create(request=JobRequest.model_validate(REQUEST))
    jobs.cancel(job_id=row["id"])
    assert jobs.finish(job_id=row["id"], status=JobStatus.SUCCEEDED, result={"predictions": points(3)}) is None
    with transaction() as cur:
        cur.execute(PARTS, (row["id"],))
        assert cur.fetchall() == []


def test_results_stored_before_the_migration_keep_their_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A result whose points were inside its jsonb (before 0024) reads back the same after migrating."""
    older = tmp_path / "migrations"
    older.mkdir()
    for path in sorted(migrate.MIGRATIONS_DIR.glob("*.sql")):
        if path.stem < "0024":
            shutil.copy(path, older)
    old = {"predictions": points(5), "best": [], "gpu_note": "g"}
    job_id = uuid.uuid4()
    with fresh_database(server_urls()[0]) as url:
        monkeypatch.setattr(migrate, "MIGRATIONS_DIR", older)
        # The catalog's seed writes today's columns; this schema is older (the seed runs after the real migration).
        monkeypatch.setattr(migrate.machine_types, "seed_catalog", lambda cur: 0)
        assert "0024_job_predictions" not in migrate.migrate(url)
        with psycopg2.connect(url) as conn, conn.cursor() as cur:
            cur.execute(OLD_JOB, (str(job_id), json.dumps(old)))
        conn.close()
        monkeypatch.undo()
        assert "0024_job_predictions" in migrate.migrate(url)
        monkeypatch.setenv("DATABASE_URL", url)
        from shared.core.settings import get_settings

        get_settings.cache_clear()
        try:
            assert jobs.get(job_id=job_id)["result"] == old
            page = b"".join(predictions.chunks(job_id=job_id, offset=1, limit=2)[0])
            assert json.loads(page) == old["predictions"][1:3]
        finally:
            monkeypatch.undo()
            get_settings.cache_clear()

"""Migration 0031: whole steps keyed by cudnn.benchmark. Rows measured before it keep the truth their environment
recorded (a CUDA agent timed with it on, a CPU's label is off), and a model fitted on a GPU's steps is relabelled."""

import shutil
from pathlib import Path

import psycopg2
import pytest

from shared.core import migrate
from tests.support.services import fresh_database, server_urls

ENVIRONMENT = "INSERT INTO environments (hash, details) VALUES (%s, %s) RETURNING id"
STEP = """INSERT INTO step_measurements (cnn_name, machine_type, batch_size, image_size, optimizer, precision,
    environment_id, oom, step_ms, momentum, weight_decay, channels_last)
VALUES ('resnet18', 'local', %s, 224, 'sgd', 'fp32', %s, false, 10.0, 0, 0, false) RETURNING id"""
STEP_OFF = """INSERT INTO step_measurements (cnn_name, machine_type, batch_size, image_size, optimizer, precision,
    environment_id, oom, step_ms, momentum, weight_decay, channels_last, cudnn_benchmark)
VALUES ('resnet18', 'local', %s, 224, 'sgd', 'fp32', %s, false, 11.0, 0, 0, false, false)"""
MODEL = """INSERT INTO predictor_models (machine_type, version, kind, cost_key, params, training_rows, evaluation)
VALUES ('local', %s, 'base', 'sgd/fp32', '{}', %s, '{}')"""


def test_rows_before_the_migration_keep_the_setting_their_environment_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = tmp_path / "migrations"
    older.mkdir()
    for path in sorted(migrate.MIGRATIONS_DIR.glob("*.sql")):
        if path.stem < "0031":
            shutil.copy(path, older)
    with fresh_database(server_urls()[0]) as url:
        monkeypatch.setattr(migrate, "MIGRATIONS_DIR", older)
        # The catalog's seed writes today's columns; this schema is older (the seed runs after the real migration).
        monkeypatch.setattr(migrate.machine_types, "seed_catalog", lambda cur: 0)
        migrate.migrate(url)
        with psycopg2.connect(url) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO cnns (name, source) VALUES ('resnet18', 'builtin') ON CONFLICT DO NOTHING")
            cur.execute(ENVIRONMENT, ("gpu", '{"device_type": "cuda", "cudnn_benchmark": true}'))
            row = cur.fetchone()
            assert row is not None
            gpu = row[0]
            cur.execute(ENVIRONMENT, ("cpu", '{"device_type": "cpu"}'))
            row = cur.fetchone()
            assert row is not None
            cpu = row[0]
            cur.execute(STEP, (8, gpu))
            row = cur.fetchone()
            assert row is not None
            on_gpu = row[0]
            cur.execute(STEP, (8, cpu))
            cur.execute(MODEL, (1, f"[{on_gpu}]"))
        conn.close()
        monkeypatch.undo()
        assert "0031_cudnn_benchmark" in migrate.migrate(url)
        with psycopg2.connect(url) as conn, conn.cursor() as cur:
            cur.execute("SELECT environment_id, cudnn_benchmark FROM step_measurements ORDER BY environment_id")
            assert dict(cur.fetchall()) == {gpu: True, cpu: False}
            cur.execute("SELECT cost_key FROM predictor_models")
            assert cur.fetchall() == [("sgd/fp32/cudnn_benchmark",)]
            # The same step with the setting off is a row of its own now, not a conflict.
            cur.execute(STEP_OFF, (8, gpu))
            cur.execute("SELECT count(*) FROM step_measurements WHERE environment_id = %s", (gpu,))
            row = cur.fetchone()
            assert row is not None and row[0] == 2
        conn.close()

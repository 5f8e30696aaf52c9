"""Measurement bundles between two installations: the same answers, each row once, hostile files change nothing."""

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.core.migrate import migrate
from tests.support.jobflow import calibrate_as
from tests.support.services import fresh_database, server_urls
from tests.support.stack import ROOT

JOB = {"cnns": ["resnet18", "squeezenet1_1"], "machines": ["g4dn.xlarge"], "batch_sizes": [2], "image_size": 32}
TABLES = ("layer_benchmarks", "op_benchmarks", "step_measurements", "environments", "predictor_models")


def run(args: list[str], db_url: str, *, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """A command of this project against one installation's database."""
    env = {**os.environ, "DATABASE_URL": db_url}
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done


def traincast(db_url: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """The CLI against one installation."""
    return run([str(Path(sys.executable).parent / "traincast"), *args], db_url, ok=ok)


def answer(db_url: str) -> dict[str, Any]:
    """JOB's result in that installation, computed in a fresh process."""
    out = json.loads(run([sys.executable, "-m", "tests.support.answer", json.dumps(JOB)], db_url).stdout)
    assert out["status"] == "succeeded", out
    return out


def counts(db_url: str) -> dict[str, int]:
    """Rows per measurement table of one installation."""
    import psycopg2

    with psycopg2.connect(db_url) as conn, conn.cursor() as cur:
        found = {}
        for table in TABLES:
            cur.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 - fixed names
            row = cur.fetchone()
            assert row is not None
            found[table] = row[0]
    conn.close()
    return found


def canonical(points: list[dict[str, Any]], db_url: str) -> str:
    """Points as JSON text with their layer environments' ids replaced by the environments' hashes."""
    import psycopg2

    with psycopg2.connect(db_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, hash FROM environments")
        hashes = dict(cur.fetchall())
    conn.close()
    named = [p | {"layer_environments": [hashes[i] for i in p["layer_environments"]]} for p in points]
    return json.dumps(named, sort_keys=True)


@pytest.fixture
def other() -> Iterator[str]:
    """A second, fresh installation: its own migrated database."""
    admin_db, _redis = server_urls()
    with fresh_database(admin_db) as url:
        migrate(url)
        yield url


def test_export_import_gives_the_same_answers_and_importing_twice_adds_nothing(
    clean_db: None, other: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A calibrated type's rows exported, imported into a fresh installation and fitted there answer byte for byte
    as at home; a second import stores nothing and fits no new model."""
    here = os.environ["DATABASE_URL"]
    calibrate_as("g4dn.xlarge", monkeypatch, cnns=("resnet18", "squeezenet1_1", "mobilenet_v2"))
    home = answer(here)
    assert home["models"]["g4dn.xlarge"]["source"] == "benchmarked"
    bundle = tmp_path / "g4dn.jsonl.gz"
    traincast(here, "measurements", "export", "-m", "g4dn.xlarge", "-o", str(bundle))
    first_bytes = bundle.read_bytes()
    traincast(here, "measurements", "export", "-m", "g4dn.xlarge", "-o", str(bundle))
    lines = gzip.decompress(bundle.read_bytes()).splitlines()
    # The same rows give the same file but for the header's export time.
    assert gzip.decompress(first_bytes).splitlines()[1:] == lines[1:]
    header = json.loads(lines[0])
    assert header["version"] == 1 and [m["name"] for m in header["machine_types"]] == ["g4dn.xlarge"]
    assert counts(other)["layer_benchmarks"] == 0
    done = traincast(other, "measurements", "import", str(bundle))
    assert "model version" in done.stdout and "g4dn.xlarge" in done.stdout
    imported = counts(other)
    mine = counts(here)
    for table in ("layer_benchmarks", "op_benchmarks", "step_measurements"):
        assert imported[table] == mine[table] > 0
    assert imported["predictor_models"] == 1
    away = answer(other)
    # Byte for byte, once each point's environments are named by hash (their ids are each installation's own).
    assert canonical(away["predictions"], other) == canonical(home["predictions"], here)
    # The model's own figures agree too (its id and row ids are the installation's own).
    assert away["models"] == home["models"]
    again = traincast(other, "measurements", "import", str(bundle))
    assert "stored no rows" in again.stdout and counts(other) == imported


def test_unknown_types_local_and_unknown_cnns_change_nothing(
    clean_db: None, other: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundle naming what the other installation lacks is refused whole, saying what to do; --as maps a type."""
    here = os.environ["DATABASE_URL"]
    calibrate_as("local", monkeypatch, cnns=("resnet18", "squeezenet1_1"))
    bundle = tmp_path / "local.jsonl.gz"
    traincast(here, "measurements", "export", "-m", "local", "-o", str(bundle))
    before = counts(other)
    refused = traincast(other, "measurements", "import", str(bundle), ok=False)
    assert "--as local=NAME" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    refused = traincast(other, "measurements", "import", str(bundle), "--as", "local=lab-cpu", ok=False)
    assert "unknown machine type 'lab-cpu'" in refused.stderr
    refused = traincast(other, "measurements", "import", str(bundle), "--as", "local", ok=False)
    assert "give OLD=NEW" in refused.stderr
    assert counts(other) == before
    traincast(other, "measurements", "import", str(bundle), "--as", "local=g4dn.xlarge", "--no-fit")
    assert counts(other)["layer_benchmarks"] == counts(here)["layer_benchmarks"] > before["layer_benchmarks"]
    # Whole steps of a CNN the other installation has never seen: refused, nothing stored.
    raw = gzip.decompress(bundle.read_bytes()).splitlines()
    steps = [i for i, line in enumerate(raw) if b'"kind":"step"' in line]
    step = json.loads(raw[steps[0]]) | {"cnn_name": "my_private_net"}
    raw[steps[0]] = json.dumps(step).encode()
    foreign = tmp_path / "foreign.jsonl.gz"
    foreign.write_bytes(gzip.compress(b"\n".join(raw) + b"\n"))
    third = counts(other)
    refused = traincast(other, "measurements", "import", str(foreign), "--as", "local=p3.2xlarge", ok=False)
    assert "CNNs unknown here: my_private_net" in refused.stderr and counts(other) == third


def test_the_api_exports_and_imports_for_admin_keys_only(clean_db: None, api_only: Any, other: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """GET /v1/measurements is the bundle the CLI writes; POST stores it (problem+json for a bad one)."""
    from shared import keys
    from tests.support.stack import http

    calibrate_as("g4dn.xlarge", monkeypatch, cnns=("resnet18", "squeezenet1_1"))
    got = http.get(f"{api_only.url}/v1/measurements", params={"machine_type": "g4dn.xlarge"}, timeout=60)
    assert got.status_code == 200 and got.headers["content-type"] == "application/gzip"
    _row, reader = keys.create(name="reader", scope="submit")
    denied = http.get(f"{api_only.url}/v1/measurements", params={"machine_type": "g4dn.xlarge"},
                      headers={"Authorization": f"Bearer {reader}"})  # fmt: skip
    assert denied.status_code == 403
    # Into this same installation: every row is here already.
    posted = http.post(f"{api_only.url}/v1/measurements", content=got.content, timeout=60,
                       headers={"Content-Type": "application/gzip"})  # fmt: skip
    assert posted.status_code == 200, posted.text
    report = posted.json()
    assert sum(report["stored"].values()) == 0 and report["already"]["layer"] > 0
    bad = http.post(f"{api_only.url}/v1/measurements", content=got.content[:-50],
                    headers={"Content-Type": "application/gzip"})  # fmt: skip
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"
    assert "cut short" in bad.json()["detail"]
    unknown = http.get(f"{api_only.url}/v1/measurements", params={"machine_type": "nope.large"})
    assert unknown.status_code == 404

"""The scripts that start processes: exactly one Celery beat."""

from tests.support.stack import ROOT


def test_scripts_run_one_beat() -> None:
    """make up and docker compose run beat as its own process, never embedded in a worker (-B)."""
    up = (ROOT / "scripts/up.sh").read_text()
    assert " worker -B" not in up and "start beat " in up and "worker.app beat" in up
    assert "beat" in (ROOT / "scripts/down.sh").read_text()
    import yaml

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert "-B" not in services["worker"]["command"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "worker.app", "beat"]
    assert services["beat"]["deploy"]["replicas"] == 1

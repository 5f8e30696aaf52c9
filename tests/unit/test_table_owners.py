"""Each table has one owning module, the only one that runs SQL on it (docs/ARCHITECTURE.md, rules)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Not product code: tests and benchmarks set up and read rows directly; migrations create the tables.
SKIPPED = ("tests", "bench", "migrations")

# Table → the module (or package) that owns it.
OWNERS = {
    "agent_logins": "shared.core.logins",
    "agents": "shared.agents",
    "api_keys": "shared.keys",
    "cnns": "shared.cnn.registry",
    "cnn_layers": "shared.measurements.layers",
    "cnn_workloads": "shared.measurements.layers",
    "conv_signatures": "shared.measurements.layers",
    "layer_benchmarks": "shared.measurements.layers",
    "layer_failures": "shared.measurements.layers",
    "cnn_ops": "shared.measurements.ops",
    "op_signatures": "shared.measurements.ops",
    "op_benchmarks": "shared.measurements.ops",
    "op_failures": "shared.measurements.ops",
    "input_rates": "shared.measurements.inputs",
    "allreduce_timings": "shared.measurements.allreduce",
    "step_measurements": "shared.measurements.steps",
    "step_failures": "shared.measurements.steps",
    "environments": "shared.measurements.environments",
    "machine_types": "shared.machine_types",
    "fleet_targets": "fleet.store",
    "fleet_instances": "fleet.store",
    "fleet_events": "fleet.store",
    "predictor_models": "worker.predictor",
    "reference_conv_times": "worker.reference_store",
    "jobs": "shared.jobs",
    "job_predictions": "shared.jobs.predictions",
}
_SQL = r"\b(?:FROM|INTO|UPDATE|JOIN|TABLE|TRUNCATE)\s+(?:ONLY\s+)?{table}\b"


def tables() -> set[str]:
    """Every table the migrations create."""
    found = re.compile(r"(?i)\bCREATE TABLE\s+(?:IF NOT EXISTS\s+)?(\w+)")
    return {m.group(1) for p in (ROOT / "migrations").glob("*.sql") for m in found.finditer(p.read_text())}


def modules() -> dict[str, str]:
    """Dotted module name → source, for every Python file of the product."""
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in SKIPPED or rel.parts[0].startswith("."):
            continue
        out[".".join(rel.with_suffix("").parts).removesuffix(".__init__")] = path.read_text()
    return out


def users(table: str, sources: dict[str, str]) -> set[str]:
    """The modules whose source has SQL naming the table."""
    pattern = re.compile(_SQL.format(table=re.escape(table)), re.IGNORECASE)
    return {name for name, text in sources.items() if pattern.search(text)}


def owns(owner: str, module: str) -> bool:
    """A module belongs to its owner: the owner itself, or a module of the owning package."""
    return module == owner or module.startswith(owner + ".")


def test_every_table_has_an_owner() -> None:
    """A table added by a migration must be given an owning module here."""
    assert tables() - set(OWNERS) == set()
    assert set(OWNERS) - tables() == set(), "an owner is listed for a table no migration creates"


def test_only_the_owner_runs_sql_on_a_table() -> None:
    """No module but a table's owner has SQL on it."""
    sources = modules()
    strays = {
        (table, module)
        for table, owner in OWNERS.items()
        for module in users(table, sources)
        if not owns(owner, module)
    }
    assert strays == set(), "move these statements into the table's owner: " + str(sorted(strays))


def test_each_owner_runs_sql_on_its_table() -> None:
    """The scan finds every owner's own statements (so a stale map or a blind pattern fails here)."""
    sources = modules()
    assert {t for t, owner in OWNERS.items() if not any(owns(owner, m) for m in users(t, sources))} == set()


def test_the_scan_finds_sql_outside_the_owner() -> None:
    """A statement on a table written in another module is found as that module's."""
    sources = {
        "shared.measurements.layers": "SELECT 1 FROM layer_benchmarks",
        "worker.x": 'X = """\nINSERT INTO\n  agents (id)',
    }
    assert users("agents", sources) == {"worker.x"} and users("layer_benchmarks", sources) == {
        "shared.measurements.layers"
    }
    assert users("agents", {"m": "FROM agents_old"}) == set()

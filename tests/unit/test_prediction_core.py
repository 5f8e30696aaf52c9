"""The prediction core (prediction/) is numbers in, numbers out: no Celery, HTTP, Redis or SQL, and no worker code."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
CORE = ROOT / "prediction"
# What the core may not import: queues, web, databases, and the service packages that call it.
FORBIDDEN = ("celery", "kombu", "httpx", "fastapi", "starlette", "uvicorn", "redis", "psycopg2", "worker", "api",
             "cli", "gpu_agent", "fleet", "shared.core.db", "shared.core.tasks")  # fmt: skip


def imported(path: Path) -> set[str]:
    """Every module a file imports, by its full dotted name."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_core_imports_no_queue_web_database_or_service_code() -> None:
    """Each module under prediction/ imports none of FORBIDDEN (nor anything below them)."""
    files = sorted(CORE.rglob("*.py"))
    assert len(files) > 10
    found = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        for name in imported(path)
        if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)
    }
    assert not found, sorted(found)


def test_no_module_of_the_core_has_a_name_another_package_uses() -> None:
    """File names say what they hold: no prediction/ module shares its name with one in worker/, shared/ or gpu_agent/
    (importing two `memory` modules took aliases)."""
    core = {p.stem for p in CORE.glob("*.py")} - {"__init__"}
    others = {p.stem for d in ("worker", "shared", "gpu_agent") for p in (ROOT / d).rglob("*.py")}
    assert not core & others, sorted(core & others)


PACKAGES = ("api", "worker", "prediction", "gpu_agent", "shared", "cli", "fleet", "calibration")


def module_graph() -> dict[str, set[str]]:
    """Project module → the project modules it imports (anywhere in the file, deferred imports too)."""
    mods = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            mods[name] = path
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    graph[name].add(target if target in mods else node.module)
            elif isinstance(node, ast.Import):
                graph[name] |= {alias.name for alias in node.names}
    # A module importing its own package's __init__ (to reach a sibling) is not a circle of modules.
    return {m: {t for t in ts if t in mods and t != m and not m.startswith(t + ".")} for m, ts in graph.items()}


def test_no_two_modules_import_each_other_even_through_others() -> None:
    """The import graph of the project's modules has no cycle (Tarjan's strongly connected components)."""
    graph = module_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while (w := stack.pop()) != v:
                part.append(w)
            if part:
                cycles.append(sorted([v, *part]))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles

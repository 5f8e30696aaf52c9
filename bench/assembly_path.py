"""A request followed through assembly, as a reader steps through it: `python bench/assembly_path.py`.

Plans the small job (resnet18 x g5.xlarge x 3 batch sizes) once to warm it, then again with a profiler hook that
records every call into this project's code made while worker/planning.py's `_assemble_if_complete` runs, down to
DEPTHS levels below it (depth 1: the calls its own body makes; depth 2: theirs too; a generator resumed, as a
context manager's exit resumes it, is not a new call). Consecutive calls into one module are one stop; a stop in a
module the path has already left is a return. The baseline in the same run is depth 1, the orchestration alone. No
database of the developer's is touched: a scratch one, as bench/assembly_stages.py.
"""

import os
import sys
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEPTHS = (1, 2)
CO_GENERATOR = 0x20  # inspect.CO_GENERATOR
ENTRY = ("worker.planning", "_assemble_if_complete")


def module_of(frame: FrameType) -> str | None:
    """The project module a frame runs in (None for the standard library and installed packages)."""
    path = Path(frame.f_code.co_filename)
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    return None if rel.parts[0].startswith(".") else ".".join(rel.with_suffix("").parts)


def trace(run: Any, max_depth: int) -> list[tuple[str, str]]:
    """(module, function) of each project call within max_depth levels below ENTRY while run() plans a job."""
    calls: list[tuple[str, str]] = []
    stack: list[str | None] = []
    # generator frames already entered (a context manager's exit resumes one), kept alive so no id is reused
    resumable: dict[int, FrameType] = {}

    def hook(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            module, name = module_of(frame), frame.f_code.co_name
            if stack or (module, name) == ENTRY:
                resumed = id(frame) in resumable
                if frame.f_code.co_flags & CO_GENERATOR:
                    resumable[id(frame)] = frame
                if module and len(stack) <= max_depth and not name.startswith("<") and not resumed:
                    calls.append((module, name))
                stack.append(module)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def stops(calls: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], int]:
    """Consecutive calls into one module merged into a stop; and how many stops return to a module already left."""
    path: list[tuple[str, str]] = []
    for module, name in calls:
        if not path or path[-1][0] != module:
            path.append((module, name))
    seen: set[str] = set()
    returns = 0
    for i, (module, _) in enumerate(path):
        returns += module in seen and i > 0
        seen.add(module)
    return path, returns


def main() -> int:
    """Trace the small job's assembly at each depth, print and record."""
    from tests.support.services import fresh_database, server_urls

    admin_db, redis_url = server_urls()
    with fresh_database(admin_db) as db_url:
        os.environ.update(DATABASE_URL=db_url, REDIS_URL=redis_url)
        from shared.core.settings import get_settings

        get_settings.cache_clear()
        from bench.service import SMALL, setup
        from shared import jobs
        from shared.jobs.request import JobRequest
        from worker import planning

        setup(db_url)

        def run() -> None:
            job, _ = jobs.create(request=JobRequest.model_validate(SMALL))
            planning.plan_job(uuid.UUID(str(job["id"])))

        run()
        traced = {depth: stops(trace(run, depth)) for depth in DEPTHS}
    lines = [
        "Command: `.venv/bin/python bench/assembly_path.py` (the small job planned on a scratch database; a profiler "
        "hook records every call into the project's modules while `worker/planning.py` `_assemble_if_complete` runs). "
        "A stop: consecutive calls into one module; a return: a stop in a module the path had already left. Depth 1 "
        "(the orchestration's own calls) is the baseline.",
        "",
        "| depth | stops | modules | returns |",
        "|---:|---:|---:|---:|",
    ]
    for depth, (path, returns) in traced.items():
        lines.append(f"| {depth} | {len(path)} | {len({m for m, _ in path})} | {returns} |")
    deepest, _ = traced[max(DEPTHS)]
    lines += ["", f"The path at depth {max(DEPTHS)}:", ""]
    lines += [f"{i}. `{module}.{name}`" for i, (module, name) in enumerate(deepest, 1)]
    body = "\n".join(lines)
    print(body)
    if "--no-write" not in sys.argv:
        from bench.perf_doc import write_section

        write_section("A request through assembly (bench/assembly_path.py)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

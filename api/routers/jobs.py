"""Prediction jobs: submit, poll, list, cancel."""

import difflib
import functools
import itertools
import logging
import re
import time
import uuid
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator
from starlette.concurrency import run_in_threadpool

from api import waits
from api.auth import Reader, Submitter, require
from api.routing import ParsedOffLoop
from shared import interconnect, jobs, keys, machine_types
from shared.cnn import registry as cnns
from shared.core import logs, tasks
from shared.core.errors import InvalidRequest, NotFound
from shared.jobs import Job, JobList, JobStatus, JobSummary
from shared.jobs.request import JobRequest

log = logging.getLogger(__name__)
router = APIRouter(route_class=ParsedOffLoop, prefix="/v1/jobs", tags=["jobs"], dependencies=[Depends(require("read"))])

# Seconds a client should wait before polling an unfinished job again.
POLL_AFTER_S = 2
# uvicorn's parser (h11) refuses NUL, CR and LF in a header with a plain 400 before the app runs; the other
# control characters (ESC, DEL, …) reach the app and are refused here.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _printable(value: str | None) -> str | None:
    found = CONTROL.search(value or "")
    if found:
        raise ValueError(
            f"holds a control character (0x{ord(found.group()):02x} at position {found.start()});"
            " an idempotency key is printable text"
        )
    return value


IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=200,
        description="a retry with the same key returns the same job; 1-200 characters, no control characters",
    ),
    AfterValidator(_printable),
]


SUMMARY = ("id", "status", "progress", "created_at", "started_at", "finished_at")
# Predictions one page may hold (a job may hold far more: shared/jobs/request.py bounds points per job).
MAX_PAGE = 100_000


def job_view(job: Mapping[str, Any], *, full: bool = True) -> dict[str, Any]:
    """The public fields of a job row (Job's shape; without request, result and error unless `full`)."""
    view = {k: job[k] for k in SUMMARY}
    if full:
        view["request"] = job["request"]
        if job["status"] == JobStatus.SUCCEEDED and "result" in job:
            view["result"] = job["result"]
        if job["error"]:
            view["error"] = job["error"]
    return view


def did_you_mean(unknown: list[str], known: list[str]) -> str:
    """' (did you mean 'resnet50'?)' for the names nearest the unknown ones, letter case aside; '' when none is near."""
    by_folded = {name.casefold(): name for name in known}
    guesses = []
    for name in unknown:
        near = difflib.get_close_matches(name.casefold(), list(by_folded), n=1, cutoff=0.75)
        if near:
            guesses.append(repr(by_folded[near[0]]))
    return f" (did you mean {', '.join(guesses)}?)" if guesses else ""


def _validate_names(request: JobRequest, owner: str | None) -> None:
    unknown_machines = machine_types.missing(names=request.machines, owner=owner)
    if unknown_machines:
        known = [m["name"] for m in machine_types.list_all(owner=owner)]
        hint = did_you_mean(unknown_machines, known)
        raise InvalidRequest(f"unknown machine type(s): {', '.join(unknown_machines)}{hint}; see GET /v1/machines")
    if request.precision == "amp_bf16":
        lacking = machine_types.without_bf16(names=request.machines)
        if lacking:
            named = ", ".join(f"{m['name']} ({m['gpu']})" for m in lacking)
            raise InvalidRequest(f"precision amp_bf16 needs a GPU with bf16; these machine types have none: {named}")
    _check_layouts(request)
    unknown_cnns = cnns.unknown(names=request.cnns, owner=owner)
    if unknown_cnns:
        hint = did_you_mean(unknown_cnns, [c["name"] for c in cnns.list_all(owner=owner)])
        raise InvalidRequest(f"unknown CNN(s): {', '.join(unknown_cnns)}{hint}; see GET /v1/cnns")
    for name in request.cnns:
        # A clear error now if a CNN cannot run at this size or with these classes, where that is known without torch.
        cnns.check_runs(name=name, image_size=request.image_size, num_classes=request.num_classes)


def _check_layouts(request: JobRequest) -> None:
    """422 for more GPUs than a machine type has, or several nodes of one that cannot be clustered."""
    if request.gpus is None and request.node_counts() == [1]:
        return
    infos = machine_types.by_names(names=request.machines)
    # A type answers the counts it holds; one that holds none of them cannot be answered.
    counts = request.gpu_counts(0)
    least = min(counts)
    over = [f"{m} ({i['gpu_count']})" for m, i in infos.items() if least > max(1, i["gpu_count"] or 0)]
    if over and request.gpus is not None:
        asks = f"{least} GPUs" if len(counts) == 1 else f"at least {least} GPUs"
        # Users often mean the GPUs of the whole run: say how to ask for those.
        raise InvalidRequest(
            f"gpus asks for {asks} a machine; these machine types have fewer: {', '.join(over)} (gpus counts one "
            "machine's GPUs: for more in all, ask for several machines with nodes, --nodes in the CLI)"
        )
    if max(request.node_counts()) > 1:
        local = [m for m, i in infos.items() if i["provider"] == "local"]
        if local:
            raise InvalidRequest(f"nodes > 1 needs machine types that come as several machines; not {', '.join(local)}")
        alone = [m for m, i in infos.items() if not (request.internode_gbps or interconnect.network_gbps(m, i))]
        if alone:
            raise InvalidRequest(
                f"nodes > 1 needs a known network between machines; these machine types have none: "
                f"{', '.join(alone)}: give internode_gbps, or register the type with nics, nic_gbps and "
                "network_rdma (see docs/API.md, data-parallel training)"
            )


def _set_poll_header(response: Response, job: Mapping[str, Any]) -> None:
    if job["status"] not in jobs.TERMINAL:
        response.headers["Retry-After"] = str(POLL_AFTER_S)


@router.post("", status_code=202, response_model=JobSummary, response_model_exclude_unset=True)
def create_job(
    request: JobRequest,
    response: Response,
    principal: Submitter,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Submit a prediction job; it runs in the background and belongs to the key that sent it."""
    admit = functools.partial(keys.check_submission, principal)
    # Refused early, before reading the CNNs; jobs.create checks again under the key's lock, which is what holds.
    usage = jobs.key_usage(owner_key_id=principal.key_id, idempotency_key=idempotency_key)
    if not usage["retry"]:  # a retry returns its job (or 409) whatever the key has running now
        admit(usage)
    _validate_names(request, principal.visible_owner)
    job, created = jobs.create(
        request=request, idempotency_key=idempotency_key, owner_key_id=principal.key_id, admit=admit
    )
    logs.bind(job_id=str(job["id"]))
    if created:
        log.info("job submitted: %s on %s", ",".join(request.cnns)[:300], ",".join(request.machines)[:300])
        try:
            tasks.send(tasks.PLAN_JOB, args=[str(job["id"])])
        except Exception:  # the job is stored; the reconciler sends its work when the broker is back
            log.exception("could not send job %s to the broker", job["id"])
    response.headers["Location"] = f"/v1/jobs/{job['id']}"
    _set_poll_header(response, job)
    return job_view(job, full=False)


@router.get("", response_model=JobList, response_model_exclude_unset=True)
def list_jobs(
    principal: Reader, limit: Annotated[int, Query(ge=1, le=100)] = 20, cursor: uuid.UUID | None = None
) -> dict[str, Any]:
    """The key's jobs (an admin key: every job), newest first; pass next_cursor as cursor for the next page."""
    owner = principal.visible_owner
    before = None
    if cursor is not None:
        try:
            before = jobs.position(job_id=cursor, owner=owner)
        except NotFound as exc:
            raise InvalidRequest(f"cursor {cursor} is not a job id") from exc
    page = jobs.list_page(limit=limit + 1, before=before, owner=owner)
    more = len(page) > limit
    page = page[:limit]
    return {
        "jobs": [job_view(j, full=False) | {"request": j["request"]} for j in page],
        "next_cursor": str(page[-1]["id"]) if more else None,
    }


@router.get("/{job_id}", response_model=Job, response_model_exclude_unset=True)
async def get_job(
    job_id: uuid.UUID,
    principal: Reader,
    predictions_offset: Annotated[
        int | None, Query(ge=0, le=2**31 - 1, description="first prediction of a page (0-based)")
    ] = None,
    predictions_limit: Annotated[
        int | None, Query(ge=1, le=MAX_PAGE, description="predictions in a page (default: to the end)")
    ] = None,
    wait: Annotated[
        float, Query(ge=0, le=waits.MAX_WAIT_S, description="seconds to hold the answer until the job has finished")
    ] = 0,
) -> Response:
    """A job's status, progress and, when done, its result or error; another key's job is 404.

    predictions_offset / predictions_limit: only that page of result.predictions (predictions_page says which).
    """
    view = functools.partial(
        jobs.view, job_id=job_id, owner=principal.visible_owner, offset=predictions_offset, limit=predictions_limit
    )

    async def read() -> jobs.JobView:
        return await run_in_threadpool(view)

    if wait > 0:
        deadline = time.monotonic() + wait
        async with waits.finished(str(job_id)) as finished:
            row = await read()
            while row["status"] not in jobs.TERMINAL and time.monotonic() < deadline:
                if await finished.until(deadline) or time.monotonic() < deadline:
                    row = await read()  # woken, or a periodic re-read in case a notification was lost
    else:
        row = await read()
    # In a thread, as the reads: the job's request (up to 65,536 batch sizes) is encoded off the event loop.
    head = await run_in_threadpool(_head, row, predictions_offset, predictions_limit)
    if row["result_json"] is None:
        response: Response = Response(content=head, media_type="application/json")
    else:
        # Streamed as read from the table (a sync iterator: Starlette reads it in a thread), its length said first.
        parts = itertools.chain((head[:-1], b',"result":'), row["result_json"], (b"}",))
        length = len(head) - 1 + len(b',"result":') + (row["result_length"] or 0) + 1
        response = StreamingResponse(parts, media_type="application/json", headers={"Content-Length": str(length)})
    _set_poll_header(response, row)
    return response


def _head(row: jobs.JobView, offset: int | None, limit: int | None) -> bytes:
    """The job's JSON without its result, which is spliced in after it as PostgreSQL's text, never parsed.

    The result was checked against Result before it was stored (worker/planning.py); the rest of the job is encoded
    as response_model would.
    """
    head = job_view(row)
    if row["predictions_total"] is not None:
        start = offset or 0
        total = row["predictions_total"]
        head["predictions_page"] = {"offset": start, "limit": limit or max(0, total - start), "total": total}
    return Job.model_validate(head).model_dump_json(exclude_unset=True).encode()


@router.post("/{job_id}/cancel", response_model=Job, response_model_exclude_unset=True)
def cancel_job(job_id: uuid.UUID, principal: Submitter) -> dict[str, Any]:
    """Cancel a job of this key (an admin key: any job) that has not finished."""
    return job_view(jobs.cancel(job_id=job_id, owner=principal.visible_owner))

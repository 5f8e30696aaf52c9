"""Prediction jobs: submit, poll, list, cancel."""

import functools
import logging
import re
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Response
from pydantic import AfterValidator

from api.auth import Reader, Submitter, require
from shared import cnns, jobs, keys, logs, machines, tasks
from shared.errors import InvalidRequest, NotFound
from shared.schemas import JobRequest

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/jobs", tags=["jobs"], dependencies=[Depends(require("read"))])

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
    Header(max_length=200, description="a retry with the same key returns the same job; no control characters"),
    AfterValidator(_printable),
]


def job_view(job: dict[str, Any], *, full: bool = True) -> dict[str, Any]:
    """The public shape of a job."""
    view: dict[str, Any] = {
        "id": str(job["id"]),
        "status": job["status"],
        "progress": job["progress"],
        "created_at": job["created_at"].isoformat(),
        "started_at": job["started_at"].isoformat() if job["started_at"] else None,
        "finished_at": job["finished_at"].isoformat() if job["finished_at"] else None,
    }
    if full:
        view["request"] = job["request"]
        if job["status"] == "succeeded":
            view["result"] = job["result"]
        if job["error"]:
            view["error"] = job["error"]
    return view


def _validate_names(request: JobRequest, owner: str | None) -> None:
    unknown_machines = machines.missing(names=request.machines)
    if unknown_machines:
        raise InvalidRequest(f"unknown machine type(s): {', '.join(unknown_machines)}; see GET /v1/machines")
    if request.precision == "amp_bf16":
        lacking = machines.without_bf16(names=request.machines)
        if lacking:
            named = ", ".join(f"{m['name']} ({m['gpu']})" for m in lacking)
            raise InvalidRequest(f"precision amp_bf16 needs a GPU with bf16; these machine types have none: {named}")
    unknown_cnns = cnns.unknown(names=request.cnns, owner=owner)
    if unknown_cnns:
        raise InvalidRequest(f"unknown CNN(s): {', '.join(unknown_cnns)}; see GET /v1/cnns")
    for name in request.cnns:
        # Raises a clear error now if a CNN cannot be read at this size or with these classes.
        cnns.read(name=name, image_size=request.image_size, num_classes=request.num_classes)


def _set_poll_header(response: Response, job: dict[str, Any]) -> None:
    if job["status"] not in jobs.TERMINAL:
        response.headers["Retry-After"] = str(POLL_AFTER_S)


@router.post("", status_code=202)
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


@router.get("")
def list_jobs(
    principal: Reader, limit: Annotated[int, Query(ge=1, le=100)] = 20, cursor: uuid.UUID | None = None
) -> dict[str, Any]:
    """The key's jobs (an admin key: every job), newest first; pass next_cursor as cursor for the next page."""
    owner = principal.visible_owner
    before = None
    if cursor is not None:
        try:
            before = jobs.get(job_id=cursor, owner=owner)
        except NotFound as exc:
            raise InvalidRequest(f"cursor {cursor} is not a job id") from exc
    page = jobs.list_page(limit=limit + 1, before=before, owner=owner)
    more = len(page) > limit
    page = page[:limit]
    return {
        "jobs": [job_view(j, full=False) | {"request": j["request"]} for j in page],
        "next_cursor": str(page[-1]["id"]) if more else None,
    }


@router.get("/{job_id}")
def get_job(job_id: uuid.UUID, response: Response, principal: Reader) -> dict[str, Any]:
    """A job's status, progress and, when done, its result or error; another key's job is 404."""
    job = jobs.get(job_id=job_id, owner=principal.visible_owner)
    _set_poll_header(response, job)
    return job_view(job)


@router.post("/{job_id}/cancel")
def cancel_job(job_id: uuid.UUID, principal: Submitter) -> dict[str, Any]:
    """Cancel a job of this key (an admin key: any job) that has not finished."""
    return job_view(jobs.cancel(job_id=job_id, owner=principal.visible_owner))

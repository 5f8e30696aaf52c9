"""Measurement bundles over HTTP (admin scope): export machine types' rows, import another installation's.

`traincast measurements` does the same in the database (docs/BUNDLES.md)."""

import io
import platform
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from api.auth import Admin
from api.routing import ParsedOffLoop
from shared.core import tasks
from shared.core.errors import PayloadTooLarge
from shared.core.settings import get_settings
from shared.measurements import transfer
from shared.measurements.bundle import ImportReport

router = APIRouter(route_class=ParsedOffLoop, prefix="/v1/measurements", tags=["measurements"])
# A bundle is checked whole in the API's memory before one row is stored: these bound it to ~100 MB there (a full
# GPU calibration is some tens of thousands of lines); the CLI takes bundles up to transfer's own limits.
API_MAX_LINES = 100_000
API_MAX_BYTES = 32 * 2**20
GZIP = "application/gzip"
MachineTypes = Annotated[list[str], Query(min_length=1, max_length=64, alias="machine_type")]
Renames = Annotated[list[str], Query(max_length=64, alias="as", description="OLD=NEW: store OLD's rows as NEW")]
# Declared as octet-stream (any Content-Type is read): the bundle's bytes, a gzip stream (docs/BUNDLES.md).
BUNDLE_BODY = {
    "requestBody": {
        "required": True,
        "description": "a bundle as `traincast measurements export` writes it (gzip-compressed JSON lines)",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.get("", response_class=Response, responses={200: {"content": {GZIP: {}}}})
def export_bundle(principal: Admin, machine_types: MachineTypes) -> Response:
    """A bundle of these machine types' layer, op, whole-step, input-rate and all-reduce rows and environments."""
    out = io.BytesIO()
    transfer.export(machine_types=machine_types, out=out, source=platform.node())
    name = "-".join(sorted(set(machine_types)))[:100]
    disposition = f'attachment; filename="traincast-{name}.jsonl.gz"'
    return Response(out.getvalue(), media_type=GZIP, headers={"Content-Disposition": disposition})


@router.post("", response_model=ImportReport, openapi_extra=BUNDLE_BODY)
async def import_bundle(request: Request, principal: Admin, rename: Renames = []) -> ImportReport:  # noqa: B006
    """Store a bundle's rows (each once), then have the worker fit models from the whole steps that were new."""
    pairs = transfer.renames(rename, flag="as")
    limit = min(get_settings().max_upload_bytes, API_MAX_BYTES)
    body = io.BytesIO()
    async for chunk in request.stream():
        if body.tell() + len(chunk) > limit:
            raise PayloadTooLarge(f"bundle is over the upload limit of {limit} bytes (the CLI imports larger ones)")
        body.write(chunk)
    body.seek(0)
    report: ImportReport = await run_in_threadpool(_import, body, pairs, principal.visible_owner)
    if report.changes_models:
        tasks.send(tasks.REFIT, machine_types=report.machine_types)
    return report


def _import(body: io.BytesIO, rename: dict[str, str], owner: str | None) -> ImportReport:
    bundle = transfer.read(body, max_lines=API_MAX_LINES, max_compressed=API_MAX_BYTES)
    return transfer.load(bundle=bundle, rename=rename, owner=owner)

"""CNNs a job can name: the built-in ones and those users register."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from typing_extensions import TypedDict

from api.auth import Reader, Submitter, require
from shared.cnn import registry as cnns
from shared.core.errors import InvalidRequest, PayloadTooLarge
from shared.core.settings import get_settings


class CnnList(TypedDict):
    """GET /v1/cnns: built-in CNNs, then registered ones."""

    cnns: list[cnns.CnnListed]


router = APIRouter(prefix="/v1/cnns", tags=["cnns"], dependencies=[Depends(require("read"))])

CHUNK = 1024 * 1024


@router.get("")
def list_cnns(principal: Reader) -> CnnList:
    """Built-in CNNs and those this key registered (an admin key: every one), with parameter counts."""
    return {"cnns": cnns.list_all(owner=principal.visible_owner)}


# The form the route reads itself (so its size is checked before it is parsed), declared for clients and fuzzers.
UPLOAD_FORM = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["name", "file"],
                    "properties": {
                        "name": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 64,
                            "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                        },
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "an ONNX model or a JSON layer list",
                        },
                    },
                }
            }
        },
    }
}


@router.post("", status_code=201, openapi_extra=UPLOAD_FORM)
async def register_cnn(request: Request, principal: Submitter) -> cnns.CnnListed:
    """Register a CNN owned by this key: multipart form with `name` and `file` (an ONNX model or a JSON layer list)."""
    limit = get_settings().max_upload_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + CHUNK:  # room for the form's own fields
        raise PayloadTooLarge(f"upload of {int(declared)} bytes is over the limit of {limit} bytes")
    try:
        form = await request.form(max_files=1, max_fields=4)
    except Exception as exc:  # the multipart parser's own errors are plain exceptions
        raise InvalidRequest(f"expected a multipart form with fields name and file: {exc}") from exc
    name, upload = form.get("name"), form.get("file")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("form field 'name' is missing")
    if not isinstance(upload, UploadFile):
        raise InvalidRequest("form field 'file' is missing or not a file")
    data = await _read_capped(upload, limit)
    created = await run_in_threadpool(cnns.create, name=name, data=data, owner_key_id=principal.key_id)
    return created


@router.get("/{name}")
def get_cnn(
    name: str,
    principal: Reader,
    image_size: Annotated[int | None, Query(ge=8, le=2048)] = None,
    num_classes: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
) -> dict[str, Any]:
    """A CNN's unique conv layers with counts, and its workload, at an image size."""
    size = image_size or cnns.default_image_size(name)
    return cnns.describe(name=name, image_size=size, num_classes=num_classes, owner=principal.visible_owner)


@router.delete("/{name}", status_code=204)
def delete_cnn(name: str, principal: Submitter) -> Response:
    """Delete a CNN this key registered (an admin key: any registered CNN); 409 while an unfinished job names it."""
    cnns.delete(name=name, owner=principal.visible_owner)
    return Response(status_code=204)


async def _read_capped(upload: UploadFile, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await upload.read(CHUNK):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"upload is over the limit of {limit} bytes")
        chunks.append(chunk)
    if size == 0:
        raise InvalidRequest("the uploaded file is empty")
    return b"".join(chunks)

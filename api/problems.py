"""Every error as RFC 9457 application/problem+json."""

import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.auth import checked
from shared.core import logs
from shared.core.errors import TraincastError

MEDIA_TYPE = "application/problem+json"
_RESERVED = {"type", "title", "status", "detail", "instance"}
# A 422 lists at most this many errors, each message cut to MAX_MESSAGE characters, and says how many there were:
# an answer stays a few KB whatever the body (a list of 200,000 bad items once made a 25 MB answer).
MAX_ERRORS, MAX_MESSAGE = 20, 300


def problem(status: int, title: str, detail: str, instance: str | None = None, **extra: Any) -> JSONResponse:
    """A problem+json response."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if instance:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE)


# pydantic's names for the branches of a union ("list[int]", "function-after[_ordered(), BatchRange]", "int"): not
# fields, and no help to a person reading where the error is.
_BRANCH = re.compile(r"[\[(]|^(int|str|float|bool|dict|list|constrained-\w+)$")
# A union's branch the input was not even shaped like (a range given, "should be a valid list" for the list branch).
_SHAPE = frozenset({"list_type", "dict_type", "model_type", "model_attributes_type", "int_type", "float_type"})


def _where(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(p for p in parts if not _BRANCH.search(p)) or "request body"


def _relevant(every: list[Any]) -> list[Any]:
    """The errors, less those saying the input was not shaped like one branch of a union (a range given: "should be
    a valid list") where another error names the same field: that one says what is wrong."""

    def parts(err: Any) -> list[str]:
        return [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]

    def shape_only(err: Any) -> bool:
        loc = parts(err)
        return err.get("type") in _SHAPE and len(loc) == 2 and bool(_BRANCH.search(loc[1]))

    telling = {parts(err)[0] for err in every if parts(err) and not shape_only(err)}
    return [err for err in every if not (shape_only(err) and parts(err)[0] in telling)]


def install(app: FastAPI) -> None:
    """Register the handlers that turn every error into a problem."""

    @app.exception_handler(TraincastError)
    async def _ours(request: Request, exc: TraincastError) -> JSONResponse:
        context = {
            k: v for k, v in exc.context.items() if isinstance(v, str | int | float | bool) and k not in _RESERVED
        }
        response = problem(exc.status, exc.title, exc.detail, str(request.url.path), **context)
        # 401 says how to authenticate (WWW-Authenticate), 429 when to come back (Retry-After).
        response.headers.update(getattr(exc, "headers", None) or {})
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        raw = exc.errors()
        every = _relevant(list(raw[:1000]))
        if any(err.get("type") == "json_invalid" for err in every[:1]):
            # FastAPI parses a body before the dependencies run: who asks is checked before saying why it is bad.
            refused = await _unauthenticated(request)
            if refused is not None:
                return refused
        errors = []
        for err in every[:MAX_ERRORS]:
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if err.get("type") == "json_invalid":
                msg = f"malformed JSON: {err.get('ctx', {}).get('error', msg)}"
            errors.append({"where": _where(tuple(err.get("loc", ()))[:8])[:200], "message": msg[:MAX_MESSAGE]})
        detail = "; ".join(f"{e['where']}: {e['message']}" for e in errors[:5])
        more = len(raw) - (min(len(raw), 1000) - len(every)) - len(errors)  # less the branches left out
        if more > 0:
            detail += f" (and {more} more)"
        return problem(422, "Invalid request", detail, str(request.url.path), errors=errors, error_count=len(raw))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.detail == PARSE_ERROR:
            # A body json could not turn into values (a 5,000-digit integer): malformed, as any unparsable body.
            refused = await _unauthenticated(request)
            if refused is not None:
                return refused
            detail = "malformed JSON: a value could not be read (a number of more than 4,300 digits?)"
            return problem(422, "Invalid request", detail, str(request.url.path))
        return problem(exc.status_code, _reason(exc.status_code), str(exc.detail), str(request.url.path))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A stable message and the request's id (also its X-Request-ID), never the exception's text.
        request_id = logs.current().get("request_id")
        return problem(
            500, "Internal error",
            f"an unexpected error occurred (request id {request_id}); the operator finds it in the API's log",
            str(request.url.path), request_id=request_id,
        )  # fmt: skip


# What FastAPI answers (400) when reading a body raised anything but a JSON syntax error.
PARSE_ERROR = "There was an error parsing the body"


async def _unauthenticated(request: Request) -> JSONResponse | None:
    """The 401 problem of a request whose bearer key is missing or wrong, else None (a key's rate is not taken)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    try:
        await checked(request, token.strip() if scheme.lower() == "bearer" else None)
    except TraincastError as exc:
        response = problem(exc.status, exc.title, exc.detail, str(request.url.path))
        response.headers.update(getattr(exc, "headers", None) or {})
        return response
    return None


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"

"""Every error as RFC 9457 application/problem+json."""

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.core.errors import TraincastError

MEDIA_TYPE = "application/problem+json"
_RESERVED = {"type", "title", "status", "detail", "instance"}


def problem(status: int, title: str, detail: str, instance: str | None = None, **extra: Any) -> JSONResponse:
    """A problem+json response."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if instance:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE)


def _where(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "request body"


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
        errors = []
        for err in exc.errors():
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if err.get("type") == "json_invalid":
                msg = f"malformed JSON: {err.get('ctx', {}).get('error', msg)}"
            errors.append({"where": _where(tuple(err.get("loc", ()))), "message": msg})
        detail = "; ".join(f"{e['where']}: {e['message']}" for e in errors[:5])
        return problem(422, "Invalid request", detail, str(request.url.path), errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(exc.status_code, _reason(exc.status_code), str(exc.detail), str(request.url.path))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return problem(500, "Internal error", "an unexpected error occurred; it has been logged", str(request.url.path))


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"

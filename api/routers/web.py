"""The web page at `/`: static HTML, JS and CSS, and plotly.js served from the installed plotly package."""

import functools
import gzip
from importlib import metadata, resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

router = APIRouter(include_in_schema=False)

STATIC = Path(__file__).resolve().parent.parent / "static"
# Our own files: few and small, so no mount; an allow-list also means no path is ever built from the URL.
MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
# Versioned URL, so a browser may keep the file for a year: a new plotly release gets a new URL.
PLOTLY_VERSION = metadata.version("plotly")
PLOTLY_URL = f"static/plotly-{PLOTLY_VERSION}.min.js"
CACHE_FOREVER = "public, max-age=31536000, immutable"
# Our own files change with every deploy: the browser asks again each time (304 when unchanged).
REVALIDATE = "no-cache"


def plotly_js_path() -> Path:
    """Where the installed plotly package keeps plotly.min.js."""
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


@functools.cache
def _plotly_gzip() -> bytes:
    # 4.6 MB raw, about a third gzipped: compressed once per process, on first use.
    return gzip.compress(plotly_js_path().read_bytes(), compresslevel=6, mtime=0)


@functools.cache
def _index_html() -> str:
    return (STATIC / "index.html").read_text(encoding="utf-8").replace("{{plotly_js}}", PLOTLY_URL)


@router.get("/", response_class=HTMLResponse)
def page() -> HTMLResponse:
    """The web page: choose CNNs and machines, see time vs batch size and time vs cost."""
    return HTMLResponse(_index_html(), headers={"Cache-Control": REVALIDATE})


@router.get(f"/{PLOTLY_URL}")
def plotly_js(request: Request) -> Response:
    """plotly.min.js from the installed plotly package (no CDN: the page works without internet)."""
    headers = {"Cache-Control": CACHE_FOREVER, "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(_plotly_gzip(), media_type="text/javascript; charset=utf-8", headers=headers)
    return FileResponse(plotly_js_path(), media_type="text/javascript; charset=utf-8", headers=headers)


@router.get("/static/{name}")
def static_file(name: str, request: Request) -> Response:
    """The page's own JS and CSS."""
    if name not in _own_files() or Path(name).suffix not in MEDIA_TYPES:
        raise StarletteHTTPException(404, f"no static file {name!r}")
    path = STATIC / name
    headers = {"Cache-Control": REVALIDATE}
    # stat now, so the ETag is known here and an unchanged file can be answered with 304.
    response = FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=headers, stat_result=path.stat())
    if request.headers.get("if-none-match") == response.headers.get("etag"):
        return Response(status_code=304, headers={**headers, "ETag": response.headers["etag"]})
    return response


@functools.cache
def _own_files() -> frozenset[str]:
    return frozenset(p.name for p in STATIC.iterdir() if p.is_file())

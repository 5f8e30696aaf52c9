"""CNNs by name: the built-in torchvision models and the ones users register (ONNX or JSON)."""

import json
import re
import threading
from collections import Counter
from datetime import datetime
from functools import lru_cache
from typing import (
    Any,
    NotRequired,  # pydantic reads typing's only from Python 3.12
    cast,
)

import psycopg2.errors
from typing_extensions import TypedDict

from shared import jobs
from shared.cnn import builtins as cnn_registry
from shared.cnn import layer_list
from shared.cnn import zoo as cnn_zoo
from shared.cnn.describer import Describer
from shared.cnn.zoo import ConvLayers
from shared.core.db import Cursor, Json, transaction
from shared.core.errors import (
    Conflict,
    ExtractionError,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServiceUnavailable,
)

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
AS_DEFINED = 0  # num_classes of a registered CNN: whatever its definition has


class CnnListed(TypedDict):
    """A CNN as GET /v1/cnns lists it: name, where it comes from, parameters, and the one size it takes if fixed."""

    name: str
    source: str  # 'torchvision', 'onnx' or 'json'
    parameters: int | None
    image_size: NotRequired[int]  # a registered CNN described at one input size
    warnings: NotRequired[list[str]]  # how an ONNX export differs from the graph training runs (eval mode)


class CustomCnn(TypedDict):
    """A registered CNN's `cnns` row: its stored definition (never run) and owner."""

    name: str
    source: str  # 'onnx' or 'json'
    definition: dict[str, Any]  # the JSON layer list, or the ONNX graph's input size
    graph: bytes | None  # the ONNX graph without its weights' values
    parameters: int | None
    owner_key_id: str | None
    created_at: datetime


INSERT_CUSTOM = """
INSERT INTO cnns (name, source, definition, graph, parameters, owner_key_id) VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (name) DO NOTHING RETURNING name"""
# Ownership (migrations/0012_api_keys.sql): %(owner)s NULL sees every CNN (admin keys, workers); a key sees its
# own and those nobody owns. Names stay unique across owners, so a name means one CNN to every process.
VISIBLE = "(%(owner)s::text IS NULL OR owner_key_id IS NULL OR owner_key_id = %(owner)s)"
SELECT_CUSTOM = f"""
SELECT name, source, definition, graph, parameters, owner_key_id, created_at FROM cnns
WHERE name = %(name)s AND {VISIBLE}"""
SELECT_CUSTOMS = f"""
SELECT name, source, definition, parameters FROM cnns WHERE source <> 'torchvision' AND {VISIBLE} ORDER BY name"""
SELECT_CUSTOM_NAMES = f"SELECT name FROM cnns WHERE source <> 'torchvision' AND name = ANY(%(names)s) AND {VISIBLE}"
# A built-in CNN gets its row the first time a job reads it (cnn_layers and cnn_workloads reference it).
UPSERT_BUILTIN = """
INSERT INTO cnns (name, source, definition) VALUES (%s, 'torchvision', %s)
ON CONFLICT (name) DO NOTHING"""
LOCK_CUSTOM = "SELECT owner_key_id FROM cnns WHERE name = %s AND source <> 'torchvision' FOR UPDATE"
DELETE_CUSTOM = "DELETE FROM cnns WHERE name = %s"


def list_all(*, owner: str | None = None) -> list[CnnListed]:
    """Built-in CNNs then registered ones (with `owner`: that key's and nobody's), with parameter counts."""
    out = [_builtin(n) for n in cnn_registry.names()]
    with transaction() as cur:
        cur.execute(SELECT_CUSTOMS, {"owner": owner})
        out += [_listed(r) for r in cur.fetchall()]
    return out


def unknown(*, names: list[str], owner: str | None = None) -> list[str]:
    """The names that are neither built in nor registered (with `owner`: by that key or nobody)."""
    rest = [n for n in names if not is_builtin(n)]
    if not rest:
        return []
    with transaction() as cur:
        cur.execute(SELECT_CUSTOM_NAMES, {"names": rest, "owner": owner})
        known = {r["name"] for r in cur.fetchall()}
    return [n for n in rest if n not in known]


def is_builtin(name: str) -> bool:
    """True for a torchvision model name."""
    return cnn_registry.get(name) is not None


def create(*, name: str, data: bytes, owner_key_id: str | None = None) -> CnnListed:
    """Register a CNN of an owner from an ONNX file or a JSON layer list; nothing in the upload is ever run."""
    if not NAME.match(name):
        raise InvalidRequest(
            f"name {name!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    if is_builtin(name):
        raise Conflict(f"{name!r} is a built-in CNN; choose another name", cnn=name)
    row: tuple[str, str, Any, bytes | None, int | None, str | None]
    if data.lstrip()[:1] in (b"{", b"["):
        layers = layer_list.parse(data)
        row = (name, "json", Json(layers.model_dump(mode="json")), None, layers.parameters, owner_key_id)
    else:
        graph, definition, parameters = checked_onnx(data)
        row = (name, "onnx", Json(definition), graph, parameters, owner_key_id)
    with transaction() as cur:
        cur.execute(INSERT_CUSTOM, row)
        if cur.fetchone() is None:
            raise Conflict(f"a CNN named {name!r} is already registered", cnn=name)
    return get_by_name(name=name)


def checked_onnx(data: bytes) -> tuple[bytes, dict[str, Any], Any]:
    """An uploaded ONNX file read as registration stores it: (stripped graph, definition, parameters), or a
    TraincastError saying why not (tests/unit/test_onnx_fuzz.py holds it to that)."""
    from shared.cnn import onnx_reader  # the onnx package: ~0.3 s of every API, worker and CLI start otherwise

    model = onnx_reader.parse(data)
    graph = onnx_reader.strip(model)
    h, w = onnx_reader.input_size(model)
    size = h if h is not None and h == w else 224
    _signatures, workload = onnx_reader.read(graph, size)  # fails now, not in a job, if unreadable
    opsets = [o.version for o in model.opset_import]
    definition = {"input_size": [h, w], "opset": opsets, "nodes": len(model.graph.node)}
    if warnings := onnx_reader.export_warnings(model):
        definition["warnings"] = warnings
    return graph, definition, workload["parameters"]


def get_by_name(*, name: str, owner: str | None = None) -> CnnListed:
    """What is known of a CNN without reading it at a size (with `owner`: 404 for another key's CNN)."""
    if is_builtin(name):
        return _builtin(name)
    return _listed(_custom(name, owner))


def check_runs(*, name: str, image_size: int, num_classes: int | None = None) -> None:
    """Raise a clear error now if a CNN cannot run at this size or with these classes, where that is known.

    Without torch: a built-in CNN is checked against shared/cnn/builtins.py (what it does not know, the job's
    planning finds and fails the job with); a registered one is read, as its readers need no torch.
    """
    if is_builtin(name):
        refused = cnn_registry.refusal(name, image_size)
        if refused:
            raise ExtractionError(refused, cnn=name, image_size=image_size)
        return
    read(name=name, image_size=image_size, num_classes=num_classes)


def read(*, name: str, image_size: int, num_classes: int | None = None) -> ConvLayers:
    """The CNN's conv layers and workload at an image size (a built-in one: imports torch, so workers only)."""
    if is_builtin(name):
        return cnn_zoo.conv_layers(name, image_size, num_classes or 1000)
    if num_classes is not None:
        raise InvalidRequest(f"num_classes applies to built-in CNNs; {name!r} has the classes its definition has")
    row = _custom(name)
    try:
        if row["source"] == "onnx":
            if row["graph"] is None:
                raise ExtractionError("its ONNX graph is not stored: register it again")
            from shared.cnn import onnx_reader

            signatures, workload = onnx_reader.read(bytes(row["graph"]), image_size)
        else:
            signatures, workload = layer_list.read(row["definition"], image_size)
    except ExtractionError as exc:
        raise ExtractionError(f"{name}: {exc.detail}", cnn=name, image_size=image_size) from exc
    counts = Counter(signatures)
    order = list(dict.fromkeys(signatures))
    return ConvLayers(tuple(order), tuple(counts[s] for s in order), workload)


def variant_classes(name: str, num_classes: int | None) -> int:
    """The num_classes key a CNN's layers are stored under."""
    return (num_classes or 1000) if is_builtin(name) else AS_DEFINED


def describe(*, name: str, image_size: int, num_classes: int | None = None, owner: str | None = None) -> dict[str, Any]:
    """A CNN's unique conv layers with their counts, and its workload, at an image size."""
    shown = get_by_name(name=name, owner=owner)  # first: another key's CNN is 404 before any work
    if is_builtin(name):
        check_runs(name=name, image_size=image_size)
        view = _builtin_view(name, image_size, num_classes or 1000)
        if "error" in view:
            error = NotFound if view.get("status") == NotFound.status else ExtractionError
            raise error(view["error"], cnn=name, image_size=image_size)
    else:
        view = read(name=name, image_size=image_size, num_classes=num_classes).view()
    return {**shown, "image_size": image_size, **view}


def default_image_size(name: str) -> int:
    """The size to show a CNN at when none is asked for."""
    builtin = cnn_registry.get(name)
    if builtin is not None:
        return builtin.default_image_size
    row = _custom(name)
    fixed = _fixed_size(row["definition"], row["source"])
    return int(fixed) if fixed else 224


def delete(*, name: str, owner: str | None = None) -> None:
    """Delete a registered CNN (with `owner`: only that key's); 409 while an unfinished job names it."""
    if is_builtin(name):
        raise Conflict(f"{name!r} is a built-in CNN; it cannot be deleted", cnn=name)
    with transaction() as cur:
        cur.execute(LOCK_CUSTOM, (name,))
        row = cur.fetchone()
        # Ownership first, so another key learns nothing of the CNN or of the jobs that use it.
        if row is None or (owner is not None and row["owner_key_id"] not in (None, owner)):
            raise NotFound(f"unknown CNN {name!r}; see GET /v1/cnns", cnn=name)
        if owner is not None and row["owner_key_id"] is None:
            raise Forbidden(
                f"CNN {name!r} was registered before API keys and belongs to nobody: an admin key deletes it"
            )
        using = jobs.open_using_cnn(name=name)
        if using:
            raise Conflict(f"CNN {name!r} is used by unfinished job(s) {', '.join(using)}; cancel them first", cnn=name)
        try:
            cur.execute(DELETE_CUSTOM, (name,))
        except psycopg2.errors.ForeignKeyViolation as exc:
            raise Conflict(f"CNN {name!r} has whole-step measurements (calibration) and is kept", cnn=name) from exc


def _builtin(name: str) -> CnnListed:
    known = cnn_registry.get(name)
    if known is None:
        raise NotFound(f"unknown CNN {name!r}; see GET /v1/cnns", cnn=name)
    return CnnListed(name=name, source="torchvision", parameters=known.parameters)


# One description at a time: each traces in a fork of the warm child (shared/cnn/describer.py), up to 0.8 GB for a
# large CNN. A request that finds it busy waits at most _CHILD_WAIT_S, then gets a 503 with Retry-After: waiting
# requests must not pile up in the API's thread pool, where any read key asking for new sizes could otherwise starve
# every other request.
_CHILD = threading.BoundedSemaphore(1)
_CHILD_WAIT_S = 2.0
_CHILD_TIMEOUT_S = 60
DESCRIBER = Describer()


@lru_cache(maxsize=512)  # errors too: asking again for a size a CNN cannot take traces nothing
def _builtin_view(name: str, image_size: int, num_classes: int) -> dict[str, Any]:
    """A built-in CNN's view or {error, status}, traced in the describing child, never here."""
    if not _CHILD.acquire(timeout=_CHILD_WAIT_S):
        raise ServiceUnavailable(
            f"busy describing another CNN at a size not seen before; retry {name} at {image_size} px shortly", cnn=name
        )
    try:
        return DESCRIBER.describe(name, image_size, num_classes, timeout_s=_CHILD_TIMEOUT_S)
    finally:
        _CHILD.release()


def _custom(name: str, owner: str | None = None) -> CustomCnn:
    with transaction() as cur:
        cur.execute(SELECT_CUSTOM, {"name": name, "owner": owner})
        row = cur.fetchone()
    if row is None or row["source"] == "torchvision":
        raise NotFound(f"unknown CNN {name!r}; see GET /v1/cnns", cnn=name)
    return cast(CustomCnn, row)


def _listed(row: Any) -> CnnListed:
    """A registered CNN's listing from its row (name, source, definition, parameters)."""
    out = CnnListed(name=row["name"], source=row["source"], parameters=row["parameters"])
    size = _fixed_size(row["definition"], row["source"])
    if size is not None:
        out["image_size"] = size
    definition = row["definition"] if isinstance(row["definition"], dict) else json.loads(row["definition"])
    if definition.get("warnings"):
        out["warnings"] = list(definition["warnings"])
    return out


def _fixed_size(definition: Any, source: str) -> int | None:
    """The one input size a registered CNN takes, if its definition fixes it."""
    definition = definition if isinstance(definition, dict) else json.loads(definition)
    if source == "json":
        # The API stores every JSON CNN with its size; a row written otherwise (the column defaults to {}) is listed
        # without one rather than failing the whole listing.
        size = definition.get("image_size")
        return int(size) if size is not None else None
    h, w = definition.get("input_size", [None, None])
    return int(h) if h is not None and h == w else None


def ensure_row(cur: Cursor, *, name: str) -> None:
    """Store a built-in CNN's row in the caller's transaction (a registered CNN has one already)."""
    if is_builtin(name):
        cur.execute(UPSERT_BUILTIN, (name, Json({"torchvision": name})))

"""Bounded inputs over real HTTP: each one gets a 4xx problem and changes nothing."""

import json
import select
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from shared.core.db import one, transaction
from tests.support.stack import Stack, broker, http
from tests.unit.test_limits import MARKER, conv_model, layer

UPLOAD_LIMIT = 3_000_000  # the limits stack's MAX_UPLOAD_BYTES; its JSON limit is the default 1 MiB
JSON_LIMIT = 1024 * 1024
GOOD: dict[str, Any] = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [8, 16], "image_size": 64}


@pytest.fixture(scope="module")
def limits_api(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """An API whose upload limit is 3 MB (other limits at their defaults)."""
    stack = Stack({**service_env, "MAX_UPLOAD_BYTES": str(UPLOAD_LIMIT)}, tmp_path_factory.mktemp("limits"))
    stack.start("api")
    stack.wait_ready()
    yield stack
    stack.stop_all()


def counts() -> tuple[int, int, int]:
    """Jobs, registered CNNs and queued messages: what a refused request must not change."""
    with transaction() as cur:
        cur.execute("SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM cnns) AS cnns")
        row = one(cur)
    return int(row["jobs"]), int(row["cnns"]), int(broker().llen("jobs"))


def assert_problem(r: Any, status: int, *words: str) -> None:
    """A problem+json answer with this status whose detail says each word."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    for word in words:
        assert word in r.json()["detail"], r.json()["detail"]


def multipart(name: str, data: bytes, boundary: str = "limitsboundary") -> tuple[bytes, bytes, str]:
    """The head and tail of a multipart form with a `name` field and a `file`, and its content type."""
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f.json"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    return head + data, f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def raw_request(stack: Stack, head: str, chunks: Iterator[bytes], budget: int) -> tuple[int, bytes, int]:
    """Send a request over a raw socket, chunk by chunk, until the server answers or `budget` bytes went out.

    Returns (status, response bytes, body bytes sent). The socket timeout only guards against a hang.
    """
    auth = http.headers.get("Authorization")
    head += f"Authorization: {auth}\r\n" if auth else ""
    sent = 0
    reply = b""
    with socket.create_connection(("127.0.0.1", stack.port), timeout=30) as sock:
        sock.sendall(head.encode() + b"\r\n")
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0] or sent > budget:
                break  # the server answered (or never will)
            try:
                sock.sendall(chunk)
            except OSError:
                break  # the server stopped reading: its answer is on the way
            sent += len(chunk)
        while b"\r\n\r\n" not in reply:
            more = sock.recv(65536)
            if not more:
                break
            reply += more
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1") else 0
    return status, reply, sent


def forever(chunk: bytes, chunked: bool = True) -> Iterator[bytes]:
    """The same body chunk again and again, in HTTP chunked framing or plain."""
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if chunked else chunk
    while True:
        yield framed


def test_json_body_over_the_limit_is_413(limits_api: Stack) -> None:
    """A 2 MB job request (Content-Length declared) is a 413 problem; nothing is stored or queued."""
    before = counts()
    body = json.dumps({**GOOD, "cnns": ["resnet18"] * 100_000}).encode()
    assert len(body) > JSON_LIMIT
    r = http.post(f"{limits_api.url}/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert_problem(r, 413, f"{len(body)} bytes", f"{JSON_LIMIT} bytes")
    assert counts() == before


def test_declared_length_is_refused_before_the_body_is_read(limits_api: Stack) -> None:
    """A declared 10 GB body is answered 413 after a few bytes: the server never waits for the rest."""
    head = f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {10 * 1024**3}\r\n"
    status, reply, sent = raw_request(limits_api, head, forever(b" " * 1024, chunked=False), budget=64 * 1024**2)
    assert status == 413 and b"application/problem+json" in reply
    assert sent < 64 * 1024**2


def test_chunked_json_body_is_cut_off(limits_api: Stack) -> None:
    """A chunked body with no Content-Length is cut off with 413 once past the limit, not buffered whole."""
    before = counts()
    head = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
    chunks = forever(b" " * 65536)
    status, reply, sent = raw_request(limits_api, head, chunks, budget=64 * 1024**2)
    assert status == 413 and b"application/problem+json" in reply
    assert JSON_LIMIT < sent < 64 * 1024**2
    assert counts() == before


def test_chunked_upload_is_cut_off_and_a_small_one_registers(limits_api: Stack) -> None:
    """A chunked multipart upload (httpx streams a generator body) over MAX_UPLOAD_BYTES is 413; under it, 201."""
    before = counts()
    name = f"chunked-{uuid.uuid4().hex[:8]}"
    payload = b'{"image_size": 32, "layers": [' + layer(0, 1).encode() + b"]" + b" " * (2 * UPLOAD_LIMIT) + b"}"
    head, tail, content_type = multipart(name, payload)

    def stream(*parts: bytes) -> Iterator[bytes]:
        for part in parts:
            for i in range(0, len(part), 65536):
                yield part[i : i + 65536]

    r = http.post(f"{limits_api.url}/v1/cnns", content=stream(head, tail), headers={"content-type": content_type})
    assert "content-length" not in r.request.headers and r.request.headers["transfer-encoding"] == "chunked"
    assert_problem(r, 413, f"{UPLOAD_LIMIT} bytes")
    assert counts() == before
    head, tail, content_type = multipart(name, b'{"image_size": 32, "layers": [' + layer(0, 3).encode() + b"]}")
    r = http.post(f"{limits_api.url}/v1/cnns", content=stream(head, tail), headers={"content-type": content_type})
    assert r.status_code == 201, r.text


def test_endless_chunked_upload_is_cut_off(limits_api: Stack) -> None:
    """An upload that never ends is answered 413 once past MAX_UPLOAD_BYTES, not spooled for ever."""
    before = counts()
    head, _tail, content_type = multipart(f"endless-{uuid.uuid4().hex[:8]}", b"{")
    request = f"POST /v1/cnns HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n"

    def chunks() -> Iterator[bytes]:
        yield f"{len(head):x}\r\n".encode() + head + b"\r\n"
        yield from forever(b" " * 65536)

    status, reply, sent = raw_request(limits_api, request, chunks(), budget=64 * 1024**2)
    assert status == 413 and b"application/problem+json" in reply
    assert UPLOAD_LIMIT < sent < 64 * 1024**2
    assert counts() == before


def test_layer_list_over_the_json_limit_is_413(limits_api: Stack) -> None:
    """A JSON layer list under the upload limit but over the JSON limit is refused before it is parsed."""
    before = counts()
    data = b'{"image_size": 32, "layers": [' + layer(0, 1).encode() + b"]" + b" " * (JSON_LIMIT + 10) + b"}"
    r = http.post(f"{limits_api.url}/v1/cnns", data={"name": "big-list"}, files={"file": ("l.json", data)})
    assert_problem(r, 413, "JSON layer list", f"{JSON_LIMIT} bytes")
    assert counts() == before


def test_layer_counts_are_not_expanded(limits_api: Stack) -> None:
    """The 10 KB probe: 100 layers x 100,000 repeats registers and describes as 100 entries with counts."""
    name = f"repeats-{uuid.uuid4().hex[:8]}"
    data = ('{"image_size": 32, "layers": [' + ", ".join(layer(i, 100_000) for i in range(100)) + "]}").encode()
    assert len(data) < 10_000
    r = http.post(f"{limits_api.url}/v1/cnns", data={"name": name}, files={"file": ("l.json", data)})
    assert r.status_code == 201, r.text
    described = http.get(f"{limits_api.url}/v1/cnns/{name}").json()
    assert described["conv_count"] == 10_000_000 and described["unique_signatures"] == 100
    assert {entry["count"] for entry in described["layers"]} == {100_000}


def test_uploaded_onnx_stores_no_tensor_data(limits_api: Stack) -> None:
    """What the database holds of an uploaded ONNX graph has shapes, never the constants' bytes."""
    name = f"consts-{uuid.uuid4().hex[:8]}"
    data = conv_model().SerializeToString()
    r = http.post(f"{limits_api.url}/v1/cnns", data={"name": name}, files={"file": ("m.onnx", data)})
    assert r.status_code == 201, r.text
    with transaction() as cur:
        cur.execute("SELECT graph, definition::text AS definition FROM cnns WHERE name = %s", (name,))
        row = one(cur)
    marker = np.float32(MARKER).tobytes()
    assert data.count(marker) > 1000 and marker not in bytes(row["graph"]) and len(bytes(row["graph"])) < 1000
    described = http.get(f"{limits_api.url}/v1/cnns/{name}", params={"image_size": 32}).json()
    assert described["conv_count"] == 1 and described["layers"][0]["out_channels"] == 8


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"dataset_size": 10**400}, "dataset_size"),
        ({"epochs": 10**40}, "epochs"),
        ({"cnns": ["resnet18\u0000"]}, "CNN name"),
        ({"machines": ["local\u0000"]}, "machine type name"),
        ({"cnns": ["vit_b_16"], "image_size": 256}, "vit_b_16 cannot run on 256x256"),
        (
            {"cnns": [f"cnn{i}" for i in range(10)], "machines": [f"m{i}" for i in range(30)],
             "batch_sizes": {"min": 1, "max": 1000}},
            "300000 prediction points",
        ),
    ],
)  # fmt: skip
def test_job_probes_are_422(limits_api: Stack, change: dict[str, Any], words: str) -> None:
    """Overflowing numbers, NUL in names, a CNN that cannot run at the size, too many points: 422, no job."""
    before = counts()
    body = json.dumps({**GOOD, **change})
    if "dataset_size" in change:
        body = body.replace(str(10**400), "1e400")  # the float form of the probe, then the int form
        r = http.post(f"{limits_api.url}/v1/jobs", content=body, headers={"content-type": "application/json"})
        assert_problem(r, 422, words)
        body = json.dumps({**GOOD, **change})
    r = http.post(f"{limits_api.url}/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert_problem(r, 422, words)
    if "prediction points" in words:
        assert "at most 100000" in r.json()["detail"] and "293 MB" in r.json()["detail"]  # the default, the size
    assert counts() == before


def test_duplicate_batch_sizes_are_stored_merged(limits_api: Stack) -> None:
    """[16, 8, 8, 16] is stored as [8, 16]."""
    r = http.post(f"{limits_api.url}/v1/jobs", json={**GOOD, "batch_sizes": [16, 8, 8, 16]})
    assert r.status_code == 202, r.text
    job = http.get(f"{limits_api.url}{r.headers['location']}").json()
    assert job["request"]["batch_sizes"] == [8, 16]


@pytest.mark.parametrize(
    "path", ["/v1/cnns/res%00net18", "/v1/machines/loc%00al", "/v1/cnns/res%0Anet", "/v1/jobs?x=%00"]
)
def test_control_characters_in_the_url_are_422(limits_api: Stack, path: str) -> None:
    """A NUL or newline in a name in the URL is a 422 problem, not a 500 from PostgreSQL."""
    assert_problem(http.get(f"{limits_api.url}{path}"), 422, "control character")


def test_nul_in_a_machine_registration_is_422(limits_api: Stack) -> None:
    """POST /v1/machines with a NUL in its name or GPU name is a 422 problem."""
    figures = {
        "name": "nul-box", "gpu": "My GPU", "gpu_count": 1, "gpu_memory_gib": 16, "gpu_fp32_tflops": 10,
        "gpu_fp16_tflops": 20, "gpu_mem_bandwidth_gbs": 900, "gpu_sm_count": 80, "gpu_l2_mib": 6,
        "gpu_tdp_watts": 300, "price_usd_per_hour": 1,
    }  # fmt: skip
    for field, value in (("name", "nul\u0000box"), ("gpu", "GPU\u0000")):
        assert_problem(http.post(f"{limits_api.url}/v1/machines", json={**figures, field: value}), 422, field)
    assert http.get(f"{limits_api.url}/v1/machines/nul-box").status_code == 404


def test_nul_in_an_idempotency_key_never_reaches_the_app(limits_api: Stack) -> None:
    """The HTTP parser refuses a NUL in a header (400) before any route or database sees it."""
    before = counts()
    body = json.dumps(GOOD)
    head = (
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: a\x00b\r\n"
        f"Content-Length: {len(body)}\r\n"
    )
    status, _reply, _sent = raw_request(limits_api, head, iter([body.encode(), b""]), budget=len(body))
    assert 400 <= status < 500
    assert counts() == before


@pytest.mark.parametrize(("value", "code"), [("a\x1bb", "0x1b"), ("del\x7f", "0x7f"), ("tab\there", "0x09")])
def test_control_characters_that_reach_the_app_are_422(limits_api: Stack, value: str, code: str) -> None:
    """ESC, DEL or a tab in an Idempotency-Key pass the HTTP parser; the app refuses them with a 422 problem
    naming the header and the character, and stores nothing."""
    before = counts()
    r = http.post(f"{limits_api.url}/v1/jobs", json=GOOD, headers={"Idempotency-Key": value})
    assert_problem(r, 422, "idempotency-key", "control character", code)
    assert counts() == before

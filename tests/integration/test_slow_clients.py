"""Slow clients: a request's head and body have deadlines, over raw sockets against a real API."""

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.integration.test_limits import GOOD, counts
from tests.support.stack import Stack, http

HEAD_S = 1.0  # this module's API_HEADER_TIMEOUT_S
BODY_S = 1.5  # and its API_BODY_TIMEOUT_S
# Before the deadlines a half-sent request was held for as long as the client liked: the socket gives up first.
GIVE_UP_S = 8.0


@pytest.fixture(scope="module")
def slow_api(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """An API with short head and body deadlines."""
    env = {**service_env, "API_HEADER_TIMEOUT_S": str(HEAD_S), "API_BODY_TIMEOUT_S": str(BODY_S)}
    stack = Stack(env, tmp_path_factory.mktemp("slow"))
    stack.start("api")
    stack.wait_ready()
    yield stack
    stack.stop_all()


def until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed (monotonic)."""
    reply = b""
    while more := sock.recv(65536):
        reply += more
    return reply, time.monotonic()


def status_and_body(reply: bytes) -> tuple[int, dict[str, object]]:
    """An HTTP/1.1 reply's status and its JSON body."""
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def connect(stack: Stack) -> socket.socket:
    """A raw connection to the API that gives up after GIVE_UP_S without a byte."""
    return socket.create_connection(("127.0.0.1", stack.port), timeout=GIVE_UP_S)


def test_half_a_head_gets_408_and_the_connection_closes(slow_api: Stack) -> None:
    """A request line and part of the headers, then nothing: 408 problem+json within the deadline, then closed."""
    with connect(slow_api) as sock:
        began = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        reply, closed = until_closed(sock)
    status, body = status_and_body(reply)
    assert status == 408 and b"application/problem+json" in reply
    assert f"within {HEAD_S:g} s" in str(body["detail"])
    assert HEAD_S * 0.9 <= closed - began < HEAD_S + 3


def test_a_head_sent_a_byte_at_a_time_is_cut_off_at_its_deadline(slow_api: Stack) -> None:
    """Bytes arriving do not move the deadline (uvicorn's keep-alive timer did): closed ~HEAD_S after the first."""
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    with connect(slow_api) as sock:
        began = time.monotonic()
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break  # closed on us: the answer is waiting
            time.sleep(0.1)
        reply, closed = until_closed(sock)
    assert status_and_body(reply)[0] == 408
    assert closed - began < HEAD_S + 3


def test_a_connection_that_sends_nothing_is_closed_quietly(slow_api: Stack) -> None:
    """An unused (pre)connection is closed at the deadline without a response, as a browser expects."""
    with connect(slow_api) as sock:
        began = time.monotonic()
        reply, closed = until_closed(sock)
    assert reply == b"" and closed - began < HEAD_S + 3


def test_a_body_that_stops_arriving_gets_408_and_stores_nothing(slow_api: Stack) -> None:
    """A job whose body stops halfway: 408 naming the deadline once it passes, the connection closed, no job."""
    before = counts()
    body = json.dumps(GOOD).encode()
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"Authorization: {http.headers['Authorization']}\r\n\r\n"
    ).encode()
    with connect(slow_api) as sock:
        sock.sendall(head + body[: len(body) // 2])
        began = time.monotonic()
        reply, closed = until_closed(sock)
    status, problem = status_and_body(reply)
    assert status == 408, reply
    assert problem["detail"] == f"request body did not arrive within {BODY_S:g} s"
    assert BODY_S * 0.9 <= closed - began < BODY_S + 3
    assert counts() == before


def test_whole_requests_on_a_kept_alive_connection_and_a_long_poll_are_untouched(slow_api: Stack) -> None:
    """Requests that arrive whole are answered however long the connection lives between them, and a long poll
    longer than both deadlines answers (its reads after the body wait for a disconnect, which has no deadline)."""
    job = http.post(f"{slow_api.url}/v1/jobs", json=GOOD)  # no worker here: it stays queued
    assert job.status_code == 202, job.text
    url = f"{slow_api.url}/v1/jobs/{job.json()['id']}"
    began = time.monotonic()
    polled = http.get(url, params={"wait": HEAD_S + BODY_S + 0.5})
    assert polled.status_code == 200 and time.monotonic() - began >= HEAD_S + BODY_S
    time.sleep(HEAD_S * 0.5)
    assert http.get(f"{slow_api.url}/healthz").status_code == 200

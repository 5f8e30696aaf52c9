"""Built-in CNNs described at a new size by a warm child process: torch is imported once, each trace runs in a fork.

Importing torch and torchvision takes ~3 s and the trace itself 0.04-0.7 s, so a fresh interpreter per size spent
nearly all its time importing. The child (`python -m shared.cnn.describer`) imports them once, then for each request
line forks: the fork traces and exits, so its memory goes with it and a crash or a kill loses only that request. The
child leaves after API_DESCRIBE_WARM_S without a request (torch's ~0.4 GB is not held by an idle API), and is started
again on the next one. The API itself never imports torch.

Protocol: one JSON line in, `[name, image_size, num_classes]`; one JSON line out, the view or `{error, status}` as
shared/cnn/zoo.py's main prints it, or `{crashed: why}` when the fork died without answering.
"""

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any

from shared.core.errors import TraincastError
from shared.core.settings import get_settings


class Describer:
    """The API's handle on the warm child; one request at a time (its own lock, which the idle timer also takes;
    shared/cnn/registry.py's semaphore turns a wait for it into a 503)."""

    def __init__(self, warm_s: float | None = None) -> None:
        self.warm_s = warm_s  # None: the setting, read at each request
        self._proc: subprocess.Popen[bytes] | None = None
        self._guard = threading.Lock()
        self._timer: threading.Timer | None = None
        self.started = 0  # children started, for whoever wants to know how often torch was imported

    def describe(self, name: str, image_size: int, num_classes: int, *, timeout_s: float) -> dict[str, Any]:
        """The view of a built-in CNN at a size, or {error, status}; TraincastError when the child fails."""
        with self._guard:
            if self._timer is not None:
                self._timer.cancel()
            proc = self._child()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps([name, image_size, num_classes]).encode() + b"\n")
                proc.stdin.flush()
                line = _read_line(proc.stdout, timeout_s)
            except (OSError, TimeoutError) as exc:
                self._close()
                why = "timed out" if isinstance(exc, TimeoutError) else "stopped"
                raise TraincastError(f"reading {name} at {image_size} px failed: the describing process {why}") from exc
            warm_s = get_settings().api_describe_warm_s if self.warm_s is None else self.warm_s
            if warm_s > 0:
                self._timer = threading.Timer(warm_s, self.close_if_idle)
                self._timer.daemon = True
                self._timer.start()
            else:
                self._close()
        return _answered(line, name, image_size)

    def close_if_idle(self) -> None:
        """Stop the child unless a request holds it."""
        if self._guard.acquire(blocking=False):
            try:
                self._close()
            finally:
                self._guard.release()

    @property
    def running(self) -> bool:
        """Whether a warm child is there now."""
        return self._proc is not None and self._proc.poll() is None

    def _child(self) -> "subprocess.Popen[bytes]":
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "shared.cnn.describer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                start_new_session=True,  # its own group: a timeout kills the child and the fork it is waiting on
            )  # fmt: skip
            self.started += 1
        return self._proc

    def _close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def _answered(line: bytes, name: str, image_size: int) -> dict[str, Any]:
    """The child's answer: the view or {error, status}; TraincastError when the trace died."""
    out: dict[str, Any] = json.loads(line)
    if "crashed" in out:
        raise TraincastError(f"reading {name} at {image_size} px failed: {out['crashed']}", cnn=name)
    return out


def _read_line(stream: IO[bytes], timeout_s: float) -> bytes:
    """One line from the child within the deadline (TimeoutError), or OSError when it ended without one."""
    deadline = time.monotonic() + timeout_s
    fd, buffer = stream.fileno(), b""
    while not buffer.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise OSError("the describing process ended")
        buffer += chunk
    return buffer


def _answer(request: list[Any]) -> bytes:
    """One request traced in a fork of this process: the line to send back."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the fork: trace, write, leave without running the parent's cleanup
        os.close(read_end)
        code = 0
        try:
            from shared.cnn import zoo

            name, size, classes = str(request[0]), int(request[1]), int(request[2])
            try:
                out = zoo.conv_layers(name, size, classes).view()
            except (zoo.ExtractionError, zoo.NotFound) as exc:
                out = {"error": exc.detail, "status": exc.status}
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(json.dumps(out).encode() + b"\n")
        except BaseException:  # noqa: BLE001 - whatever it was, the parent answers `crashed`
            code = 1
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        line = pipe.read()
    _, status = os.waitpid(pid, 0)
    if line.endswith(b"\n"):
        return line
    code = os.waitstatus_to_exitcode(status)
    why = f"killed by signal {-code}" if code < 0 else f"exit {code}"
    return json.dumps({"crashed": f"the tracing process ended without an answer ({why})"}).encode() + b"\n"


def serve() -> int:
    """The child's loop: import torch once, answer each request line on stdin until it closes."""
    import torch  # noqa: F401 - imported once here, so every fork has it
    import torchvision  # noqa: F401

    from shared.cnn import zoo  # noqa: F401

    for raw in sys.stdin.buffer:
        sys.stdout.buffer.write(_answer(json.loads(raw)))
        sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve())

"""The agent's watch on its own instance: spot interruption and rebalance notices, and idleness.

On a notice, or after AGENT_IDLE_EXIT_S without work, the agent leaves the way SIGTERM makes it
leave: the window being timed is finished and stored, the rest of the task goes back to the queue
at once, the agent is marked stopped with the reason, and the process exits; the fleet's systemd
unit then powers the instance off. This needs no controller and no database to stop spending.
"""

import json
import logging
import os
import signal
import threading
import time
import urllib.error
import urllib.request

from gpu_agent import lifecycle
from shared.core.settings import get_settings

log = logging.getLogger(__name__)
TOKEN_TTL_S = 21600
# 404 until AWS decides; then a JSON document (see "Spot Instance interruption notices").
SPOT_ACTION = "meta-data/spot/instance-action"
REBALANCE = "meta-data/events/recommendations/rebalance"


class Metadata:
    """A small IMDSv2 client (the endpoint honours AWS_EC2_METADATA_SERVICE_ENDPOINT, as botocore does)."""

    def __init__(self, endpoint: str | None = None, timeout_s: float = 2.0) -> None:
        base = endpoint or os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or "http://169.254.169.254"
        self.base = base.rstrip("/") + "/latest/"
        self.timeout_s = timeout_s
        self._token: str | None = None
        self._token_at = 0.0

    def _fresh_token(self) -> str:
        if self._token is None or time.monotonic() - self._token_at > TOKEN_TTL_S / 2:
            req = urllib.request.Request(
                self.base + "api/token",
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)},
            )
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                self._token = resp.read().decode()
            self._token_at = time.monotonic()
        return self._token

    def get(self, path: str) -> str | None:
        """The document at path, or None when the service says 404 (nothing announced)."""
        req = urllib.request.Request(self.base + path, headers={"X-aws-ec2-metadata-token": self._fresh_token()})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return str(resp.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code == 401:
                self._token = None  # expired or rotated: the next call asks for a new one
            raise


def notice(md: Metadata) -> str | None:
    """Why this instance should be left now (a spot interruption or rebalance notice), or None."""
    action = md.get(SPOT_ACTION)
    if action is not None:
        doc = _json(action)
        return f"spot interruption notice: {doc.get('action', 'terminate')} at {doc.get('time', '?')}"
    rebalance = md.get(REBALANCE)
    if rebalance is not None:
        return f"rebalance recommendation at {_json(rebalance).get('noticeTime', '?')}"
    return None


def _json(text: str) -> dict[str, str]:
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def leave(reason: str) -> None:
    """Stop as on SIGTERM, recording why: finish the window, hand back the rest, mark stopped, exit."""
    log.warning("leaving: %s", reason)
    lifecycle.request_stop(reason)
    os.kill(os.getpid(), signal.SIGTERM)


def watch(stop: threading.Event) -> None:
    """Poll the instance metadata and the idle clock until a reason to leave comes (or stop is set)."""
    s = get_settings()
    md = Metadata() if s.agent_watch_instance else None
    while not stop.wait(s.agent_imds_poll_s):
        reason = None
        if md is not None:
            try:
                reason = notice(md)
            except (OSError, urllib.error.URLError) as exc:  # a hiccup of the metadata service: ask again
                log.warning("instance metadata unavailable: %s", exc)
        if reason is None and s.agent_idle_exit_s > 0 and lifecycle.idle_for() > s.agent_idle_exit_s:
            reason = f"idle for {s.agent_idle_exit_s:.0f} s with no work"
        if reason is not None:
            leave(reason)
            return


def start() -> threading.Event | None:
    """Start the watch if this agent runs on an instance or may leave when idle; returns its stop event."""
    s = get_settings()
    if not s.agent_watch_instance and s.agent_idle_exit_s <= 0:
        return None
    stop = threading.Event()
    threading.Thread(target=watch, args=(stop,), name="agent-instance-watch", daemon=True).start()
    return stop

"""Celery wiring all processes share, and sending tasks by name.

The API never imports worker or agent code: it sends tasks by the names below.
"""

import logging
import re
import ssl
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from celery import Celery

from shared.core.errors import ServiceUnavailable
from shared.core.settings import get_settings
from shared.jobs.request import MACHINE_NAME

log = logging.getLogger(__name__)

PLAN_JOB = "worker.plan_job"
ADVANCE_JOBS = "worker.advance_jobs"
RECONCILE = "worker.reconcile"
REFIT = "worker.refit"
WARM = "worker.warm"
BENCH_LAYERS = "gpu_agent.bench_layers"
MEASURE_STEPS = "gpu_agent.measure_steps"
BENCH_OPS = "gpu_agent.bench_ops"
BENCH_INPUT = "gpu_agent.bench_input"
BENCH_ALLREDUCE = "gpu_agent.bench_allreduce"


_MACHINE_NAME = re.compile(MACHINE_NAME.removeprefix("^").removesuffix("$"))


def bench_queue(machine_type: str) -> str:
    """The queue the agents of a machine type consume."""
    return f"bench.{machine_type}"


# Flags of every `celery worker` (jobs workers and agents; scripts/up.sh, docker-compose.yml and deploy/k8s spell them
# out): nothing here asks workers about each other (no revokes, remote control or events), so they skip Celery's
# start-up handshake, which cost each start a second of waiting for replies before it took a task.
WORKER_FLAGS = ("--without-mingle", "--without-gossip")
# kombu's Redis transport: a message of priority > 0 waits in "<queue>\x06\x16<step>".
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)


def queue_keys(queue: str) -> list[str]:
    """The Redis lists holding a queue's waiting messages: the queue's own and its priority steps'."""
    return [queue] + [f"{queue}{PRIORITY_SEP}{step}" for step in PRIORITY_STEPS]


def queue_depths(queues: list[str], client: redis.Redis | None = None) -> dict[str, int]:
    """Messages waiting in each queue (priority lists included), in one round trip of LLENs."""
    pipe = (client or redis_client(socket_connect_timeout=2, socket_timeout=2)).pipeline(transaction=False)
    for queue in queues:
        for key in queue_keys(queue):
            pipe.llen(key)
    counts = iter(pipe.execute())
    return {queue: sum(int(next(counts)) for _key in queue_keys(queue)) for queue in queues}


def valid_machine_type(name: str) -> bool:
    """Whether name is a machine type name the API would accept (shared.jobs.request.MACHINE_NAME)."""
    return _MACHINE_NAME.fullmatch(name) is not None


def agent_unacked_keys(machine_type: str) -> dict[str, str]:
    """kombu's transport options naming the keys that hold a machine type's agents' unacknowledged messages.

    kombu keeps them in one hash (plus an index and a lock), shared by every consumer unless these
    are set; Redis ACLs grant keys, not hash fields, so each type gets keys of its own that one
    pattern, agent_unacked_pattern(), grants. The ':' ends the type (no machine type name has one):
    g5's pattern must not match g5.xlarge's keys.
    """
    if not valid_machine_type(machine_type):
        # A ':' or a glob character in it would let its pattern reach another type's keys.
        raise ValueError(f"{machine_type[:80]!r} is not a machine type name")
    base = f"unacked.{bench_queue(machine_type)}:"
    return {"unacked_key": f"{base}messages", "unacked_index_key": f"{base}index", "unacked_mutex_key": f"{base}mutex"}


def agent_unacked_pattern(machine_type: str) -> str:
    """The Redis ACL key pattern (without '~') granting exactly agent_unacked_keys(machine_type)."""
    return f"unacked.{bench_queue(machine_type)}:*"


_CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_FALSE = {"0", "false", "no", "off"}
_warned: set[str] = set()


def redis_tls(url: str) -> tuple[str, dict[str, Any] | None]:
    """The URL without its ssl_* query parameters, and the TLS options it asks for (None unless rediss://).

    The options always verify the certificate and host name unless the URL says ssl_cert_reqs=none,
    and use REDIS_CA_FILE when the URL names no ssl_ca_certs.
    """
    parts = urlsplit(url)
    if parts.scheme != "rediss":
        return url, None
    query = parse_qsl(parts.query, keep_blank_values=True)
    options: dict[str, Any] = {k: v for k, v in query if k.startswith("ssl_")}
    # Kombu lets ssl_* in the URL replace broker_use_ssl whole (losing the CA), and reads a bare
    # rediss:// as CERT_NONE: so the options travel apart from the URL, complete.
    url = urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in query if not k.startswith("ssl_")])))
    reqs = str(options.get("ssl_cert_reqs", "required")).lower().removeprefix("cert_")
    if reqs not in _CERT_REQS:
        raise ValueError(f"REDIS_URL has ssl_cert_reqs={reqs!r}; use required (or none for local development)")
    options["ssl_cert_reqs"] = _CERT_REQS[reqs]
    if "ssl_check_hostname" in options:
        options["ssl_check_hostname"] = str(options["ssl_check_hostname"]).lower() not in _FALSE
    options.setdefault("ssl_check_hostname", True)
    ca_file = get_settings().redis_ca_file
    if ca_file:
        options.setdefault("ssl_ca_certs", ca_file)
    host = parts.hostname or ""
    if (reqs == "none" or not options["ssl_check_hostname"]) and host not in _warned:
        _warned.add(host)
        log.warning(
            "REDIS_URL for %s turns TLS verification off (ssl_cert_reqs=%s, ssl_check_hostname=%s): anyone on the "
            "path can impersonate Redis; use it for local development only",
            host,
            reqs,
            options["ssl_check_hostname"],
        )
    return url, options


def redis_client(url: str | None = None, **kwargs: Any) -> redis.Redis:
    """A Redis client for REDIS_URL (or url) that verifies the server as redis_tls() says."""
    url, tls = redis_tls(url or get_settings().redis_url)
    return redis.Redis.from_url(url, **(tls or {}), **kwargs)


def make_app(name: str, *, agent_machine_type: str | None = None) -> Celery:
    """A Celery app on our broker, with the delivery guarantees every process relies on.

    An agent's app (agent_machine_type set) keeps its unacknowledged messages under its type's keys.
    """
    settings = get_settings()
    transport: dict[str, Any] = {"visibility_timeout": settings.visibility_timeout_s}
    if agent_machine_type is not None:
        transport |= agent_unacked_keys(agent_machine_type)
    broker_url, tls = redis_tls(settings.redis_url)
    app = Celery(name, broker=broker_url)
    if tls is not None:
        # Results are never stored, but should a backend be set it gets the same verification.
        app.conf.update(broker_use_ssl=tls, redis_backend_use_ssl=tls)
    app.conf.update(
        # Job state lives in PostgreSQL; Celery results are never read.
        task_ignore_result=True,
        # Acknowledge after the work is stored, so a crash redelivers instead of losing it.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options=transport,
        broker_connection_retry_on_startup=True,
        task_default_queue=settings.jobs_queue,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
    )
    return app


_client: Celery | None = None


def reset_client() -> None:
    """Drop the cached sending app, so the next send() reads the settings afresh (tests switch brokers)."""
    global _client
    _client = None


def send(
    task: str,
    *,
    queue: str | None = None,
    args: list[Any] | None = None,
    priority: int = 0,
    countdown: float | None = None,
    **kwargs: Any,
) -> None:
    """Send a task by name; the caller does not need the code that runs it. priority: 0 first, up to 9 (waits in
    the queue's priority list, taken after every message of a higher priority); countdown: run no sooner (s).

    ServiceUnavailable (transient) when the broker connection is broken: the job is fine, its work is sent again.
    """
    options = {"priority": priority, "countdown": countdown}
    try:
        _send(task, queue, args, kwargs, options)
    except AttributeError:
        # kombu 5.7's Redis transport, after Redis went away, can fail inside publish with AttributeError
        # ("'NoneType' object has no attribute 'client'"): the cached app's connection is broken for good. A new
        # app connects afresh; failing again, it is an outage like any other.
        reset_client()
        try:
            _send(task, queue, args, kwargs, options)
        except AttributeError as exc:
            reset_client()
            raise ServiceUnavailable(f"the broker connection is broken: {exc}") from exc


def _send(
    task: str, queue: str | None, args: list[Any] | None, kwargs: dict[str, Any], options: dict[str, Any]
) -> None:
    global _client
    if _client is None:
        _client = make_app("traincast-client")
    _client.send_task(
        task,
        args=args or [],
        kwargs=kwargs,
        queue=queue or get_settings().jobs_queue,
        **options,
        # Fail fast when the broker is down: callers keep state in PostgreSQL and resend later.
        retry=True,
        retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
    )

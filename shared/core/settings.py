"""The one place configuration is read from the environment."""

import ipaddress
from functools import lru_cache

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Traincast settings; every field can be set by an environment variable of its name."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore")

    database_url: str = "postgresql://postgres@127.0.0.1:5432/traincast"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Queue the API and agents send job work to; agents consume bench.<machine type>.
    jobs_queue: str = "jobs"
    # The machine type a benchmark agent measures for.
    agent_machine_type: str = "local"
    # Force the agent's device ("cpu", "cuda"); empty: CUDA if present, else CPU.
    agent_device: str = ""
    # Seconds a benchmark run may spend on one phase of one layer at one batch size.
    bench_time_cap_s: float = 2.0
    # A point's timing is stable when its two lowest round medians agree within this.
    bench_target_spread: float = 0.05
    # Quiet blocks whose two lowest medians must agree for an operation to count as stable (3 once its time is spent).
    bench_stable_rounds: int = 5
    # An operation with enough quiet blocks that has not agreed after this many blocks stops (its cap in blocks).
    bench_settle_rounds: int = 15
    # A block of runs counts only if the agent's threads waited for a CPU under this share of it.
    bench_quiet_wait: float = 0.1
    # Batch sizes timed together, round-robin; the agent honours a stop only between windows.
    bench_window_points: int = 4
    # Conv or op signatures sent in one agent task (each with all its batch sizes): few round-trips per CNN.
    bench_task_signatures: int = 16
    # An agent writes its measured rows (one transaction) and tells the worker at most this often, and per task.
    bench_store_every_s: float = 1.0
    # On CUDA, record the kernels each conv phase launched (which algorithm cuDNN chose; a profiler run per point).
    bench_record_kernels: bool = True
    # Threads torch uses in the agent (0: every CPU this process may run on); recorded per row.
    agent_threads: int = 0
    # cudnn.benchmark for the agent's layer and op benchmarks (recorded in their environment); whole steps always run
    # in the setting their job asks.
    agent_cudnn_benchmark: bool = False
    # Share of the free memory one window of measurements may use. On a CPU a measurement
    # estimated above it is recorded as out of memory instead of swapping the machine to a halt.
    agent_memory_fraction: float = 0.5
    # Seconds between an agent's heartbeats, and without one after which it is not alive.
    agent_heartbeat_s: float = 5.0
    agent_alive_after_s: float = 20.0
    # A job with no progress for this long gets its missing work sent again.
    reconcile_after_s: float = 120.0
    reconcile_every_s: float = 30.0
    # Worker tasks (planning, fan-in, reconciling): past the soft limit a task's job fails with the
    # reason; the hard limit ends the process running it.
    worker_task_soft_time_limit_s: float = 600.0
    worker_task_time_limit_s: float = 660.0
    # An agent measuring one signature longer than this is taken as hung: its work is re-sent.
    bench_stuck_after_s: float = 3600.0
    # A job that ended this recently still has its queued benchmark work withdrawn by the reconciler.
    withdraw_window_s: float = 900.0
    # After a transient database error an agent waits this long, then hands its task back to the queue.
    agent_db_retry_s: float = 5.0
    # Seconds an unacknowledged message stays invisible before Redis redelivers it;
    # longer than the longest benchmark task.
    visibility_timeout_s: int = 6 * 3600
    # Largest CNN upload (ONNX file or JSON layer list) the API accepts, in bytes.
    max_upload_bytes: int = 200 * 1024 * 1024
    # API keys: requests per second a key may send (token bucket in Redis, shared by every API
    # process; a burst of one second's worth), unless the key has a rate of its own (`keys create --rate`).
    api_rate_per_key_s: float = 20.0
    # Failed authentications a client address may send a minute (a key id: ten times as many, from all addresses)
    # before its next attempts get 429 unchecked: guessing secrets costs a minute per few dozen guesses.
    api_auth_failures_per_min: float = 30.0
    # Addresses or networks of the reverse proxies in front of the API (comma-separated, e.g. "10.0.0.0/8,::1"):
    # only a request from one of them has its client taken from X-Forwarded-For. Empty: the TCP peer is the client.
    api_trusted_proxies: str = ""
    # Threads the API's sync routes (and a streamed result's reads) share; more wait their turn on the event loop.
    api_threads: int = Field(default=8, ge=1, le=200)
    # How long a thread holding the GIL keeps it while another waits (CPython's default is 5 ms): the event loop,
    # which answers /healthz, waits this long per wake-up behind busy route threads.
    api_gil_switch_ms: float = Field(default=1.0, ge=0.1, le=100)
    # How long the child that describes built-in CNNs at new sizes (shared/cnn/describer.py) stays after its last
    # request, holding torch (~0.4 GB); 0 stops it after each description (each then pays torch's import, ~3-5 s).
    api_describe_warm_s: float = Field(default=60.0, ge=0, le=86400)
    # The Celery worker's niceness (0: as started): batch work below the API on a shared host. Never the agent's,
    # whose CPU timings are measurements.
    worker_nice: int = Field(default=10, ge=0, le=19)
    # A worker that becomes ready extracts the built-in CNNs (WARM_CNNS, JSON; empty: all) at 224 px and predicts
    # their reference convs on every GPU type, a few seconds a step below any job (worker/warmup.py), so that a new
    # install's first large job reads them instead of computing them.
    warm_on_start: bool = True
    warm_cnns: list[str] = []
    # Limits per key, each replaced by the key's own (`keys create --max-jobs / --bench-seconds-per-day`):
    # jobs queued or running at once, and the benchmark seconds its jobs sent agents in the last 24 h (each
    # (signature, batch size) point a plan sends counts 3 phases x BENCH_TIME_CAP_S). Points per job: below.
    max_unfinished_jobs_per_key: int = 20
    max_bench_seconds_per_key_day: float = 3600.0
    max_batch_sizes: int = 1000
    max_batch_size: int = 4096
    # Bounded work: request bodies other than uploads, prediction points per job
    # (CNNs x machine types x batch sizes), and the nodes of an uploaded ONNX graph.
    max_json_bytes: int = 1024 * 1024
    # A point's JSON is about 1 KB (with the data-parallel and input fields): 100,000 points is a result of ~100 MB,
    # which the worker builds in memory (the API streams it). 200,000 allowed a 196 MB result.
    max_points_per_job: int = 100_000
    max_onnx_nodes: int = 20_000
    # Slow clients: a request's line and headers must arrive within this many seconds of their first byte
    # (api/server.py), a JSON body within api_body_timeout_s of the route's first read and an upload within
    # api_upload_timeout_s (api/limits.py); else 408 and the connection closes. 200 MB in 600 s: ~2.8 Mbit/s.
    api_header_timeout_s: float = Field(default=10.0, gt=0)
    api_body_timeout_s: float = Field(default=30.0, gt=0)
    api_upload_timeout_s: float = Field(default=600.0, gt=0)
    # A job that waits this long for an agent on a machine type with none alive fails, saying so.
    agent_wait_timeout_s: float = 1800.0
    # A job fails when one of its missing layer benchmarks raised this many times since it started.
    bench_max_failures: int = 3
    # EC2 instance id of the agent's host (set by the fleet's user data from the instance metadata).
    agent_instance_id: str = ""
    # Refuse to start without CUDA (a driver mismatch must not store CPU timings under a GPU type).
    # Unset: required for every machine type but "local".
    agent_require_gpu: bool | None = None
    # On an EC2 instance: watch the instance metadata for spot interruption and rebalance notices.
    agent_watch_instance: bool = False
    agent_imds_poll_s: float = 5.0
    # Exit after this long with no work (0: never); the fleet's unit then powers the instance off.
    agent_idle_exit_s: float = 0.0
    agent_log_file: str = ""  # also log here (the CloudWatch agent ships it)
    # CA certificates (PEM files) that PostgreSQL's and Redis's server certificates must chain to,
    # used when DATABASE_URL names no sslrootcert / REDIS_URL no ssl_ca_certs. The SSM parameters
    # database_ca / redis_ca (PEM text) are written to files and set these. Empty: libpq's
    # ~/.postgresql/root.crt, and for Redis the system's CAs.
    database_ca_file: str = ""
    redis_ca_file: str = ""
    # Logs: "json" (one object a line), "text", or "auto": text when stderr is a terminal, else JSON.
    log_format: str = "auto"
    log_level: str = "INFO"
    # GET /metrics answers an admin key, or this bearer token (for a Prometheus scraper; empty: admin keys only).
    metrics_token: str = ""
    # GET /metrics's figures from PostgreSQL and Redis are read again this often, in the background, from the
    # first scrape on (a scrape only formats them); 0: every scrape reads them (slower: see docs/PERFORMANCE.md).
    metrics_cache_s: float = 2.0

    # Fleet: the controller (`python -m fleet`) launches agents on AWS.
    fleet_enabled: bool = False
    fleet_name: str = "default"  # tag traincast:fleet; two deployments in one account keep apart
    fleet_region: str = "us-east-1"
    fleet_every_s: float = 30.0
    # Where to launch: an EC2 launch template per machine type (JSON object type → name or id),
    # else the AMI, subnets (tried in order on capacity errors), security groups and profile below.
    fleet_launch_templates: dict[str, str] = {}
    fleet_ami: str = ""
    fleet_subnets: list[str] = []
    fleet_security_groups: list[str] = []
    fleet_instance_profile: str = ""
    fleet_key_name: str = ""
    fleet_spot: bool = True  # spot first, on-demand when spot capacity is short
    # The agent reads its secrets from this SSM path; user data carries only the path.
    fleet_ssm_path: str = "/traincast/agent/"
    # The boot path (fleet/boot.sh): where `traincast fleet publish` put the agent's wheel
    # (s3://bucket/prefix/; empty: the AMI has it baked in at /opt/traincast/venv), a PyPI mirror,
    # PyTorch's index and its CUDA builds as "driver CUDA version=variant", newest first.
    fleet_artifact: str = ""
    fleet_pip_index_url: str = ""
    fleet_torch_index_url: str = "https://download.pytorch.org/whl"
    fleet_torch_variants: str = "13.0=cu130 12.8=cu128 12.6=cu126"
    fleet_log_group: str = ""  # CloudWatch Logs group for the boot and agent logs; empty: console only
    # An agent with no work this long exits and its instance powers off, controller or not.
    fleet_agent_idle_exit_s: float = 1800.0
    # Limits: instances per type, dollars per hour over the whole fleet (at on-demand prices,
    # the most spot can cost), seconds an instance may live, idle seconds before it goes,
    # seconds after launch before an instance without a heartbeat is an orphan.
    fleet_max_per_type: int = 2
    fleet_max_usd_per_hour: float = 10.0
    fleet_max_lifetime_s: float = 6 * 3600
    fleet_idle_s: float = 600.0
    fleet_boot_grace_s: float = 900.0
    # Queued benchmark tasks per agent before the controller wants another one.
    fleet_tasks_per_agent: int = 12  # a task holds up to bench_task_signatures (16) signatures: ~200 of them
    fleet_capacity_retry_s: float = 300.0
    # A launch refused for its configuration (permissions, AMI, quota) or a type whose instances
    # keep dying early pauses that type this long, doubling per consecutive failure up to the cap.
    fleet_backoff_s: float = 300.0
    fleet_backoff_max_s: float = 4 * 3600
    # An instance orphaned or gone within this many seconds of launch died early; this many early
    # deaths in a row (no agent of the type heartbeating in between) pause its type.
    fleet_early_death_s: float = 1200.0
    fleet_early_deaths: int = 2
    # EC2 lists a new instance late: one missing from the listing is declared gone only this long after launch.
    fleet_gone_grace_s: float = 300.0

    @field_validator("api_trusted_proxies")
    @classmethod
    def _networks(cls, value: str) -> str:
        for part in filter(None, (p.strip() for p in value.split(","))):
            try:
                ipaddress.ip_network(part, strict=False)
            except ValueError:
                raise ValueError(f"API_TRUSTED_PROXIES: {part!r} is not an address or network") from None
        return value

    def trusted_proxy_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        """API_TRUSTED_PROXIES as networks (an address is a network of one)."""
        parts = (p.strip() for p in self.api_trusted_proxies.split(","))
        return [ipaddress.ip_network(p, strict=False) for p in parts if p]


@lru_cache
def get_settings() -> Settings:
    """Settings read once per process."""
    return Settings()

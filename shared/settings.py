"""The one place configuration is read from the environment."""

from functools import lru_cache

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
    # A block of runs counts only if the agent's threads waited for a CPU under this share of it.
    bench_quiet_wait: float = 0.1
    # Batch sizes timed together, round-robin; the agent honours a stop only between windows.
    bench_window_points: int = 4
    # Threads torch uses in the agent (0: every CPU this process may run on); recorded per row.
    agent_threads: int = 0
    # Share of the free memory one window of measurements may use. On a CPU a measurement
    # estimated above it is recorded as out of memory instead of swapping the machine to a halt.
    agent_memory_fraction: float = 0.5
    # Seconds between an agent's heartbeats, and without one after which it is not alive.
    agent_heartbeat_s: float = 5.0
    agent_alive_after_s: float = 20.0
    # A job with no progress for this long gets its missing work sent again.
    reconcile_after_s: float = 120.0
    reconcile_every_s: float = 30.0
    # Seconds an unacknowledged message stays invisible before Redis redelivers it;
    # longer than the longest benchmark task.
    visibility_timeout_s: int = 6 * 3600
    # Largest CNN upload (ONNX file or JSON layer list) the API accepts, in bytes.
    max_upload_bytes: int = 200 * 1024 * 1024
    max_batch_sizes: int = 1000
    max_batch_size: int = 4096


@lru_cache
def get_settings() -> Settings:
    """Settings read once per process."""
    return Settings()

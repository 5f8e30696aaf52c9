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
    # A job with no progress for this long gets its missing work sent again.
    reconcile_after_s: float = 120.0
    reconcile_every_s: float = 30.0
    # Seconds an unacknowledged message stays invisible before Redis redelivers it;
    # longer than the longest benchmark task.
    visibility_timeout_s: int = 6 * 3600
    max_batch_sizes: int = 1000
    max_batch_size: int = 4096


@lru_cache
def get_settings() -> Settings:
    """Settings read once per process."""
    return Settings()

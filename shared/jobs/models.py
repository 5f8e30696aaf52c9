"""The shapes of a job: its status, the plan and progress the worker stores, and the public views (the result's
shape is shared/jobs/result.py, a point's shared/jobs/point.py)."""

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PlainSerializer

from shared.jobs.point import STORED
from shared.jobs.result import Result


class JobStatus(StrEnum):
    """A job's life: queued → running → succeeded, failed or canceled (the last three never change)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        """Whether the job has ended."""
        return self in TERMINAL


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED})
OPEN = (JobStatus.QUEUED, JobStatus.RUNNING)


class Plan(BaseModel):
    """What planning fixed for a job (worker/planning.py): signatures per CNN, peers, what it waits on."""

    model_config = STORED
    cnns: dict[str, list[tuple[int, int]]] = Field(description="CNN → [(conv signature id, count), …]")
    ops: dict[str, list[tuple[int, int]]] = Field(default_factory=dict, description="CNN → [(op signature id, count)]")
    optimizers: list[int] = Field(default_factory=list, description="op signature ids that are optimizer steps")
    peers: dict[str, list[str]] | None = Field(default=None, description="machine type → types with its GPU model")
    waits_on: list[str] | None = Field(default=None, description="machine types the job waits for benchmarks on")
    bench_seconds: float = Field(default=0.0, description="benchmark seconds charged to the job's key")

    def peers_of(self, machine_types: list[str]) -> dict[str, list[str]]:
        """Each machine type's GPU peers (itself alone in a plan from before peers)."""
        return self.peers or {m: [m] for m in machine_types}


class Counts(BaseModel):
    """Benchmarks a job needs, has and still waits for."""

    needed: int
    done: int
    pending: int


class MachineProgress(BaseModel):
    """One machine type's counts, and why it waits when it does."""

    model_config = STORED
    needed: int
    done: int
    pending: int
    ops_needed: int | None = None
    ops_pending: int | None = None
    agent_alive: bool | None = None
    answered_by: Literal["reference"] | None = None
    waiting_for: str | None = Field(default=None, description="set while no agent serves the machine type")
    waiting_since: str | None = Field(default=None, description="ISO time the wait for an agent began")


class Progress(BaseModel):
    """A job's progress (worker/progress.py): layer and op benchmarks in all and per machine type; {} until planned."""

    model_config = STORED
    layer_benchmarks: Counts | None = None
    op_benchmarks: Counts | None = None
    machines: dict[str, MachineProgress] = Field(default_factory=dict)


# Times as today's clients read them: ISO 8601 with the UTC offset (+00:00).
Timestamp = Annotated[datetime, PlainSerializer(lambda d: d.isoformat(), return_type=str)]


class JobSummary(BaseModel):
    """A job without its request and result: what submitting answers."""

    id: uuid.UUID
    status: JobStatus
    progress: Progress | None = None
    created_at: Timestamp
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None


class JobListed(JobSummary):
    """A job in a list: its request too."""

    request: dict[str, Any] = Field(description="the request as submitted (POST /v1/jobs's body, normalised)")


class PredictionsPage(BaseModel):
    """Which slice of result.predictions a paged response holds."""

    offset: int
    limit: int
    total: int


class Job(JobListed):
    """A job with its result (succeeded) or error (failed)."""

    result: Result | None = None
    error: str | None = None
    predictions_page: PredictionsPage | None = Field(
        default=None, description="set when predictions_offset or predictions_limit asked for one page of them"
    )


class JobList(BaseModel):
    """A page of jobs, newest first."""

    jobs: list[JobListed]
    next_cursor: str | None = None

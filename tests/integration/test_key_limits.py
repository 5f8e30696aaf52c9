"""Limits per API key: unfinished jobs, points per job, benchmark seconds a day, the CLI."""

import json
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from shared import agents, jobs, keys
from shared.core.db import one, transaction
from shared.core.settings import get_settings
from shared.jobs.request import JobRequest
from tests.integration.test_keys import TRAINCAST
from tests.support.jobflow import message_body
from tests.support.stack import Stack, at_once, bearer, broker
from worker import planning

MAX_JOBS = 2  # this module's API defaults: small, so a few requests reach them
MAX_POINTS = 6
BENCH_BUDGET_S = 100.0
JOB: dict[str, Any] = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [8], "image_size": 64}
# A job's charge, as worker/planning.py records it, and its age, for jobs made here without a worker.
CHARGE = "UPDATE jobs SET status = %s, plan = %s, created_at = now() - %s * interval '1 hour' WHERE id = %s"


@pytest.fixture(scope="module")
def limits_stack(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """An API (no worker: its jobs stay queued) with small per-key defaults."""
    env = {
        **service_env,
        "MAX_UNFINISHED_JOBS_PER_KEY": str(MAX_JOBS),
        "MAX_POINTS_PER_JOB": str(MAX_POINTS),
        "MAX_BENCH_SECONDS_PER_KEY_DAY": str(BENCH_BUDGET_S),
    }
    stack = Stack(env, tmp_path_factory.mktemp("key-limits"))
    stack.start("api")
    stack.wait_ready()
    yield stack
    stack.stop_all()


def new_key(scope: str = "submit", **limits: Any) -> str:
    """A fresh fast key with these limits of its own (none: the defaults)."""
    name = f"limits-{scope}-{uuid.uuid4().hex[:6]}"
    _row, key = keys.create(name=name, scope=scope, rate_per_s=10_000.0, **limits)
    return key


def key_id(key: str) -> str:
    """The public id of a key."""
    return key.split("_")[1]


def submit(stack: Stack, key: str, body: dict[str, Any] | None = None, **headers: str) -> httpx.Response:
    """POST /v1/jobs with exactly this key."""
    with httpx.Client(timeout=30) as client:
        return client.post(f"{stack.url}/v1/jobs", json=body or JOB, headers=bearer(key) | headers)


def owned_jobs(key: str) -> int:
    """Jobs stored for a key: what a refused submission must not change."""
    with transaction() as cur:
        cur.execute("SELECT count(*) AS n FROM jobs WHERE owner_key_id = %s", (key_id(key),))
        return int(one(cur)["n"])


def assert_refused(r: httpx.Response, status: int, *words: str) -> None:
    """A problem+json refusal with this status whose detail says each word."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    for word in words:
        assert word in r.json()["detail"], r.json()["detail"]


def sizes(n: int) -> dict[str, Any]:
    """JOB with n batch sizes: n prediction points."""
    return JOB | {"batch_sizes": list(range(1, n + 1))}


def charged_job(key: str, *, seconds: float, hours_ago: float = 0.0, status: str = "succeeded") -> None:
    """A finished job of a key whose plan sent `seconds` of benchmarks, made `hours_ago`."""
    job, _ = jobs.create(request=JobRequest.model_validate(JOB), owner_key_id=key_id(key))
    with transaction() as cur:
        cur.execute(CHARGE, (status, json.dumps({"bench_seconds": seconds}), hours_ago, job["id"]))


def test_unfinished_jobs_over_the_limit_are_429(limits_stack: Stack) -> None:
    """The third unfinished job of a key limited to two is 429 with Retry-After naming both numbers and
    storing nothing; another key is not counted, a retry is answered, a canceled job frees a place."""
    a, b = new_key(), new_key()
    first = submit(limits_stack, a, JOB | {"epochs": 1}, **{"Idempotency-Key": "limits-1"})
    assert first.status_code == 202, first.text
    assert submit(limits_stack, a, JOB | {"epochs": 2}).status_code == 202
    stored = owned_jobs(a)
    refused = submit(limits_stack, a, JOB | {"epochs": 3})
    assert_refused(refused, 429, f"{MAX_JOBS} unfinished jobs", f"at most {MAX_JOBS} at once", key_id(a))
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["unfinished_jobs"] == MAX_JOBS and refused.json()["limit"] == MAX_JOBS
    assert owned_jobs(a) == stored
    assert submit(limits_stack, b, JOB).status_code == 202  # a's jobs are not b's
    # A retry of a stored job is its answer, not a refusal.
    again = submit(limits_stack, a, JOB | {"epochs": 1}, **{"Idempotency-Key": "limits-1"})
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    jobs.cancel(job_id=uuid.UUID(first.json()["id"]))
    assert submit(limits_stack, a, JOB | {"epochs": 3}).status_code == 202


def test_concurrent_submissions_never_pass_the_unfinished_jobs_limit(limits_stack: Stack) -> None:
    """Eight submissions of one key sent at once, limit two: exactly two are stored (202), six are 429; then at
    the limit, concurrent retries of a stored Idempotency-Key all return that job while new jobs are refused."""
    key = new_key(max_unfinished_jobs=2)
    answers = at_once(8, lambda i: submit(limits_stack, key, JOB | {"epochs": i + 1}))
    assert sorted(r.status_code for r in answers) == [202] * 2 + [429] * 6, [r.text for r in answers]
    assert owned_jobs(key) == 2
    for refused in (r for r in answers if r.status_code == 429):
        assert_refused(refused, 429, "2 unfinished jobs", "at most 2 at once")

    tight = new_key(max_unfinished_jobs=1)
    first = submit(limits_stack, tight, JOB, **{"Idempotency-Key": "race-1"})
    assert first.status_code == 202, first.text

    def retry_or_new(i: int) -> httpx.Response:
        if i % 2:
            return submit(limits_stack, tight, JOB, **{"Idempotency-Key": "race-1"})
        return submit(limits_stack, tight, JOB | {"epochs": i + 2})

    mixed = at_once(6, retry_or_new)
    retries, news = mixed[1::2], mixed[0::2]
    assert [(r.status_code, r.json()["id"]) for r in retries] == [(202, first.json()["id"])] * 3
    assert [r.status_code for r in news] == [429] * 3
    assert owned_jobs(tight) == 1


def test_admin_keys_are_limited_unless_their_own_limit_is_higher(limits_stack: Stack) -> None:
    """An admin key meets the default too; a key's own limit replaces the default, above or below it."""
    admin, roomy, tight = (
        new_key("admin"),
        new_key("admin", max_unfinished_jobs=MAX_JOBS + 2),
        new_key(max_unfinished_jobs=1),
    )
    for _ in range(MAX_JOBS):
        assert submit(limits_stack, admin, JOB).status_code == 202
    assert_refused(submit(limits_stack, admin, JOB), 429, f"at most {MAX_JOBS} at once")
    for _ in range(MAX_JOBS + 2):
        assert submit(limits_stack, roomy, JOB).status_code == 202
    assert_refused(submit(limits_stack, roomy, JOB), 429, f"{MAX_JOBS + 2} unfinished jobs")
    assert submit(limits_stack, tight, JOB).status_code == 202
    assert_refused(submit(limits_stack, tight, JOB), 429, "1 unfinished jobs", "at most 1 at once")


def test_a_revoked_keys_jobs_count_for_nobody_else(limits_stack: Stack) -> None:
    """A revoked key at its limit is 401 itself, and its unfinished jobs hold no other key back."""
    gone, other = new_key(), new_key()
    for _ in range(MAX_JOBS):
        assert submit(limits_stack, gone, JOB).status_code == 202
    keys.revoke(ref=key_id(gone))
    assert submit(limits_stack, gone, JOB).status_code == 401
    for _ in range(MAX_JOBS):
        assert submit(limits_stack, other, JOB).status_code == 202
    assert_refused(submit(limits_stack, other, JOB), 429, f"{MAX_JOBS} unfinished jobs")  # its own jobs count


def test_points_per_job_follow_the_key(limits_stack: Stack) -> None:
    """Over the key's own points limit is 422 naming the points and that limit, higher or lower than the
    default; a key without one gets the default (MAX_POINTS_PER_JOB)."""
    plain, small, large = new_key(), new_key(max_points_per_job=4), new_key(max_points_per_job=MAX_POINTS + 4)
    assert_refused(submit(limits_stack, plain, sizes(MAX_POINTS + 1)), 422, f"{MAX_POINTS + 1} prediction points")
    assert_refused(submit(limits_stack, plain, sizes(MAX_POINTS + 1)), 422, f"at most {MAX_POINTS} are allowed")
    assert submit(limits_stack, plain, sizes(MAX_POINTS)).status_code == 202
    refused = submit(limits_stack, small, sizes(5))
    assert_refused(refused, 422, "5 prediction points", "at most 4 are allowed")
    assert owned_jobs(small) == 0
    assert submit(limits_stack, small, sizes(4)).status_code == 202
    assert submit(limits_stack, large, sizes(MAX_POINTS + 4)).status_code == 202
    assert_refused(submit(limits_stack, large, sizes(MAX_POINTS + 5)), 422, f"at most {MAX_POINTS + 4} are allowed")
    # One key's limit does not outlive its request: the next key's request has the default again.
    assert_refused(submit(limits_stack, plain, sizes(MAX_POINTS + 1)), 422, f"at most {MAX_POINTS} are allowed")


def test_benchmark_seconds_of_the_day_over_the_budget_are_429(limits_stack: Stack) -> None:
    """A key whose jobs of the last 24 h sent more benchmark seconds than its budget is 429 until the oldest
    charge is a day old; charges older than a day and other keys' do not count; a key's own budget wins."""
    spender, thrifty, older, other, rich = (
        new_key(),
        new_key(),
        new_key(),
        new_key(),
        new_key(bench_seconds_per_day=1000),
    )
    charged_job(spender, seconds=BENCH_BUDGET_S / 2, hours_ago=2)
    charged_job(spender, seconds=BENCH_BUDGET_S / 2 + 20, hours_ago=1, status="canceled")
    refused = submit(limits_stack, spender, JOB)
    assert_refused(refused, 429, f"{BENCH_BUDGET_S + 20:g} s of layer benchmarks", f"budget is {BENCH_BUDGET_S:g} s")
    # The oldest charge (2 h ago) leaves the window in about 22 h.
    assert 21 * 3600 < int(refused.headers["retry-after"]) <= 22 * 3600 + 60
    assert owned_jobs(spender) == 2
    charged_job(thrifty, seconds=BENCH_BUDGET_S)  # at the budget, not over it
    assert submit(limits_stack, thrifty, JOB).status_code == 202
    charged_job(older, seconds=BENCH_BUDGET_S * 5, hours_ago=25)
    assert submit(limits_stack, older, JOB).status_code == 202
    assert submit(limits_stack, other, JOB).status_code == 202
    charged_job(rich, seconds=BENCH_BUDGET_S * 5)
    assert submit(limits_stack, rich, JOB).status_code == 202
    charged_job(rich, seconds=BENCH_BUDGET_S * 6)
    assert_refused(submit(limits_stack, rich, JOB), 429, "budget is 1000 s")


def test_planning_charges_the_points_it_sends(limits_stack: Stack, clean_db: None) -> None:
    """A planned job's charge is the (signature, batch size) points it queued for agents x BENCH_TIME_CAP_S x 3
    phases for a conv point, x 2 phases at half the cap for an op point; the API counts exactly that."""
    key = new_key()
    job, _ = jobs.create(request=JobRequest.model_validate(sizes(2)), owner_key_id=key_id(key))
    planning.plan_job(job["id"])
    points = {"gpu_agent.bench_layers": 0, "gpu_agent.bench_ops": 0}
    for raw in broker().lrange("bench.local", 0, -1):
        message = json.loads(raw)
        _args, kwargs, _embed = json.loads(message_body(message))
        points[message["headers"]["task"]] += sum(len(item["batch_sizes"]) for item in kwargs["items"])
    assert all(n > 0 for n in points.values()), points
    plan = jobs.get(job_id=job["id"])["plan"]
    assert plan is not None
    charge = plan["bench_seconds"]
    cap = get_settings().bench_time_cap_s
    assert charge == pytest.approx((points["gpu_agent.bench_layers"] * 3 + points["gpu_agent.bench_ops"]) * cap)
    assert jobs.key_usage(owner_key_id=key_id(key))["bench_seconds_day"] == charge
    with transaction() as cur:  # its budget: just under the charge, then exactly it
        cur.execute("UPDATE api_keys SET bench_seconds_per_day = %s WHERE id = %s", (charge - 0.01, key_id(key)))
    assert_refused(submit(limits_stack, key, JOB), 429, f"{charge:g} s of layer benchmarks")
    with transaction() as cur:
        cur.execute("UPDATE api_keys SET bench_seconds_per_day = %s WHERE id = %s", (charge, key_id(key)))
    assert submit(limits_stack, key, JOB).status_code == 202


def set_budget(key: str, seconds: float) -> None:
    """A key's own daily benchmark budget."""
    with transaction() as cur:
        cur.execute("UPDATE api_keys SET bench_seconds_per_day = %s WHERE id = %s", (seconds, key_id(key)))


def test_planning_reserves_the_charge_and_refuses_what_would_pass_the_budget(clean_db: None) -> None:
    """A plan's charge is reserved against its key's budget when it is sent, not only checked before the job: a
    job whose awaited work would pass it fails saying what it needs and what is left, and sends and charges
    nothing (one job overran the budget by its whole size)."""
    key = new_key()
    first, _ = jobs.create(request=JobRequest.model_validate(sizes(2)), owner_key_id=key_id(key))
    planning.plan_job(first["id"])
    plan = jobs.get(job_id=first["id"])["plan"]
    assert plan is not None
    charge = plan["bench_seconds"]
    assert charge > 0
    set_budget(key, charge * 1.5)  # room for half of the same job again
    queued = broker().llen("bench.local")
    second, _ = jobs.create(request=JobRequest.model_validate(sizes(2)), owner_key_id=key_id(key))
    planning.plan_job(second["id"])
    refused = jobs.get(job_id=second["id"])
    assert refused["status"] == "failed", refused
    assert refused["error"] is not None, refused
    assert f"needs {charge:g} s of layer benchmarks" in refused["error"], refused["error"]
    assert f"has {charge * 0.5:g} s left of its {charge * 1.5:g} s a day" in refused["error"], refused["error"]
    assert broker().llen("bench.local") == queued
    assert jobs.key_usage(owner_key_id=key_id(key))["bench_seconds_day"] == charge
    set_budget(key, charge * 2)  # exactly room for it: planned and charged
    third, _ = jobs.create(request=JobRequest.model_validate(sizes(2)), owner_key_id=key_id(key))
    planning.plan_job(third["id"])
    assert jobs.get(job_id=third["id"])["status"] == "running"
    assert jobs.key_usage(owner_key_id=key_id(key))["bench_seconds_day"] == charge * 2


def test_reference_answered_work_past_the_budget_is_not_sent_and_the_job_is_answered(clean_db: None) -> None:
    """Work for a type the reference answers (queued for a live agent of it) is dropped, not charged, when it
    would pass the budget, and the job is answered by the reference; with room it is sent and charged."""
    from gpu_agent import environment  # the agent's own environment row, as its heartbeat stores it

    beat: dict[str, Any] = {"host": "budget-test", "pid": 1, "device": "cpu", "started_at": datetime.now(UTC)}
    beat |= {"environment_id": environment.environment_id("cpu"), "instance_id": None}
    # A heartbeat of a g4dn.xlarge agent: no agent of it can run here (no GPU), and routing reads only this row.
    agents.beat(agent_id=uuid.uuid4(), machine_type="g4dn.xlarge", **beat)
    body = {**sizes(2), "machines": ["g4dn.xlarge"]}
    key = new_key(bench_seconds_per_day=1.0)
    poor, _ = jobs.create(request=JobRequest.model_validate(body), owner_key_id=key_id(key))
    planning.plan_job(poor["id"])
    answered = jobs.get(job_id=poor["id"])
    assert answered["status"] == "succeeded", answered
    assert answered["plan"] is not None
    assert answered["plan"]["bench_seconds"] == 0 and broker().llen("bench.g4dn.xlarge") == 0
    set_budget(key, 1e6)
    rich, _ = jobs.create(request=JobRequest.model_validate(body), owner_key_id=key_id(key))
    planning.plan_job(rich["id"])
    sent = jobs.get(job_id=rich["id"])
    assert sent["status"] == "succeeded" and sent["plan"] is not None and sent["plan"]["bench_seconds"] > 1.0
    assert broker().llen("bench.g4dn.xlarge") > 0


def test_cli_creates_and_lists_limits(service_env: dict[str, str]) -> None:
    """`keys create` takes each limit and `keys list` shows it (and "default" for a key without one)."""
    name = f"cli-limits-{uuid.uuid4().hex[:6]}"
    args = ["--max-jobs", "7", "--max-points", "1234", "--bench-seconds-per-day", "90.5"]
    made = subprocess.run(
        [TRAINCAST, "keys", "create", "--name", name, "--scope", "submit", "--rate", "3", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "max jobs 7, max points 1234, bench s/day 90.5" in made.stdout
    principal = keys.authenticate(token=made.stdout.strip().splitlines()[-1])
    assert (principal.max_unfinished_jobs, principal.max_points_per_job, principal.bench_seconds_per_day) == (
        7,
        1234,
        90.5,
    )
    plain_name = f"cli-plain-{uuid.uuid4().hex[:6]}"
    subprocess.run(
        [TRAINCAST, "keys", "create", "--name", plain_name, "--scope", "read"], capture_output=True, check=True
    )
    listed = subprocess.run([TRAINCAST, "keys", "list"], capture_output=True, text=True, check=True).stdout
    assert "max jobs" in listed and "bench s/day" in listed
    row = next(line for line in listed.splitlines() if name in line)
    assert "3/s" in row and " 7 " in row and "1234" in row and "90.5" in row
    plain = next(line for line in listed.splitlines() if plain_name in line)
    assert plain.count("default") == 4  # rate, jobs, points, benchmark seconds
    bad = subprocess.run(
        [TRAINCAST, "keys", "create", "--name", name, "--scope", "read", "--max-jobs", "0"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "max jobs 0" in bad.stderr


def test_a_budget_refusal_names_a_retry_that_can_succeed(limits_stack: Stack, clean_db: None) -> None:
    """Over the budget, the retry waits until enough charges have left the 24 h window, not only the oldest; a job
    needing more than the whole day's budget fails saying no retry can run it (it said "retry after 1 s")."""
    key = new_key()
    charged_job(key, seconds=5, hours_ago=3)  # leaves in ~21 h: not enough on its own (15 s over the budget)
    charged_job(key, seconds=BENCH_BUDGET_S + 10, hours_ago=1)  # leaves in ~23 h
    refused = submit(limits_stack, key, JOB)
    assert refused.status_code == 429
    assert 22 * 3600 < int(refused.headers["retry-after"]) <= 23 * 3600 + 60, refused.headers["retry-after"]

    small = new_key()
    job, _ = jobs.create(request=JobRequest.model_validate(sizes(2)), owner_key_id=key_id(small))
    set_budget(small, 1.0)  # far below what the job's benchmarks need
    planning.plan_job(job["id"])
    failed = jobs.get(job_id=job["id"])
    assert failed["status"] == "failed" and failed["error"] is not None, failed
    assert "whole budget of 1 s a day" in failed["error"], failed["error"]
    assert "no retry can run it" in failed["error"] and "retry after" not in failed["error"]

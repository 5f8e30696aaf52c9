"""`python -m tests.support.answer JSON`: plan one job in-process against DATABASE_URL; print its result's points.

Each installation's answer is computed in a process of its own, so nothing cached of one reaches the other."""

import json
import sys

from shared import jobs
from tests.support.jobflow import submit
from worker import planning

if __name__ == "__main__":
    job = submit(**json.loads(sys.argv[1]))
    planning.plan_job(job["id"])
    stored = jobs.get(job_id=job["id"])
    result = stored["result"] or {}
    print(json.dumps({"status": stored["status"], "error": stored.get("error"), "models": result.get("models"),
                      "predictions": result.get("predictions")}, sort_keys=True))  # fmt: skip

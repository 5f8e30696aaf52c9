-- Limits per API key. NULL: the setting's default (MAX_UNFINISHED_JOBS_PER_KEY,
-- MAX_POINTS_PER_JOB, MAX_BENCH_SECONDS_PER_KEY_DAY); a key's own value replaces it, higher or lower.
ALTER TABLE api_keys
    ADD COLUMN max_unfinished_jobs    integer CHECK (max_unfinished_jobs >= 1),  -- queued or running at once
    ADD COLUMN max_points_per_job     integer CHECK (max_points_per_job >= 1),  -- CNNs x machines x batch sizes
    ADD COLUMN bench_seconds_per_day  double precision CHECK (bench_seconds_per_day >= 0);  -- last 24 h

-- Counted at every submission (shared/jobs.py SELECT_KEY_USAGE): a key's unfinished jobs.
CREATE INDEX jobs_owner_open ON jobs (owner_key_id) WHERE status IN ('queued', 'running');

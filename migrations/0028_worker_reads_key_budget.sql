-- A job's benchmark charge is reserved when it is planned (worker/planning.py), against its key's own daily
-- budget (shared/keys.py bench_budget). The worker reads that one column of its key, never the secret's hash.
GRANT SELECT (id, bench_seconds_per_day) ON api_keys TO traincast_worker;

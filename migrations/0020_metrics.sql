-- Metrics: what GET /metrics reads at every scrape, cheap at any volume (bench/metrics.py).

-- The seconds an agent spent in the timed runs of a layer row (runs x median per phase), stored with the row:
-- summing it is then a scan of a small index, not of every row's statistics.
ALTER TABLE layer_benchmarks ADD COLUMN measured_s double precision GENERATED ALWAYS AS ((
      COALESCE((stats->'forward'->>'runs')::float8 * (stats->'forward'->>'median_ms')::float8, 0)
    + COALESCE((stats->'backward_data'->>'runs')::float8 * (stats->'backward_data'->>'median_ms')::float8, 0)
    + COALESCE((stats->'backward_weight'->>'runs')::float8 * (stats->'backward_weight'->>'median_ms')::float8, 0)
) / 1000) STORED;
CREATE INDEX layer_benchmarks_machine_measured ON layer_benchmarks (machine_type) INCLUDE (measured_s);

-- Jobs per status and finished jobs' durations (shared/jobs.py status_durations): an index-only scan.
CREATE INDEX jobs_status_times ON jobs (status) INCLUDE (created_at, finished_at);

-- The API counts layer rows per machine type (shared/layers.py benchmark_totals): those two columns only.
GRANT SELECT (machine_type, measured_s) ON layer_benchmarks TO traincast_api;
CREATE POLICY api_reads ON layer_benchmarks FOR SELECT TO traincast_api USING (true);

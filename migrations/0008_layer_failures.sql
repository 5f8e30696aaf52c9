-- A layer benchmark task that raised (not out of memory: that is data, in layer_benchmarks).
-- The worker fails a job whose missing benchmarks failed too often, instead of leaving it
-- running while the reconciler re-sends work that fails the same way.

CREATE TABLE layer_failures (
    id              bigserial PRIMARY KEY,
    signature_id    bigint NOT NULL REFERENCES conv_signatures(id),
    machine_type    text NOT NULL REFERENCES machine_types(name),
    precision       text NOT NULL,
    environment_id  bigint NOT NULL REFERENCES environments(id),
    batch_sizes     integer[] NOT NULL,
    error           text NOT NULL,
    failed_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX layer_failures_lookup ON layer_failures (machine_type, signature_id, failed_at DESC);

-- The agent records its own failures (gpu_agent/store.py save_layer_failure); it reads none back.
GRANT INSERT (signature_id, machine_type, precision, environment_id, batch_sizes, error) ON layer_failures
    TO traincast_agent;
GRANT USAGE ON SEQUENCE layer_failures_id_seq TO traincast_agent;

-- An op benchmark task that raised (not out of memory, not infeasible: those are data, in op_benchmarks),
-- kept like layer_failures (0008): the worker fails a job whose missing op work failed too often, instead
-- of leaving it running while the reconciler re-sends work that fails the same way.

CREATE TABLE op_failures (
    id               bigserial PRIMARY KEY,
    op_signature_id  bigint NOT NULL REFERENCES op_signatures(id),
    machine_type     text NOT NULL REFERENCES machine_types(name),
    variant          text NOT NULL,  -- as op_benchmarks.variant: op_variant, or optimizer_variant
    environment_id   bigint NOT NULL REFERENCES environments(id),
    batch_sizes      integer[] NOT NULL,
    error            text NOT NULL,
    failed_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX op_failures_lookup ON op_failures (machine_type, op_signature_id, failed_at DESC);

-- The agent records its own failures (gpu_agent/store.py save_op_failure); it reads none back.
GRANT INSERT (op_signature_id, machine_type, variant, environment_id, batch_sizes, error) ON op_failures
    TO traincast_agent;
GRANT USAGE ON SEQUENCE op_failures_id_seq TO traincast_agent;
-- Like layer_failures (0014): an agent's login reaches only the machine types agent_logins maps it to.
ALTER TABLE op_failures ENABLE ROW LEVEL SECURITY;
CREATE POLICY agent_own_type ON op_failures FOR ALL TO traincast_agent
    USING (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user))
    WITH CHECK (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user));

-- The worker (worker/planning.py): counts the failures of a job's missing op work.
GRANT SELECT ON op_failures TO traincast_worker;
CREATE POLICY worker_reads ON op_failures FOR SELECT TO traincast_worker USING (true);

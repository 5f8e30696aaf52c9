-- A multi-GPU host's agent measures all-reduce across its GPUs (gpu_agent/allreduce_bench.py): one row per
-- (machine type, environment, backend, GPU count, message size). The worker reads NCCL's rows to replace the modelled
-- bus bandwidth within a machine (worker/layouts.py); other backends (gloo on a CPU) are stored but not used.
CREATE TABLE allreduce_timings (
    id              bigserial PRIMARY KEY,
    machine_type    text NOT NULL REFERENCES machine_types(name),
    environment_id  bigint NOT NULL REFERENCES environments(id),
    backend         text NOT NULL,  -- nccl, gloo
    gpus            integer NOT NULL CHECK (gpus >= 2),  -- processes taking part (a GPU each with nccl)
    bytes           bigint NOT NULL CHECK (bytes > 0),
    ms              double precision NOT NULL CHECK (ms > 0),  -- median of the rounds
    stats           jsonb NOT NULL DEFAULT '{}'::jsonb,
    measured_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (machine_type, environment_id, backend, gpus, bytes)
);

GRANT SELECT (machine_type, environment_id, backend, gpus, bytes) ON allreduce_timings TO traincast_agent;
GRANT INSERT (machine_type, environment_id, backend, gpus, bytes, ms, stats) ON allreduce_timings TO traincast_agent;
GRANT USAGE ON SEQUENCE allreduce_timings_id_seq TO traincast_agent;
ALTER TABLE allreduce_timings ENABLE ROW LEVEL SECURITY;
CREATE POLICY agent_own_type ON allreduce_timings FOR ALL TO traincast_agent
    USING (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user))
    WITH CHECK (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user));

GRANT SELECT ON allreduce_timings TO traincast_worker;
CREATE POLICY worker_reads ON allreduce_timings FOR SELECT TO traincast_worker USING (true);

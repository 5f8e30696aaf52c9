-- The input pipeline's CPU cost on a machine type: decoding a JPEG and augmenting it with torchvision's
-- standard ImageNet training transforms, per image, in one worker process and with every vCPU busy, as the agent
-- measured it on images it made itself (gpu_agent/input_bench.py). One row per (machine type, environment, pipeline).
CREATE TABLE input_rates (
    id                bigserial PRIMARY KEY,
    machine_type      text NOT NULL REFERENCES machine_types(name),
    environment_id    bigint NOT NULL REFERENCES environments(id),
    pipeline          text NOT NULL,  -- what was measured: 'imagenet-train/500x375/q90/224'
    host_cpus         integer NOT NULL CHECK (host_cpus > 0),  -- the CPUs the agent's host let it use
    decode_ms         double precision NOT NULL CHECK (decode_ms > 0),   -- one worker, per image
    augment_ms        double precision NOT NULL CHECK (augment_ms > 0),  -- one worker, per image
    images_per_s_all  double precision NOT NULL CHECK (images_per_s_all > 0),  -- every CPU busy, all of them
    jpeg_kb           double precision NOT NULL CHECK (jpeg_kb > 0),
    stats             jsonb NOT NULL DEFAULT '{}'::jsonb,
    measured_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (machine_type, environment_id, pipeline)
);

-- The agent (shared/measurements/inputs.py via gpu_agent): whether it is stored, and the new row.
GRANT SELECT (machine_type, environment_id, pipeline) ON input_rates TO traincast_agent;
GRANT INSERT (machine_type, environment_id, pipeline, host_cpus, decode_ms, augment_ms, images_per_s_all, jpeg_kb,
              stats) ON input_rates TO traincast_agent;
GRANT USAGE ON SEQUENCE input_rates_id_seq TO traincast_agent;
ALTER TABLE input_rates ENABLE ROW LEVEL SECURITY;
CREATE POLICY agent_own_type ON input_rates FOR ALL TO traincast_agent
    USING (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user))
    WITH CHECK (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user));

-- The worker reads every machine type's rates (a type not yet measured is answered from the others').
GRANT SELECT ON input_rates TO traincast_worker;
CREATE POLICY worker_reads ON input_rates FOR SELECT TO traincast_worker USING (true);

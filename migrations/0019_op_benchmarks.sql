-- The other operators of a step (batch norm, activations, pooling, linear, adds, concatenations,
-- the loss) and its optimizer step are measured per canonical signature like convs (shared/op_signatures.py),
-- and conv layer benchmarks are keyed by memory layout as well as precision.

-- Canonical operator configuration; batch size, precision and layout are benchmark axes, not identity.
CREATE TABLE op_signatures (
    id          bigserial PRIMARY KEY,
    hash        text NOT NULL UNIQUE,
    op          text NOT NULL,  -- batch_norm, relu, max_pool2d, linear, add, cat, cross_entropy, …, optimizer
    spec        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Which op signatures a CNN variant has, and how many times (the optimizer step once).
CREATE TABLE cnn_ops (
    cnn_name         text NOT NULL REFERENCES cnns(name) ON DELETE CASCADE,
    image_size       integer NOT NULL,
    num_classes      integer NOT NULL,
    op_signature_id  bigint NOT NULL REFERENCES op_signatures(id),
    count            integer NOT NULL CHECK (count > 0),
    PRIMARY KEY (cnn_name, image_size, num_classes, op_signature_id)
);

-- One row per (op signature, machine type, batch size, variant, environment). variant is
-- shared/training.py's TrainConfig.op_variant for operators ('fp32', 'fp16/channels_last', …) and
-- optimizer_variant for the optimizer step ('sgd+momentum', 'adamw+wd/grad_scaler', …), whose rows have
-- batch size 0: the step does not depend on it. An op that cannot run on the device is stored with no
-- timings and its reason in stats (infeasible): it is then learnt, not measured.
CREATE TABLE op_benchmarks (
    id               bigserial PRIMARY KEY,
    op_signature_id  bigint NOT NULL REFERENCES op_signatures(id),
    machine_type     text NOT NULL REFERENCES machine_types(name),
    batch_size       integer NOT NULL CHECK (batch_size >= 0),
    variant          text NOT NULL,
    environment_id   bigint NOT NULL REFERENCES environments(id),
    oom              boolean NOT NULL DEFAULT false,
    forward_ms       double precision,  -- the optimizer: the whole step (zero_grad included)
    backward_ms      double precision,  -- the optimizer: 0
    stats            jsonb NOT NULL DEFAULT '{}'::jsonb,
    measured_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (op_signature_id, machine_type, batch_size, variant, environment_id),
    CHECK ((forward_ms IS NULL) = (backward_ms IS NULL))
);

-- Conv layer benchmarks gain their memory layout; every row stored before was timed in NCHW.
ALTER TABLE layer_benchmarks ADD COLUMN channels_last boolean NOT NULL DEFAULT false;
DO $$
DECLARE c record;
BEGIN
    FOR c IN SELECT conname FROM pg_constraint WHERE contype = 'u' AND conrelid = 'layer_benchmarks'::regclass
    LOOP
        EXECUTE format('ALTER TABLE layer_benchmarks DROP CONSTRAINT %I', c.conname);
    END LOOP;
END $$;
ALTER TABLE layer_benchmarks ADD CONSTRAINT layer_benchmarks_layout_key
    UNIQUE (signature_id, machine_type, batch_size, precision, channels_last, environment_id);

-- The agent (gpu_agent/store.py): which points are stored (resume) and new rows; never the timings back.
GRANT SELECT (op_signature_id, machine_type, batch_size, variant, environment_id) ON op_benchmarks TO traincast_agent;
GRANT INSERT (op_signature_id, machine_type, batch_size, variant, environment_id, oom, forward_ms, backward_ms, stats)
    ON op_benchmarks TO traincast_agent;
GRANT USAGE ON SEQUENCE op_benchmarks_id_seq TO traincast_agent;
GRANT SELECT (channels_last) ON layer_benchmarks TO traincast_agent;
GRANT INSERT (channels_last) ON layer_benchmarks TO traincast_agent;
-- Like layer_benchmarks (0014): an agent's login reaches only the machine types agent_logins maps it to.
ALTER TABLE op_benchmarks ENABLE ROW LEVEL SECURITY;
CREATE POLICY agent_own_type ON op_benchmarks FOR ALL TO traincast_agent
    USING (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user))
    WITH CHECK (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user));

-- The worker (shared/ops.py): registers CNNs' ops, reads their benchmarks.
GRANT SELECT ON op_signatures, cnn_ops, op_benchmarks TO traincast_worker;
GRANT INSERT (hash, op, spec), UPDATE (hash) ON op_signatures TO traincast_worker;
GRANT INSERT (cnn_name, image_size, num_classes, op_signature_id, count), UPDATE (count) ON cnn_ops
    TO traincast_worker;
GRANT USAGE ON SEQUENCE op_signatures_id_seq TO traincast_worker;
CREATE POLICY worker_reads ON op_benchmarks FOR SELECT TO traincast_worker USING (true);

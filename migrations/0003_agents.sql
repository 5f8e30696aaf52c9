-- Benchmark agents register and send heartbeats; whole steps a CNN cannot take are recorded.

CREATE TABLE agents (
    id              uuid PRIMARY KEY,              -- chosen by the agent process at start
    machine_type    text NOT NULL REFERENCES machine_types(name),
    host            text NOT NULL,
    pid             integer NOT NULL,
    device          text NOT NULL,                 -- 'cpu', 'cuda', 'cuda:1'
    environment_id  bigint NOT NULL REFERENCES environments(id),
    started_at      timestamptz NOT NULL,
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    stopped_at      timestamptz,                   -- set on a clean shutdown; a killed agent just stops beating
    current_work    jsonb,                         -- what it is measuring now; NULL when idle
    last_error      text,                          -- the last task that failed, with its message
    last_error_at   timestamptz
);
CREATE INDEX agents_machine_heartbeat ON agents (machine_type, heartbeat_at DESC);

-- A (CNN, batch size) whose training step raises, e.g. batch norm with one value per channel.
-- Kept apart from step_measurements, whose readers expect a time on every row that is not OOM.
CREATE TABLE step_failures (
    id              bigserial PRIMARY KEY,
    cnn_name        text NOT NULL,
    machine_type    text NOT NULL REFERENCES machine_types(name),
    batch_size      integer NOT NULL CHECK (batch_size > 0),
    image_size      integer NOT NULL,
    optimizer       text NOT NULL,
    precision       text NOT NULL,
    environment_id  bigint NOT NULL REFERENCES environments(id),
    reason          text NOT NULL,
    measured_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cnn_name, machine_type, batch_size, image_size, optimizer, precision, environment_id)
);

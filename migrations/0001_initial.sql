-- Traincast schema, version 1: catalog, CNNs and their conv layers, measurements, jobs, models.

CREATE TABLE machine_types (
    name                 text PRIMARY KEY,
    provider             text NOT NULL,            -- 'local' or 'aws'
    gpu                  text,                     -- NULL: CPU only
    gpu_count            integer NOT NULL DEFAULT 0,
    gpu_memory_gib       numeric,
    vcpus                integer,
    memory_gib           numeric,
    price_usd_per_hour   numeric NOT NULL DEFAULT 0,
    gpu_fp32_tflops      numeric,
    gpu_fp16_tflops      numeric,
    gpu_mem_bandwidth_gbs numeric,
    gpu_tdp_watts        numeric,
    source               text NOT NULL,            -- where the figures come from
    figures_read_on      date
);

-- A CNN known by name: built-in (torchvision) or registered by a user.
CREATE TABLE cnns (
    name        text PRIMARY KEY,
    source      text NOT NULL,                     -- 'torchvision', 'onnx', 'json'
    definition  jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Canonical conv layer configuration; batch size is not part of it (it is a benchmark axis).
CREATE TABLE conv_signatures (
    id          bigserial PRIMARY KEY,
    hash        text NOT NULL UNIQUE,
    spec        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Which signatures a CNN has at an input size, and how many times.
CREATE TABLE cnn_layers (
    cnn_name      text NOT NULL REFERENCES cnns(name) ON DELETE CASCADE,
    image_size    integer NOT NULL,
    signature_id  bigint NOT NULL REFERENCES conv_signatures(id),
    count         integer NOT NULL CHECK (count > 0),
    PRIMARY KEY (cnn_name, image_size, signature_id)
);

-- What a measurement ran on: library versions, device, agent version.
CREATE TABLE environments (
    id          bigserial PRIMARY KEY,
    hash        text NOT NULL UNIQUE,
    details     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE layer_benchmarks (
    id                   bigserial PRIMARY KEY,
    signature_id         bigint NOT NULL REFERENCES conv_signatures(id),
    machine_type         text NOT NULL REFERENCES machine_types(name),
    batch_size           integer NOT NULL CHECK (batch_size > 0),
    precision            text NOT NULL,
    environment_id       bigint NOT NULL REFERENCES environments(id),
    oom                  boolean NOT NULL DEFAULT false,
    forward_ms           double precision,
    backward_data_ms     double precision,
    backward_weight_ms   double precision,
    stats                jsonb NOT NULL DEFAULT '{}'::jsonb,  -- min, spread, runs per phase
    measured_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (signature_id, machine_type, batch_size, precision, environment_id),
    CHECK (oom OR (forward_ms IS NOT NULL AND backward_data_ms IS NOT NULL
                   AND backward_weight_ms IS NOT NULL))
);

CREATE TABLE step_measurements (
    id              bigserial PRIMARY KEY,
    cnn_name        text NOT NULL REFERENCES cnns(name),
    machine_type    text NOT NULL REFERENCES machine_types(name),
    batch_size      integer NOT NULL CHECK (batch_size > 0),
    image_size      integer NOT NULL,
    optimizer       text NOT NULL,
    precision       text NOT NULL,
    environment_id  bigint NOT NULL REFERENCES environments(id),
    oom             boolean NOT NULL DEFAULT false,
    step_ms         double precision,
    stats           jsonb NOT NULL DEFAULT '{}'::jsonb,
    measured_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cnn_name, machine_type, batch_size, image_size, optimizer, precision, environment_id),
    CHECK (oom OR step_ms IS NOT NULL)
);

CREATE TABLE jobs (
    id               uuid PRIMARY KEY,
    status           text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'canceled')),
    request          jsonb NOT NULL,
    idempotency_key  text UNIQUE,
    request_hash     text NOT NULL,
    plan             jsonb,        -- conv signature ids per CNN, fixed when the job is planned
    progress         jsonb NOT NULL DEFAULT '{}'::jsonb,
    result           jsonb,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz
);
CREATE INDEX jobs_created_at ON jobs (created_at DESC, id);
CREATE INDEX jobs_open ON jobs (status) WHERE status IN ('queued', 'running');

CREATE TABLE predictor_models (
    id            bigserial PRIMARY KEY,
    machine_type  text NOT NULL REFERENCES machine_types(name),
    version       integer NOT NULL,
    kind          text NOT NULL,
    params        jsonb NOT NULL,
    training_rows jsonb NOT NULL,   -- ids of the step measurements it was fitted on
    evaluation    jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (machine_type, version)
);

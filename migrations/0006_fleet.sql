-- The self-hosted AWS fleet: which instances the controller launched, what it holds each
-- machine type at, and what it did (so nobody has to read AWS to know why money was spent).

-- The EC2 instance an agent runs on (NULL for an agent started by hand, e.g. `local`).
ALTER TABLE agents ADD COLUMN instance_id text;
CREATE INDEX agents_instance ON agents (instance_id) WHERE instance_id IS NOT NULL;

CREATE TABLE fleet_instances (
    instance_id         text PRIMARY KEY,
    machine_type        text NOT NULL REFERENCES machine_types(name),
    market              text NOT NULL CHECK (market IN ('spot', 'on-demand')),
    subnet_id           text,
    price_usd_per_hour  numeric NOT NULL,        -- the most it can cost: the on-demand price
    launched_at         timestamptz NOT NULL DEFAULT now(),
    idle_since          timestamptz,             -- set by the controller while its type has no work
    state               text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'terminated')),
    terminated_at       timestamptz,
    reason              text                      -- why it was terminated
);
CREATE INDEX fleet_instances_live ON fleet_instances (machine_type) WHERE state = 'running';

-- Per machine type: a count held by an operator (`traincast fleet scale`), else automatic,
-- and what the controller saw and decided on its last pass.
CREATE TABLE fleet_targets (
    machine_type    text PRIMARY KEY REFERENCES machine_types(name),
    held            integer CHECK (held >= 0),   -- NULL: follow the work waiting
    drain           boolean NOT NULL DEFAULT false,
    wanted          integer NOT NULL DEFAULT 0,
    queued_tasks    integer NOT NULL DEFAULT 0,
    waiting_jobs    integer NOT NULL DEFAULT 0,
    retry_after     timestamptz,                 -- launches paused after a capacity error
    note            text,                        -- why not more (limit, budget, no AMI, paused)
    decided_at      timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE fleet_events (
    id            bigserial PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    machine_type  text NOT NULL,
    instance_id   text,
    action        text NOT NULL,                 -- launched, terminated, launch_failed, capacity_short, held
    detail        text NOT NULL
);
CREATE INDEX fleet_events_at ON fleet_events (at DESC);

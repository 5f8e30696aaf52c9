-- Least privilege.
--
-- 1. An agent login may store measurements, and keep an agents row, only for the machine types
--    it is mapped to in agent_logins. Row-level security on current_user: a client can SET a
--    setting (spoofable) but cannot change who it logged in as. SET ROLE can switch only to roles
--    the login is a member of, so map login roles only, never the group role traincast_agent
--    (unless it is itself the one login), or every member could act as it.
-- 2. A group role per process kind, traincast_api, traincast_worker and traincast_fleet (NOLOGIN,
--    like traincast_agent), each granted only the statements its code runs. Migrations, seeding
--    and the operator commands (`traincast keys create`, `calibrate`, `train`, `catalog refresh`)
--    keep running as the owner.
--
-- RLS is ENABLEd, not FORCEd: the owner (migrate, and whoever runs the stack as the owner, like
-- docker-compose.yml) is unaffected. Every other role sees no row of an RLS table unless a policy
-- below lets it, so the process roles get policies of their own.

CREATE TABLE agent_logins (
    role          name NOT NULL,  -- a login role, a member of traincast_agent
    machine_type  text NOT NULL REFERENCES machine_types(name) ON DELETE CASCADE,
    PRIMARY KEY (role, machine_type)
);

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['traincast_api', 'traincast_worker', 'traincast_fleet'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- another database's migration created it between the check and the CREATE
            END;
        END IF;
    END LOOP;
END
$$;

GRANT USAGE ON SCHEMA public TO traincast_api, traincast_worker, traincast_fleet;

-- ---------------------------------------------------------------------------------------------
-- 1. The agent: its own machine types only.

-- The policies below read the login's own mapping as the login, so it may read its own rows and
-- no other login's.
ALTER TABLE agent_logins ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_mapping ON agent_logins FOR SELECT TO traincast_agent USING (role = current_user);
GRANT SELECT (role, machine_type) ON agent_logins TO traincast_agent;

ALTER TABLE layer_benchmarks ENABLE ROW LEVEL SECURITY;
ALTER TABLE step_measurements ENABLE ROW LEVEL SECURITY;
ALTER TABLE step_failures ENABLE ROW LEVEL SECURITY;
ALTER TABLE layer_failures ENABLE ROW LEVEL SECURITY;
ALTER TABLE agents ENABLE ROW LEVEL SECURITY;

-- Reading back (resume) is limited too: one agent has no use for another type's rows.
CREATE POLICY agent_own_type ON layer_benchmarks FOR ALL TO traincast_agent
    USING (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user))
    WITH CHECK (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user));
CREATE POLICY agent_own_type ON step_measurements FOR ALL TO traincast_agent
    USING (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user))
    WITH CHECK (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user));
CREATE POLICY agent_own_type ON step_failures FOR ALL TO traincast_agent
    USING (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user))
    WITH CHECK (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user));
CREATE POLICY agent_own_type ON layer_failures FOR ALL TO traincast_agent
    USING (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user))
    WITH CHECK (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user));
-- Its heartbeat upsert and status updates reach only rows of its types: an agent can no longer
-- rewrite the status of another type's agents (it still can of its own type's: one role per type).
CREATE POLICY agent_own_type ON agents FOR ALL TO traincast_agent
    USING (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user))
    WITH CHECK (machine_type IN (SELECT machine_type FROM agent_logins WHERE role = current_user));

-- ---------------------------------------------------------------------------------------------
-- 2. The processes. Each grant names the module whose statements need it; tests/test_least_privilege.py
-- runs those modules as a login in each role. No default privileges: a later table is granted by
-- its migration, or nobody but the owner can touch it.

-- traincast_api: api/ and the shared modules it calls (keys, jobs, cnns, machines, agents, fleet).
-- api_keys: authentication reads the hash; using a key stamps last_used_at. Creating and revoking
-- keys is `traincast keys`, run as the owner.
GRANT SELECT ON api_keys TO traincast_api;
GRANT UPDATE (last_used_at) ON api_keys TO traincast_api;
-- jobs (shared/jobs.py): submit, read, cancel.
GRANT SELECT ON jobs TO traincast_api;
GRANT INSERT (id, request, idempotency_key, request_hash, owner_key_id) ON jobs TO traincast_api;
GRANT UPDATE (status, finished_at, updated_at) ON jobs TO traincast_api;
-- cnns (shared/cnns.py): upload, list, delete. Its delete locks the row first (SELECT … FOR
-- UPDATE), which PostgreSQL allows only with UPDATE on some column: created_at, the least harmful.
GRANT SELECT, DELETE ON cnns TO traincast_api;
GRANT INSERT (name, source, definition, graph, parameters, owner_key_id) ON cnns TO traincast_api;
GRANT UPDATE (created_at) ON cnns TO traincast_api;
-- machine_types (shared/machines.py): the catalog, and a user's own GPU (POST /v1/machines).
GRANT SELECT, INSERT ON machine_types TO traincast_api;
-- agents with their environments (shared/agents.py), the fleet (shared/fleet.py): status, hold, drain.
GRANT SELECT ON agents, environments, fleet_instances, fleet_targets, fleet_events TO traincast_api;
GRANT INSERT (machine_type, held, drain, updated_at) ON fleet_targets TO traincast_api;
GRANT UPDATE (held, drain, updated_at) ON fleet_targets TO traincast_api;
GRANT INSERT (machine_type, action, detail) ON fleet_events TO traincast_api;
GRANT USAGE ON SEQUENCE fleet_events_id_seq TO traincast_api;
CREATE POLICY api_reads ON agents FOR SELECT TO traincast_api USING (true);

-- traincast_worker: worker/ and the shared modules it calls (jobs, cnns, layers, machines, agents,
-- fleet). Plans and finishes jobs; registers CNNs' layers; reads measurements; stores models.
GRANT SELECT ON jobs TO traincast_worker;
GRANT UPDATE (status, plan, progress, started_at, updated_at, result, error, finished_at) ON jobs
    TO traincast_worker;
GRANT SELECT ON cnns, conv_signatures, cnn_layers, cnn_workloads TO traincast_worker;
GRANT INSERT (name, source, definition) ON cnns TO traincast_worker;
GRANT INSERT (hash, spec), UPDATE (hash) ON conv_signatures TO traincast_worker;
GRANT INSERT (cnn_name, image_size, num_classes, signature_id, count), UPDATE (count) ON cnn_layers
    TO traincast_worker;
GRANT INSERT (cnn_name, image_size, num_classes, conv_count, workload), UPDATE (conv_count, workload)
    ON cnn_workloads TO traincast_worker;
GRANT USAGE ON SEQUENCE conv_signatures_id_seq TO traincast_worker;
GRANT SELECT ON layer_benchmarks, step_measurements, step_failures, layer_failures TO traincast_worker;
GRANT SELECT, INSERT ON predictor_models TO traincast_worker;
GRANT USAGE ON SEQUENCE predictor_models_id_seq TO traincast_worker;
GRANT SELECT ON machine_types, agents, environments, fleet_instances, fleet_targets TO traincast_worker;
CREATE POLICY worker_reads ON layer_benchmarks FOR SELECT TO traincast_worker USING (true);
CREATE POLICY worker_reads ON step_measurements FOR SELECT TO traincast_worker USING (true);
CREATE POLICY worker_reads ON step_failures FOR SELECT TO traincast_worker USING (true);
CREATE POLICY worker_reads ON layer_failures FOR SELECT TO traincast_worker USING (true);
CREATE POLICY worker_reads ON agents FOR SELECT TO traincast_worker USING (true);

-- traincast_fleet: gpu_agent/fleet/store.py. Reads work waiting (jobs' status and progress only),
-- agents' heartbeats by instance, AWS prices and sizes; owns its instances, targets and events.
GRANT SELECT (status, progress) ON jobs TO traincast_fleet;
GRANT SELECT (instance_id, stopped_at, heartbeat_at, current_work) ON agents TO traincast_fleet;
GRANT SELECT ON machine_types TO traincast_fleet;
GRANT SELECT, INSERT, UPDATE ON fleet_instances, fleet_targets TO traincast_fleet;
GRANT INSERT (machine_type, instance_id, action, detail) ON fleet_events TO traincast_fleet;
GRANT USAGE ON SEQUENCE fleet_events_id_seq TO traincast_fleet;
CREATE POLICY fleet_reads ON agents FOR SELECT TO traincast_fleet USING (true);

-- Not granted to any process role: schema_migrations, agent_logins (the owner maps logins), and
-- api_keys to anyone but the API. Nothing is granted DELETE or TRUNCATE except the API's DELETE
-- on cnns.

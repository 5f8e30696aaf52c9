-- The benchmark agent's own PostgreSQL role: it can store measurements and keep its
-- agents row current, and nothing else. Agents run on rented GPU machines; a leaked agent
-- credential must not expose jobs, uploaded CNNs or predictor models, nor let anyone rewrite them.
--
-- Every grant below is one statement of gpu_agent/ (environment.py, store.py, lifecycle.py);
-- a new statement there needs its grant here (tests/test_agent_role.py runs each as this role).
-- Tables a later migration adds are not granted: no default privileges, deny unless listed.
--
-- The role is NOLOGIN: it only holds privileges. Give it LOGIN and a password in production
-- (ALTER ROLE traincast_agent LOGIN PASSWORD …), or create login roles IN ROLE traincast_agent.
-- Roles are cluster-wide and many databases (test runs) share a cluster, so it is created only if
-- missing, and a concurrent migration that created it first is not an error. The grants are
-- per database, so each database's migration applies them.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'traincast_agent') THEN
        CREATE ROLE traincast_agent NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- another database's migration created it between the check and the CREATE
END
$$;

-- PostgreSQL before 15 lets every role create objects in public; the agent must not (a function
-- or table it created could be run or read by the owner roles). The owner (API, worker, migrate)
-- keeps CREATE. USAGE is granted explicitly so a later REVOKE ALL FROM PUBLIC cannot lock it out;
-- USAGE itself stays with PUBLIC, since other roles of this database may rely on it.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO traincast_agent;

-- environments (gpu_agent/environment.py): insert this process's environment once, then read its
-- id back by hash. No UPDATE: the insert is ON CONFLICT DO NOTHING, so rows are never rewritten.
GRANT SELECT (id, hash) ON environments TO traincast_agent;
GRANT INSERT (hash, details) ON environments TO traincast_agent;

-- layer_benchmarks (gpu_agent/store.py): which batch sizes of a signature are stored (resume),
-- and insert new rows (ON CONFLICT DO NOTHING). The timings of stored rows are never read back.
GRANT SELECT (signature_id, machine_type, batch_size, precision, environment_id) ON layer_benchmarks
    TO traincast_agent;
GRANT INSERT (signature_id, machine_type, batch_size, precision, environment_id, oom,
              forward_ms, backward_data_ms, backward_weight_ms, stats) ON layer_benchmarks TO traincast_agent;

-- step_measurements and step_failures (gpu_agent/store.py): the same, for whole training steps
-- and for steps a CNN cannot take.
GRANT SELECT (cnn_name, machine_type, batch_size, image_size, optimizer, precision, environment_id)
    ON step_measurements TO traincast_agent;
GRANT INSERT (cnn_name, machine_type, batch_size, image_size, optimizer, precision, environment_id, oom,
              step_ms, stats) ON step_measurements TO traincast_agent;
GRANT SELECT (cnn_name, machine_type, batch_size, image_size, optimizer, precision, environment_id)
    ON step_failures TO traincast_agent;
GRANT INSERT (cnn_name, machine_type, batch_size, image_size, optimizer, precision, environment_id, reason)
    ON step_failures TO traincast_agent;

-- agents (gpu_agent/lifecycle.py): register (insert), then only the status columns change:
-- heartbeat, current work, last error, clean stop. SELECT (id) is what `WHERE id = …` and the
-- upsert's ON CONFLICT (id) read. Identity columns (machine type, host, instance_id from 0006,
-- started_at) cannot be rewritten. Rows are not limited to the agent's own: every agent shares
-- this role.
GRANT SELECT (id) ON agents TO traincast_agent;
GRANT INSERT (id, machine_type, host, pid, device, environment_id, started_at, instance_id) ON agents
    TO traincast_agent;
GRANT UPDATE (heartbeat_at, current_work, last_error, last_error_at, stopped_at) ON agents TO traincast_agent;

-- bigserial ids of the rows it inserts: nextval() needs USAGE (not SELECT, not UPDATE/setval).
GRANT USAGE ON SEQUENCE environments_id_seq, layer_benchmarks_id_seq, step_measurements_id_seq,
    step_failures_id_seq TO traincast_agent;

-- Not granted, on purpose: jobs, predictor_models, cnns (uploaded graphs), cnn_layers,
-- cnn_workloads, conv_signatures (a task carries each signature's spec), machine_types (the agent's
-- machine type comes from its settings; foreign keys are checked with the table owner's rights),
-- schema_migrations, and the fleet tables of 0006 (the fleet controller, gpu_agent/fleet/, runs on
-- the control plane as the owner, not as this role). Any table added later is likewise invisible
-- until a migration grants it.

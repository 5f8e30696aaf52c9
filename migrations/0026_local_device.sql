-- The GPU host as a machine type: an agent of `local` describes its device when it registers, and
-- `local`'s catalog row becomes that GPU (or a CPU again), so calibration, memory fit and predictions treat it as one.
--
-- The agent's role cannot write the catalog (0007) and must not: its registration carries the description
-- (agents.device_description, a shared/local_machine.LocalDevice; INSERT granted on that column alone), and the
-- trigger below, run with the owner's rights, copies it onto `local` only. Who may describe `local`: row-level
-- security on agents (0014) lets a login insert an agents row only for the machine types agent_logins maps it to,
-- so only an agent of `local` (or the owner) ever reaches it. Only the GPU columns, the source texts and
-- described_at change: never the name, provider, price or another machine type.

ALTER TABLE agents ADD COLUMN device_description jsonb;
ALTER TABLE machine_types ADD COLUMN described_at timestamptz;
COMMENT ON COLUMN agents.device_description IS
    'the device as an agent of local described it at registration (shared/local_machine.py); NULL for other types';
COMMENT ON COLUMN machine_types.described_at IS
    'when an agent of this machine type last described it (only local); NULL: the figures are the catalog''s';

GRANT INSERT (device_description) ON agents TO traincast_agent;

CREATE FUNCTION describe_local_machine() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    d machine_types;  -- the description's keys are machine_types columns; others are ignored
BEGIN
    d := jsonb_populate_record(NULL::machine_types, NEW.device_description);
    UPDATE machine_types SET
        gpu = d.gpu,
        gpu_count = CASE WHEN d.gpu IS NULL THEN 0 ELSE 1 END,  -- the one device the agent measures on
        gpu_memory_gib = d.gpu_memory_gib,
        gpu_fp32_tflops = d.gpu_fp32_tflops,
        gpu_tf32_tflops = d.gpu_tf32_tflops,
        gpu_fp16_tflops = d.gpu_fp16_tflops,
        gpu_mem_bandwidth_gbs = d.gpu_mem_bandwidth_gbs,
        gpu_sm_count = d.gpu_sm_count,
        gpu_l2_mib = d.gpu_l2_mib,
        gpu_compute_capability = d.gpu_compute_capability,
        gpu_bf16 = d.gpu_bf16,
        gpu_tdp_watts = d.gpu_tdp_watts,
        source = format('the machine the local agent runs on, described by its agent %s on %s: %s',
                        NEW.id, NEW.host, left(NEW.device_description ->> 'device', 300)),
        specs_source = d.specs_source,
        specs_read_at = now(),
        described_at = now()
    WHERE name = 'local';
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION describe_local_machine() FROM PUBLIC;

CREATE TRIGGER describe_local AFTER INSERT ON agents FOR EACH ROW
    WHEN (NEW.machine_type = 'local' AND NEW.device_description IS NOT NULL)
    EXECUTE FUNCTION describe_local_machine();

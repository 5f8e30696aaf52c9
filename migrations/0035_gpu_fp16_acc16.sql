-- GeForce spec sheets give two FP16 tensor rates: with FP16 accumulate, and half of it with FP32 accumulate. The
-- reference costs tensor-core convs at the chip's full rate (prediction/reference/specs.py says why), so a machine
-- type can carry the FP16-accumulate figure beside gpu_fp16_tflops. NULL: the same as gpu_fp16_tflops.
ALTER TABLE machine_types
    ADD COLUMN gpu_fp16_acc16_tflops numeric CHECK (gpu_fp16_acc16_tflops > 0);
COMMENT ON COLUMN machine_types.gpu_fp16_acc16_tflops IS
    'dense FP16 tensor-core peak with FP16 accumulate, of one GPU, where it differs from gpu_fp16_tflops (GeForce)';

-- `local` described by its agent carries the figure too (as 0026, one column more).
CREATE OR REPLACE FUNCTION describe_local_machine() RETURNS trigger
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
        gpu_fp16_acc16_tflops = d.gpu_fp16_acc16_tflops,
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

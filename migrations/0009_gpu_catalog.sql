-- Every GPU answered at once: the GPU figures the reference predictor needs, machine
-- types of Google Cloud and Azure beside AWS, and machine types users register by their specs.
--
-- The rows themselves are seeded from data/cloud_gpu_machines.csv and data/gpus.csv by
-- shared/machines.py (seed_catalog, run by `migrate` after the SQL files), so the CSVs stay the
-- one place the figures and their sources are written down.

ALTER TABLE machine_types
    ADD COLUMN gpu_tf32_tflops        numeric,   -- dense TF32 tensor-core peak (Ampere and later)
    ADD COLUMN gpu_sm_count           integer,   -- streaming multiprocessors of one GPU
    ADD COLUMN gpu_l2_mib             numeric,   -- L2 cache of one GPU
    ADD COLUMN gpu_compute_capability text,      -- e.g. '8.0'
    ADD COLUMN gpu_bf16               boolean,
    ADD COLUMN region                 text,      -- where price_usd_per_hour applies
    ADD COLUMN registered_at          timestamptz;  -- set when a user registered it (POST /v1/machines)

COMMENT ON COLUMN machine_types.provider IS
    '''local'', ''aws'', ''gcp'', ''azure'', or what a user who registered the machine type named (default ''own'')';
COMMENT ON COLUMN machine_types.gpu_fp16_tflops IS
    'dense FP16 tensor-core peak with FP32 accumulate, of one GPU';
COMMENT ON COLUMN machine_types.gpu_memory_gib IS 'GPU memory of all the machine''s GPUs together';

-- Whole steps and predictor models keyed by how the CNN was trained (shared/training.py):
-- optimizer with its momentum and weight decay, precision, and memory layout.
--
-- Every step stored before this migration was timed by gpu_agent/step_bench.py with SGD(momentum=0.9),
-- no weight decay, NCHW, in fp32 (Adam rows: Adam's defaults): they keep exactly that label, never momentum 0.
-- The new columns have no default afterwards, so a writer must say what it measured.

ALTER TABLE step_measurements
    ADD COLUMN momentum      double precision,
    ADD COLUMN weight_decay  double precision,
    ADD COLUMN channels_last boolean;
UPDATE step_measurements SET momentum = CASE WHEN optimizer = 'sgd' THEN 0.9 ELSE 0 END,
                             weight_decay = 0, channels_last = false;
ALTER TABLE step_measurements
    ALTER COLUMN momentum SET NOT NULL,
    ALTER COLUMN weight_decay SET NOT NULL,
    ALTER COLUMN channels_last SET NOT NULL;

ALTER TABLE step_failures
    ADD COLUMN momentum      double precision,
    ADD COLUMN weight_decay  double precision,
    ADD COLUMN channels_last boolean;
UPDATE step_failures SET momentum = CASE WHEN optimizer = 'sgd' THEN 0.9 ELSE 0 END,
                         weight_decay = 0, channels_last = false;
ALTER TABLE step_failures
    ALTER COLUMN momentum SET NOT NULL,
    ALTER COLUMN weight_decay SET NOT NULL,
    ALTER COLUMN channels_last SET NOT NULL;

-- The unique keys gain the new columns (their generated names are looked up, not guessed).
DO $$
DECLARE c record;
BEGIN
    FOR c IN SELECT conrelid::regclass AS tbl, conname FROM pg_constraint
             WHERE contype = 'u' AND conrelid IN ('step_measurements'::regclass, 'step_failures'::regclass)
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.tbl, c.conname);
    END LOOP;
END $$;
ALTER TABLE step_measurements ADD CONSTRAINT step_measurements_config_key
    UNIQUE (cnn_name, machine_type, batch_size, image_size, optimizer, momentum, weight_decay, precision,
            channels_last, environment_id);
ALTER TABLE step_failures ADD CONSTRAINT step_failures_config_key
    UNIQUE (cnn_name, machine_type, batch_size, image_size, optimizer, momentum, weight_decay, precision,
            channels_last, environment_id);

-- A model is fitted for one cost key (optimizer, whether momentum and weight decay are non-zero, precision,
-- layout: shared/training.TrainConfig.cost_key) and serves only requests of that key.
ALTER TABLE predictor_models ADD COLUMN cost_key text;
UPDATE predictor_models SET cost_key = 'sgd+momentum/fp32';
ALTER TABLE predictor_models ALTER COLUMN cost_key SET NOT NULL;
CREATE INDEX predictor_models_by_key ON predictor_models (machine_type, cost_key, version DESC);

-- The agent writes and reads back (skip what is stored) the new columns too.
GRANT SELECT (momentum, weight_decay, channels_last) ON step_measurements TO traincast_agent;
GRANT INSERT (momentum, weight_decay, channels_last) ON step_measurements TO traincast_agent;
GRANT SELECT (momentum, weight_decay, channels_last) ON step_failures TO traincast_agent;
GRANT INSERT (momentum, weight_decay, channels_last) ON step_failures TO traincast_agent;

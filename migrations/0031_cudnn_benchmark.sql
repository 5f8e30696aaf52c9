-- Whole steps keyed by torch.backends.cudnn.benchmark too (shared/training.TrainConfig.cudnn_benchmark): on a GPU
-- it changes which conv algorithms run, so a step timed with it on is not a step timed with it off.
--
-- Before this migration the agent timed every step with it on (gpu_agent/environment.configure), and each row's
-- environment says so (details.cudnn_benchmark, CUDA devices only): those rows keep that truth. On a CPU it has no
-- effect and rows are labelled off, PyTorch's default. A model fitted on a GPU's steps is relabelled the same way.
ALTER TABLE step_measurements ADD COLUMN cudnn_benchmark boolean;
UPDATE step_measurements s SET cudnn_benchmark = COALESCE(
    (SELECT (e.details->>'cudnn_benchmark')::boolean FROM environments e
     WHERE e.id = s.environment_id AND e.details->>'device_type' = 'cuda'), false);
ALTER TABLE step_measurements ALTER COLUMN cudnn_benchmark SET NOT NULL;

ALTER TABLE step_failures ADD COLUMN cudnn_benchmark boolean;
UPDATE step_failures s SET cudnn_benchmark = COALESCE(
    (SELECT (e.details->>'cudnn_benchmark')::boolean FROM environments e
     WHERE e.id = s.environment_id AND e.details->>'device_type' = 'cuda'), false);
ALTER TABLE step_failures ALTER COLUMN cudnn_benchmark SET NOT NULL;

UPDATE predictor_models m SET cost_key = m.cost_key || '/cudnn_benchmark'
WHERE m.cost_key NOT LIKE '%/cudnn_benchmark' AND EXISTS (
    SELECT 1 FROM step_measurements s
    WHERE s.cudnn_benchmark AND m.training_rows @> to_jsonb(s.id));

ALTER TABLE step_measurements DROP CONSTRAINT step_measurements_config_key;
ALTER TABLE step_measurements ADD CONSTRAINT step_measurements_config_key
    UNIQUE (cnn_name, machine_type, batch_size, image_size, optimizer, momentum, weight_decay, precision,
            channels_last, cudnn_benchmark, environment_id);
ALTER TABLE step_failures DROP CONSTRAINT step_failures_config_key;
ALTER TABLE step_failures ADD CONSTRAINT step_failures_config_key
    UNIQUE (cnn_name, machine_type, batch_size, image_size, optimizer, momentum, weight_decay, precision,
            channels_last, cudnn_benchmark, environment_id);

GRANT SELECT (cudnn_benchmark) ON step_measurements TO traincast_agent;
GRANT INSERT (cudnn_benchmark) ON step_measurements TO traincast_agent;
GRANT SELECT (cudnn_benchmark) ON step_failures TO traincast_agent;
GRANT INSERT (cudnn_benchmark) ON step_failures TO traincast_agent;

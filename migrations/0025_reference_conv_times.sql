-- The reference model's conv predictions, kept between worker processes (worker/reference_store.py). Predicting
-- every conv of 31 CNNs on 8 GPUs at batch sizes 1-256 is ~10 s of LightGBM; each worker process did it again for
-- itself. A row is one conv on one GPU's figures in one precision, under one model version (`key` hashes all four:
-- worker/reference/model.py store_key), its predictions by batch size as little-endian arrays. Rows are the model's
-- output, never measurements; a new model.json has a new version, so its rows are new ones (a starting worker
-- deletes those of other versions: worker/app.py).
CREATE TABLE reference_conv_times (
    key            text PRIMARY KEY,
    model_version  text NOT NULL,
    slots          integer NOT NULL,  -- batch sizes 0 .. slots-1
    known          integer NOT NULL,  -- how many of them hold a prediction
    times          bytea NOT NULL,    -- float64 (slots x 3): forward, backward-data, backward-weight ms
    tensor         bytea NOT NULL,    -- bool (slots x 3): on tensor cores
    known_mask     bytea NOT NULL,    -- bool (slots)
    stored_at      timestamptz NOT NULL DEFAULT now()
);

-- DELETE: a starting worker removes the rows of other model versions (worker/app.py).
GRANT SELECT, INSERT, UPDATE, DELETE ON reference_conv_times TO traincast_worker;

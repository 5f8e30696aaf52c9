-- A succeeded job's predictions, apart from its row: parts of consecutive points, each rendered to JSON
-- text once by the worker. A 63,488-point result was a ~50 MB jsonb document: parsed by PostgreSQL on the way in,
-- printed back to text on every GET. As text, storing it is a write and reading it a concatenation
-- (shared/jobs/predictions.py); the rest of the result stays in jobs.result.
CREATE TABLE job_predictions (
    job_id  uuid NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    part    integer NOT NULL,  -- 0, 1, ... in the order of result.predictions
    first   integer NOT NULL,  -- index in result.predictions of the part's first point
    points  integer NOT NULL CHECK (points > 0),
    body    text NOT NULL,     -- the part's points as JSON array elements, comma-separated, without brackets
    PRIMARY KEY (job_id, part)
);

-- lz4 where the server has it (Debian's and the official images do): far faster than the default pglz on tens of MB.
DO $$
BEGIN
    ALTER TABLE job_predictions ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    NULL;
END
$$;

-- Results stored before: their predictions move here, one part each.
INSERT INTO job_predictions (job_id, part, first, points, body)
SELECT id, 0, 0, jsonb_array_length(result->'predictions'),
       substr((result->'predictions')::text, 2, length((result->'predictions')::text) - 2)
FROM jobs
WHERE jsonb_typeof(result->'predictions') = 'array' AND jsonb_array_length(result->'predictions') > 0;
UPDATE jobs SET result = result - 'predictions' WHERE result ? 'predictions';

-- The worker stores them when it finishes a job; the API reads them (migrations/0014_least_privilege.sql roles).
GRANT SELECT, INSERT ON job_predictions TO traincast_worker;
GRANT SELECT ON job_predictions TO traincast_api;

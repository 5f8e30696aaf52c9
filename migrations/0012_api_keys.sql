-- API keys: `Authorization: Bearer tc_<id>_<secret>`. Only a SHA-256 of the secret is stored;
-- the id is public and finds the row. Jobs, their idempotency keys and registered CNNs belong to the key
-- that made them (NULL: made before keys existed, or built in: nobody's).
CREATE TABLE api_keys (
    id             text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{12}$'),
    name           text NOT NULL CHECK (name <> ''),
    scope          text NOT NULL CHECK (scope IN ('read', 'submit', 'admin')),  -- admin ⊇ submit ⊇ read
    secret_sha256  text NOT NULL CHECK (secret_sha256 ~ '^[0-9a-f]{64}$'),
    rate_per_s     double precision CHECK (rate_per_s > 0),  -- requests per second; NULL: API_RATE_PER_KEY_S
    created_at     timestamptz NOT NULL DEFAULT now(),
    last_used_at   timestamptz,
    revoked_at     timestamptz
);

ALTER TABLE jobs ADD COLUMN owner_key_id text REFERENCES api_keys(id);
-- An idempotency key is per owner: two owners may both use "retry-1".
ALTER TABLE jobs DROP CONSTRAINT jobs_idempotency_key_key;
CREATE UNIQUE INDEX jobs_owner_idempotency ON jobs (owner_key_id, idempotency_key) NULLS NOT DISTINCT
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_owner_created_at ON jobs (owner_key_id, created_at DESC, id);

-- CNN names stay unique across owners, so a job's CNN name means one thing to every worker.
ALTER TABLE cnns ADD COLUMN owner_key_id text REFERENCES api_keys(id);

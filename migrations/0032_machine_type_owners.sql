-- Machine type names are unique whatever their letter case (`P4D.24XLARGE` beside `p4d.24xlarge` was accepted, and a
-- typo's did-you-mean then suggested the impostor), and a type a key registers belongs to it: a key sees the
-- catalog, the types admins registered and its own; an admin sees all; owners and admins may delete a type.
--
-- Types registered before this migration were registered by admin keys (the only scope allowed then): they stay
-- shared, owner NULL like the catalog. An install that already holds names differing only in case stops here with
-- the names, for its operator to choose which to keep (DELETE FROM machine_types WHERE name = '...'; measurements
-- and jobs that name it go first).
DO $$
DECLARE clash text;
BEGIN
    SELECT string_agg(names, '; ') INTO clash FROM (
        SELECT string_agg(name, ', ' ORDER BY name) AS names FROM machine_types
        GROUP BY lower(name) HAVING count(*) > 1
    ) c;
    IF clash IS NOT NULL THEN
        RAISE EXCEPTION 'machine type names that differ only in letter case: %', clash
            USING HINT = 'keep one of each and delete the others before migrating (see this migration''s header)';
    END IF;
END $$;
CREATE UNIQUE INDEX machine_types_name_any_case ON machine_types (lower(name));

ALTER TABLE machine_types ADD COLUMN owner_key_id text REFERENCES api_keys(id);
CREATE INDEX machine_types_owner ON machine_types (owner_key_id) WHERE owner_key_id IS NOT NULL;

GRANT DELETE ON machine_types TO traincast_api;

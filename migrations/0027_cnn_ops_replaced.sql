-- A CNN variant read again by a changed extraction replaces its ops (shared/measurements/ops.py store):
-- the worker, which registers CNNs, deletes the variant's old memberships in the transaction that stores the new,
-- so an op signature the extraction no longer yields (or now describes otherwise) is not counted twice.
GRANT DELETE ON cnn_ops TO traincast_worker;

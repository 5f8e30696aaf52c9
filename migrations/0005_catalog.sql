-- Machine catalog refreshed from AWS: spot prices, and when and where each group of
-- figures was read, because specs, on-demand and spot prices are read by different APIs and a
-- refresh may get some groups and not others. Existing rows keep every value they had.

ALTER TABLE machine_types
    ADD COLUMN spot_price_usd_per_hour numeric,
    ADD COLUMN specs_read_at           timestamptz,
    ADD COLUMN price_read_at           timestamptz,
    ADD COLUMN spot_price_read_at      timestamptz,
    ADD COLUMN specs_source            text,
    ADD COLUMN price_source            text,
    ADD COLUMN spot_price_source       text;

-- The seed's figures come from the CSV snapshot, which gives a year but no date: the read_at
-- columns and figures_read_on stay NULL for them rather than carry an invented date.
UPDATE machine_types
SET specs_source = 'data/aws_gpu_instances.csv (2025 snapshot)',
    price_source = 'data/aws_gpu_instances.csv (2025 snapshot, us-east-1 Linux on-demand)'
WHERE provider = 'aws';

COMMENT ON COLUMN machine_types.spot_price_usd_per_hour IS
    'lowest current Linux/UNIX spot price over the availability zones of the region in spot_price_source';
COMMENT ON COLUMN machine_types.specs_read_at IS
    'when GPU model, count and memory, vCPUs and RAM were read from EC2 DescribeInstanceTypes';
COMMENT ON COLUMN machine_types.price_read_at IS
    'when price_usd_per_hour (Linux on-demand) was read from the AWS Pricing API';
COMMENT ON COLUMN machine_types.spot_price_read_at IS
    'when spot_price_usd_per_hour was read from EC2 DescribeSpotPriceHistory';
COMMENT ON COLUMN machine_types.figures_read_on IS
    'UTC day of the older of specs_read_at and price_read_at: every AWS figure of the row is at least this fresh';

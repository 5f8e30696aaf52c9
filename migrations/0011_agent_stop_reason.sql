-- Why an agent left (idle, spot interruption notice, rebalance recommendation, stop signal), so
-- `traincast agents` and the fleet's events can say it rather than "stopped".
ALTER TABLE agents ADD COLUMN stop_reason text;
GRANT UPDATE (stop_reason) ON agents TO traincast_agent;

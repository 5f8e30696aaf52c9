-- Why a machine type's launches are paused, and the failures in a row behind it: a launch
-- refused for its configuration or a vCPU quota, or instances dying soon after launch, back off
-- exponentially instead of retrying every few minutes for ever. New fleet_events actions:
-- quota_short, spot_not_permitted, early_deaths, console_output.
ALTER TABLE fleet_targets
    ADD COLUMN pause_kind   text CHECK (pause_kind IN ('capacity', 'quota', 'refused', 'early_deaths')),
    ADD COLUMN pause_reason text,                              -- shown with retry_after while it is ahead
    ADD COLUMN failures     integer NOT NULL DEFAULT 0,        -- refused launches in a row; 0 after a launch
    ADD COLUMN early_deaths integer NOT NULL DEFAULT 0;        -- early deaths in a row; 0 once an agent beats

-- Named targets: an intent records the name of the build's target and the
-- path of the call; the dispatcher resolves the base URL and credentials
-- (bearer token, headers) from the configuration at delivery, so neither
-- lands in a row and rotating a credential applies to pending intents too.
-- Rows recorded before this migration keep their full URL in target and no
-- target_name.

-- +goose Up
ALTER TABLE outbox ADD COLUMN target_name text;

-- +goose Down
ALTER TABLE outbox DROP COLUMN target_name;

-- +goose Up
-- The replica's version is the change's place in the source's commit
-- order: the commit it follows, then its own LSN, as numeric
-- version.sequence (event.Event.Sequence). bigint held the LSN alone, by
-- which an insert that waited on a key a concurrent transaction deleted
-- ranked below the delete. Versions already stored convert exactly and
-- stay below every later change's.
ALTER TABLE customers ALTER COLUMN version TYPE numeric;

-- +goose Down
ALTER TABLE customers ALTER COLUMN version TYPE bigint;

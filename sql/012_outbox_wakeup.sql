-- Outbox wake-up without the global lock (issue 13). Supersedes the wake-up of sql/003.
--
-- sql/003 woke dispatchers with a statement-level insert trigger on outbox_events that ran
-- pg_notify inside the business transaction. PostgreSQL serializes the commits of notifying
-- transactions cluster-wide (a lock taken before the commit and held through its WAL flush),
-- so every event-emitting command queued behind every other one: pgbench, single-row
-- transactions inserting into outbox_events, 8 and 32 clients, ~2.1k / ~1.8k commits/s with
-- the trigger against ~3.6k / ~3.8k without it (0.55x), and the gap widens with cores.
--
-- The trigger goes. Dispatchers now learn of new rows after the commit has returned, outside
-- the business transaction (infra/outbox, wakeup.go): the committing process wakes a
-- dispatcher of its own process directly, or else publishes the workspace ids on a Redis
-- channel, coalesced (one message per send in flight, not one per commit); and every
-- dispatcher polls outbox_due_workspaces adaptively (50 ms while it finds work, backing off
-- to 1 s when idle). A lost wake-up delays delivery by at most the idle poll interval; no
-- event can be lost, because the dispatchers read the rows. Measured figures: README
-- "Architecture" and `make bench`.

-- +goose Up
SET LOCAL ROLE listing_owner;
DROP TRIGGER IF EXISTS outbox_events_notify ON outbox_events;
DROP FUNCTION IF EXISTS outbox_events_notify();
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
-- +goose StatementBegin
CREATE FUNCTION outbox_events_notify() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM pg_notify('outbox_events', w.workspace_id::text)
  FROM (SELECT DISTINCT n.workspace_id FROM outbox_new_rows n) w;
  RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_events_notify AFTER INSERT ON outbox_events
  REFERENCING NEW TABLE AS outbox_new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION outbox_events_notify();
RESET ROLE;

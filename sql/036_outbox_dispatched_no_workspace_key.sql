-- The log of dispatched events keeps no foreign key to workspaces.
--
-- outbox_dispatched (sql/018) is written only by marking, which moves rows out of
-- outbox_events: their workspace existed when they were written there (outbox_events keeps
-- its key), so the log's key checked nothing new. It cost every dispatched event a
-- referential check (a query per row, run by a trigger) and a KEY SHARE lock on its
-- workspace's row, written to the WAL, on the drain's hot path. Its ON DELETE CASCADE is not
-- needed either: no code deletes a workspace, and the log's rows leave with their partition
-- at retention (outbox_dispatched_maintain).

-- +goose Up
SET LOCAL ROLE listing_owner;
ALTER TABLE outbox_dispatched DROP CONSTRAINT outbox_dispatched_workspace_id_fkey;
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
ALTER TABLE outbox_dispatched ADD CONSTRAINT outbox_dispatched_workspace_id_fkey
  FOREIGN KEY (workspace_id) REFERENCES workspaces (id) ON DELETE CASCADE;
RESET ROLE;

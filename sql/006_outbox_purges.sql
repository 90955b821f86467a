-- Purge audit: dead letters deleted on purpose (app outbox purge), with who, when and why,
-- and what the event was (type, destination, attempts, sanitized last error; not its payload).

-- +goose Up
SET LOCAL ROLE listing_owner;

CREATE TABLE outbox_purges (
  id               uuid PRIMARY KEY,
  workspace_id     uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  event_id         uuid NOT NULL,
  event_type       text NOT NULL,
  destination      text NOT NULL,
  event_created_at timestamptz NOT NULL,
  attempt_count    int NOT NULL,
  last_error       text CHECK (length(last_error) <= 1000),
  purged_by        text NOT NULL CHECK (length(purged_by) BETWEEN 1 AND 200),
  reason           text NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
  purged_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_purges_workspace ON outbox_purges (workspace_id, purged_at);
ALTER TABLE outbox_purges ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY outbox_purges_tenant ON outbox_purges
  USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id());

RESET ROLE;

-- +goose Down
DROP TABLE IF EXISTS outbox_purges;

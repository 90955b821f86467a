-- Idempotency records are written once, completed, by a plain INSERT at the commit of their
-- request (infra/idem): nothing updates them, and nothing reads them but by their scope.
--
-- Foreign keys: the record's workspace and user are the actor of the request that writes it,
-- inside that actor's RLS transaction (the policy's WITH CHECK holds workspace_id to the
-- transaction's workspace), so the two foreign-key checks (a key-share lock, and its WAL
-- record, on the workspace's and the user's rows, per guarded request) guard nothing that
-- can happen; and no workspace or user is ever deleted while its records live (records are
-- kept 48 hours; the cleaner deletes them after, per workspace). Dropping them takes two
-- statements (the checks' SPI queries) out of every guarded request. ON DELETE CASCADE went
-- with them: a record outliving its workspace or user is deleted by the cleaner at expiry.
--
-- Fillfactor: 85 left room on each page for the completion's HOT update, which no longer
-- happens; back to the default (every page filled by inserts).

-- +goose Up
SET LOCAL ROLE listing_owner;
ALTER TABLE idempotency_requests
  DROP CONSTRAINT idempotency_requests_workspace_id_fkey,
  DROP CONSTRAINT idempotency_requests_user_id_fkey;
ALTER TABLE idempotency_requests RESET (fillfactor);
RESET ROLE;

-- +goose Down
-- Orphans first (as the migrating superuser: RLS does not hide them from it).
DELETE FROM idempotency_requests r
  WHERE NOT EXISTS (SELECT 1 FROM workspaces w WHERE w.id = r.workspace_id)
     OR NOT EXISTS (SELECT 1 FROM users u WHERE u.id = r.user_id);
SET LOCAL ROLE listing_owner;
ALTER TABLE idempotency_requests
  ADD CONSTRAINT idempotency_requests_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES workspaces (id) ON DELETE CASCADE,
  ADD CONSTRAINT idempotency_requests_user_id_fkey FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE;
ALTER TABLE idempotency_requests SET (fillfactor = 85);
RESET ROLE;

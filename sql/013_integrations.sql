-- Integration principals (issue 16): other services that send commands as messages on the
-- stream <prefix>:commands, each signed with the principal's secret.
--
-- A principal acts as a user of its own in the idempotency store and the operations it
-- starts: a users row of kind 'integration', without email or password (it cannot log in:
-- auth_user_by_email never finds a NULL email), member of its workspace. The owner who
-- creates it runs as themselves (users_self scopes users to app.user_id), so app_user may
-- insert integration users, and only those, through users_integration_insert; that row holds
-- no credential.
--
-- integrations is workspace data (RLS forced, tenant policy). Its secret is kept sealed like
-- store credentials (AES-256-GCM under CREDENTIALS_KEYS, bound to the workspace and the
-- integration's id); the plain secret is shown once, by the response that creates it. A
-- revocation sets revoked_at and removes the membership; the row and its user stay (the
-- idempotency records and operations of its commands name them).

-- +goose Up
SET LOCAL ROLE listing_owner;

ALTER TABLE users
  ADD COLUMN kind text NOT NULL DEFAULT 'human' CHECK (kind IN ('human', 'integration')),
  ALTER COLUMN email DROP NOT NULL,
  ALTER COLUMN password_hash DROP NOT NULL,
  ADD CONSTRAINT users_kind_credentials CHECK (
    (kind = 'human' AND email IS NOT NULL AND password_hash IS NOT NULL)
    OR (kind = 'integration' AND email IS NULL AND password_hash IS NULL));
CREATE POLICY users_integration_insert ON users FOR INSERT TO app_user
  WITH CHECK (kind = 'integration' AND email IS NULL AND password_hash IS NULL);

CREATE TABLE integrations (
  id             uuid PRIMARY KEY,
  workspace_id   uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  user_id        uuid NOT NULL UNIQUE REFERENCES users (id),
  name           text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
  secret_sealed  bytea NOT NULL,
  secret_key_id  text NOT NULL,
  created_by     uuid REFERENCES users (id) ON DELETE SET NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  revoked_at     timestamptz
);
CREATE INDEX integrations_workspace ON integrations (workspace_id, created_at);
ALTER TABLE integrations ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY integrations_tenant ON integrations
  USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id());
RESET ROLE;

-- +goose Down
-- The deletes run as the migrator (RLS is forced on the owner).
DROP TABLE IF EXISTS integrations;
DELETE FROM workspace_memberships m USING users u WHERE u.id = m.user_id AND u.kind = 'integration';
DELETE FROM users WHERE kind = 'integration';
SET LOCAL ROLE listing_owner;
DROP POLICY IF EXISTS users_integration_insert ON users;
ALTER TABLE users
  DROP CONSTRAINT IF EXISTS users_kind_credentials,
  ALTER COLUMN email SET NOT NULL,
  ALTER COLUMN password_hash SET NOT NULL,
  DROP COLUMN IF EXISTS kind;
RESET ROLE;

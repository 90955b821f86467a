-- Foundation schema: roles, tenancy, auth, idempotency, outbox, operations.
--
-- Roles (cluster-wide, created when missing so a DBA may pre-create them):
--   listing_owner      owns every object; runs migrations (the migrator SETs ROLE to it).
--   app_user           the service's login role: NOSUPERUSER, NOBYPASSRLS, DML only.
--   listing_discovery  NOLOGIN; owns the SECURITY DEFINER discovery functions and may read
--                      only the columns those functions need, through SELECT-only policies.
-- Every table holding workspace data has RLS ENABLED and FORCED; policies compare
-- workspace_id with current_setting('app.workspace_id', true), so no context means no rows.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'listing_owner') THEN
    CREATE ROLE listing_owner NOLOGIN NOSUPERUSER NOBYPASSRLS;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'app_user') THEN
    CREATE ROLE app_user LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'listing_discovery') THEN
    CREATE ROLE listing_discovery NOLOGIN NOSUPERUSER NOBYPASSRLS;
  END IF;
END
$$;
-- +goose StatementEnd

GRANT USAGE, CREATE ON SCHEMA public TO listing_owner;
GRANT USAGE ON SCHEMA public TO app_user, listing_discovery;
SET LOCAL ROLE listing_owner;

ALTER DEFAULT PRIVILEGES FOR ROLE listing_owner IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO app_user;
ALTER DEFAULT PRIVILEGES FOR ROLE listing_owner IN SCHEMA public
  GRANT USAGE, SELECT ON SEQUENCES TO app_user;
ALTER DEFAULT PRIVILEGES FOR ROLE listing_owner IN SCHEMA public
  REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- app_workspace_id is the workspace of the current transaction, NULL when unset.
-- +goose StatementBegin
CREATE FUNCTION app_workspace_id() RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT nullif(current_setting('app.workspace_id', true), '')::uuid
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION app_user_id() RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT nullif(current_setting('app.user_id', true), '')::uuid
$$;
-- +goose StatementEnd
GRANT EXECUTE ON FUNCTION app_workspace_id(), app_user_id() TO app_user, listing_discovery;

-- Accounts (not workspace data: no RLS).
CREATE TABLE users (
  id            uuid PRIMARY KEY,
  email         text NOT NULL,
  password_hash text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

CREATE TABLE refresh_token_families (
  id          uuid PRIMARY KEY,
  user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz,
  revoked_reason text
);
CREATE INDEX refresh_token_families_user ON refresh_token_families (user_id);

-- token_hash is SHA-256 of a 256-bit random token: the token itself is never stored.
CREATE TABLE refresh_tokens (
  token_hash  bytea PRIMARY KEY,
  family_id   uuid NOT NULL REFERENCES refresh_token_families (id) ON DELETE CASCADE,
  user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  issued_at   timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  used_at     timestamptz
);
CREATE INDEX refresh_tokens_family ON refresh_tokens (family_id);
CREATE INDEX refresh_tokens_expires ON refresh_tokens (expires_at);

-- Tenancy.
CREATE TABLE workspaces (
  id          uuid PRIMARY KEY,
  name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  created_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE workspaces ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY workspaces_tenant ON workspaces
  USING (id = app_workspace_id()) WITH CHECK (id = app_workspace_id());

CREATE TABLE workspace_memberships (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  role         text NOT NULL CHECK (role IN ('owner', 'member')),
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, user_id)
);
CREATE INDEX workspace_memberships_user ON workspace_memberships (user_id);
ALTER TABLE workspace_memberships ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_memberships_tenant ON workspace_memberships
  USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id());
-- A user may list their own memberships (to choose a workspace) without a workspace context.
CREATE POLICY workspace_memberships_self ON workspace_memberships FOR SELECT
  USING (user_id = app_user_id());
-- ... and read the workspaces they belong to.
CREATE POLICY workspaces_member ON workspaces FOR SELECT
  USING (EXISTS (SELECT 1 FROM workspace_memberships m WHERE m.workspace_id = id AND m.user_id = app_user_id()));

-- Idempotent requests (docs/http-api.md). The scope is (workspace, user, method, path, key).
-- request_fingerprint is an HMAC-SHA256 made with the secret named by fingerprint_key_id.
CREATE TABLE idempotency_requests (
  id                  uuid PRIMARY KEY,
  workspace_id        uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  user_id             uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  method              text NOT NULL,
  path                text NOT NULL,
  idempotency_key     uuid NOT NULL,
  request_fingerprint bytea NOT NULL,
  fingerprint_key_id  text NOT NULL,
  status              text NOT NULL CHECK (status IN ('executing', 'completed')),
  response_status     int,
  response_headers    jsonb NOT NULL DEFAULT '{}',
  response_body       bytea,
  created_at          timestamptz NOT NULL DEFAULT now(),
  completed_at        timestamptz,
  expires_at          timestamptz NOT NULL DEFAULT now() + interval '48 hours',
  CONSTRAINT idempotency_requests_scope UNIQUE (workspace_id, user_id, method, path, idempotency_key),
  CONSTRAINT idempotency_requests_retention CHECK (expires_at >= created_at + interval '24 hours')
);
CREATE INDEX idempotency_requests_expiry ON idempotency_requests (workspace_id, expires_at);
ALTER TABLE idempotency_requests ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY idempotency_requests_tenant ON idempotency_requests
  USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id());

-- Transactional outbox (docs/architecture.md). id is the BullMQ jobId.
CREATE TABLE outbox_events (
  id              uuid PRIMARY KEY,
  workspace_id    uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  event_type      text NOT NULL,
  destination     text NOT NULL,
  aggregate_type  text NOT NULL,
  aggregate_id    text NOT NULL,
  event_payload   jsonb NOT NULL,
  metadata        jsonb NOT NULL DEFAULT '{}',
  status          text NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'dispatching', 'dispatched', 'dead_letter')),
  attempt_count   int NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  locked_by       text,
  locked_until    timestamptz,
  last_error      text CHECK (length(last_error) <= 1000),
  created_at      timestamptz NOT NULL DEFAULT now(),
  dispatched_at   timestamptz
);
-- Claim: due pending rows and expired leases, per workspace, oldest first.
CREATE INDEX outbox_events_due ON outbox_events (workspace_id, next_attempt_at)
  WHERE status = 'pending';
CREATE INDEX outbox_events_leased ON outbox_events (workspace_id, locked_until)
  WHERE status = 'dispatching';
-- Retention delete of dispatched rows.
CREATE INDEX outbox_events_dispatched ON outbox_events (workspace_id, dispatched_at)
  WHERE status = 'dispatched';
CREATE INDEX outbox_events_aggregate ON outbox_events (workspace_id, aggregate_type, aggregate_id, created_at);
ALTER TABLE outbox_events ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY outbox_events_tenant ON outbox_events
  USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id());

-- User-visible state of asynchronous work (the source of truth, not the outbox).
CREATE TABLE operations (
  id             uuid PRIMARY KEY,
  workspace_id   uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  type           text NOT NULL,
  status         text NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  resource_type  text NOT NULL,
  resource_id    uuid NOT NULL,
  result         jsonb,
  error_code     text NOT NULL DEFAULT '',
  error_message  text NOT NULL DEFAULT '' CHECK (length(error_message) <= 1000),
  version        int NOT NULL DEFAULT 1,
  created_by     uuid REFERENCES users (id) ON DELETE SET NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operations_list ON operations (workspace_id, created_at DESC, id DESC);
CREATE INDEX operations_resource ON operations (workspace_id, resource_type, resource_id);
ALTER TABLE operations ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY operations_tenant ON operations
  USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id());

-- Workspace discovery without BYPASSRLS. listing_discovery may read only the columns below,
-- and only through these functions (it cannot log in). They return workspace ids, nothing else.
GRANT SELECT (workspace_id, status, next_attempt_at, locked_until, dispatched_at) ON outbox_events TO listing_discovery;
GRANT SELECT (workspace_id, expires_at) ON idempotency_requests TO listing_discovery;
CREATE POLICY outbox_events_discovery ON outbox_events FOR SELECT TO listing_discovery USING (true);
CREATE POLICY idempotency_requests_discovery ON idempotency_requests FOR SELECT TO listing_discovery USING (true);

-- outbox_due_workspaces returns up to p_limit workspaces that have outbox rows due at p_now
-- (pending and due, or dispatching with an expired lease), the longest-waiting first.
-- +goose StatementBegin
CREATE FUNCTION outbox_due_workspaces(p_now timestamptz, p_limit int)
RETURNS TABLE (workspace_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT d.workspace_id
  FROM (
    SELECT o.workspace_id, min(o.next_attempt_at) AS due
    FROM outbox_events o
    WHERE o.status = 'pending' AND o.next_attempt_at <= p_now
    GROUP BY o.workspace_id
    UNION ALL
    SELECT o.workspace_id, min(o.locked_until) AS due
    FROM outbox_events o
    WHERE o.status = 'dispatching' AND o.locked_until <= p_now
    GROUP BY o.workspace_id
  ) d
  GROUP BY d.workspace_id
  ORDER BY min(d.due), d.workspace_id
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd

-- outbox_retention_workspaces returns up to p_limit workspaces holding dispatched rows older
-- than p_before.
-- +goose StatementBegin
CREATE FUNCTION outbox_retention_workspaces(p_before timestamptz, p_limit int)
RETURNS TABLE (workspace_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT DISTINCT o.workspace_id
  FROM outbox_events o
  WHERE o.status = 'dispatched' AND o.dispatched_at < p_before
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd

-- idempotency_expired_workspaces returns up to p_limit workspaces holding idempotency records
-- expired at p_now.
-- +goose StatementBegin
CREATE FUNCTION idempotency_expired_workspaces(p_now timestamptz, p_limit int)
RETURNS TABLE (workspace_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT DISTINCT i.workspace_id
  FROM idempotency_requests i
  WHERE i.expires_at <= p_now
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd

RESET ROLE;
ALTER FUNCTION outbox_due_workspaces(timestamptz, int) OWNER TO listing_discovery;
ALTER FUNCTION outbox_retention_workspaces(timestamptz, int) OWNER TO listing_discovery;
ALTER FUNCTION idempotency_expired_workspaces(timestamptz, int) OWNER TO listing_discovery;
REVOKE ALL ON FUNCTION outbox_due_workspaces(timestamptz, int),
  outbox_retention_workspaces(timestamptz, int),
  idempotency_expired_workspaces(timestamptz, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_due_workspaces(timestamptz, int),
  outbox_retention_workspaces(timestamptz, int),
  idempotency_expired_workspaces(timestamptz, int) TO app_user;

-- +goose Down
DROP FUNCTION IF EXISTS idempotency_expired_workspaces(timestamptz, int);
DROP FUNCTION IF EXISTS outbox_retention_workspaces(timestamptz, int);
DROP FUNCTION IF EXISTS outbox_due_workspaces(timestamptz, int);
DROP TABLE IF EXISTS operations, outbox_events, idempotency_requests, workspace_memberships,
  workspaces, refresh_tokens, refresh_token_families, users;
DROP FUNCTION IF EXISTS app_user_id();
DROP FUNCTION IF EXISTS app_workspace_id();

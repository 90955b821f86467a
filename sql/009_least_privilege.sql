-- Least privilege for accounts, sessions and operators.
--
-- Roles (cluster-wide, created when missing so a DBA may pre-create them):
--   listing_auth      NOLOGIN; owns the SECURITY DEFINER functions of the auth flows that act
--                     before the user is known, and may read only the columns they need.
--   listing_operator  the operators' login role (OPERATOR_DATABASE_URL, `app outbox`):
--                     NOSUPERUSER, NOBYPASSRLS. The only role that may run outbox_stats; it
--                     reads and changes one workspace's outbox at a time, under the same
--                     tenant policies as app_user.
--
-- users, refresh_token_families and refresh_tokens get RLS scoped to one user: their rows
-- are visible and writable only when app.user_id (app_user_id()) names their user, so no
-- context means no rows. Registration needs no function: its transaction is scoped to the new
-- user's id, and the unique index on lower(email) reports a taken address whatever RLS hides.
-- Login and refresh find their user through auth_user_by_email and auth_use_refresh_token,
-- then scope the rest of their transaction to that user.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'listing_auth') THEN
    CREATE ROLE listing_auth NOLOGIN NOSUPERUSER NOBYPASSRLS;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'listing_operator') THEN
    CREATE ROLE listing_operator LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
  END IF;
END
$$;
-- +goose StatementEnd

GRANT USAGE ON SCHEMA public TO listing_auth, listing_operator;
SET LOCAL ROLE listing_owner;
GRANT EXECUTE ON FUNCTION app_user_id() TO listing_auth;
GRANT EXECUTE ON FUNCTION app_workspace_id() TO listing_operator;

-- Accounts and sessions: each user sees and writes their own rows only.
ALTER TABLE users ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY users_self ON users
  USING (id = app_user_id()) WITH CHECK (id = app_user_id());
ALTER TABLE refresh_token_families ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY refresh_token_families_self ON refresh_token_families
  USING (user_id = app_user_id()) WITH CHECK (user_id = app_user_id());
ALTER TABLE refresh_tokens ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY refresh_tokens_self ON refresh_tokens
  USING (user_id = app_user_id()) WITH CHECK (user_id = app_user_id());

-- What the auth functions read and change, and nothing else.
GRANT SELECT (id, email, password_hash, created_at) ON users TO listing_auth;
GRANT SELECT (id, revoked_at) ON refresh_token_families TO listing_auth;
GRANT SELECT (token_hash, family_id, user_id, expires_at, used_at), UPDATE (used_at) ON refresh_tokens TO listing_auth;
CREATE POLICY users_auth ON users FOR SELECT TO listing_auth USING (true);
CREATE POLICY refresh_token_families_auth ON refresh_token_families FOR SELECT TO listing_auth USING (true);
CREATE POLICY refresh_tokens_auth ON refresh_tokens FOR SELECT TO listing_auth USING (true);
CREATE POLICY refresh_tokens_auth_spend ON refresh_tokens FOR UPDATE TO listing_auth USING (true) WITH CHECK (true);

-- auth_user_by_email returns the user whose email equals p_email ignoring case (at most one
-- row): what login needs to check a password.
-- +goose StatementBegin
CREATE FUNCTION auth_user_by_email(p_email text)
RETURNS TABLE (id uuid, email text, password_hash text, created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT u.id, u.email, u.password_hash, u.created_at FROM users u WHERE lower(u.email) = lower(p_email)
$$;
-- +goose StatementEnd

-- auth_use_refresh_token spends, at p_now, the refresh token whose SHA-256 is p_token_hash.
-- No row when the token is unknown, expired or of a revoked family; otherwise one row with
-- its family and user, and first_use: true when this call spent it, false when it was spent
-- already (a reuse: the caller revokes the family). The row lock serializes concurrent uses
-- of one token: exactly one of them is the first use.
-- +goose StatementBegin
CREATE FUNCTION auth_use_refresh_token(p_token_hash bytea, p_now timestamptz)
RETURNS TABLE (family_id uuid, user_id uuid, first_use boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  t record;
BEGIN
  SELECT r.family_id, r.user_id, r.used_at, r.expires_at, f.revoked_at INTO t
  FROM refresh_tokens r JOIN refresh_token_families f ON f.id = r.family_id
  WHERE r.token_hash = p_token_hash
  FOR UPDATE OF r;
  IF NOT FOUND OR t.revoked_at IS NOT NULL THEN
    RETURN;
  END IF;
  IF t.used_at IS NULL THEN
    IF p_now >= t.expires_at THEN
      RETURN;
    END IF;
    UPDATE refresh_tokens r SET used_at = p_now WHERE r.token_hash = p_token_hash;
  END IF;
  family_id := t.family_id;
  user_id := t.user_id;
  first_use := t.used_at IS NULL;
  RETURN NEXT;
END
$$;
-- +goose StatementEnd

-- outbox_gauges returns, across workspaces, how many events wait for delivery (pending or
-- dispatching), when the oldest of them was created (NULL when none) and how many are dead
-- letters: the dispatcher's metrics, nothing else.
-- +goose StatementBegin
CREATE FUNCTION outbox_gauges()
RETURNS TABLE (undelivered bigint, oldest_undelivered_at timestamptz, dead_letters bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT count(*) FILTER (WHERE o.status IN ('pending', 'dispatching')),
         min(o.created_at) FILTER (WHERE o.status IN ('pending', 'dispatching')),
         count(*) FILTER (WHERE o.status = 'dead_letter')
  FROM outbox_events o
  WHERE o.status IN ('pending', 'dispatching', 'dead_letter')
$$;
-- +goose StatementEnd

-- Operators: one workspace at a time (app.workspace_id), under the tenant policies; what
-- `app outbox list|show|redrive|purge` reads and writes.
GRANT SELECT ON outbox_events, outbox_redrives TO listing_operator;
GRANT UPDATE (status, attempt_count, next_attempt_at, locked_by, locked_until), DELETE ON outbox_events TO listing_operator;
GRANT INSERT ON outbox_redrives, outbox_purges TO listing_operator;

RESET ROLE;
ALTER FUNCTION auth_user_by_email(text) OWNER TO listing_auth;
ALTER FUNCTION auth_use_refresh_token(bytea, timestamptz) OWNER TO listing_auth;
ALTER FUNCTION outbox_gauges() OWNER TO listing_discovery;
REVOKE ALL ON FUNCTION auth_user_by_email(text), auth_use_refresh_token(bytea, timestamptz),
  outbox_gauges(), outbox_stats(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION auth_user_by_email(text), auth_use_refresh_token(bytea, timestamptz),
  outbox_gauges() TO app_user;
REVOKE EXECUTE ON FUNCTION outbox_stats(timestamptz) FROM app_user;
GRANT EXECUTE ON FUNCTION outbox_stats(timestamptz) TO listing_operator;

-- +goose Down
REVOKE EXECUTE ON FUNCTION outbox_stats(timestamptz) FROM listing_operator;
GRANT EXECUTE ON FUNCTION outbox_stats(timestamptz) TO app_user;
DROP FUNCTION IF EXISTS outbox_gauges();
DROP FUNCTION IF EXISTS auth_use_refresh_token(bytea, timestamptz);
DROP FUNCTION IF EXISTS auth_user_by_email(text);
REVOKE ALL ON outbox_events, outbox_redrives, outbox_purges FROM listing_operator;
DROP POLICY IF EXISTS refresh_tokens_auth_spend ON refresh_tokens;
DROP POLICY IF EXISTS refresh_tokens_auth ON refresh_tokens;
DROP POLICY IF EXISTS refresh_token_families_auth ON refresh_token_families;
DROP POLICY IF EXISTS users_auth ON users;
REVOKE ALL ON users, refresh_token_families, refresh_tokens FROM listing_auth;
DROP POLICY IF EXISTS refresh_tokens_self ON refresh_tokens;
DROP POLICY IF EXISTS refresh_token_families_self ON refresh_token_families;
DROP POLICY IF EXISTS users_self ON users;
ALTER TABLE refresh_tokens NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY;
ALTER TABLE refresh_token_families NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY;
ALTER TABLE users NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY;
REVOKE EXECUTE ON FUNCTION app_workspace_id() FROM listing_operator;
REVOKE EXECUTE ON FUNCTION app_user_id() FROM listing_auth;
REVOKE USAGE ON SCHEMA public FROM listing_auth, listing_operator;

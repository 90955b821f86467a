-- The operator console's sessions and failed sign-ins, in the database: shared by every
-- console process and kept across restarts, so signing out ends a session everywhere.
--
-- console_sessions  one row per browser session: the SHA-256 of its random id (the cookie
--                   holds the id; the table never does), the operator, a check that binds it
--                   to the operator's current secret (SHA-256 of the id and of the secret's
--                   digest: a changed or removed secret ends the session), when it expires
--                   and, once signed out, when it was revoked. The console refuses a session
--                   that is missing, revoked or expired on every request.
-- console_signin_failures
--                   one row per refused sign-in (form or Bearer) with the client address it
--                   came from (an IPv6 client as its /64), so the console can hold each
--                   address to its budget of failures per window.
--
-- Neither is workspace data: no RLS. app_user has no privilege on them; listing_operator
-- (the console) reads and adds rows, may only set revoked_at of a session, and deletes what
-- has expired.

-- +goose Up
SET LOCAL ROLE listing_owner;

CREATE TABLE console_sessions (
  id_hash       bytea PRIMARY KEY,
  operator      text NOT NULL CHECK (length(operator) BETWEEN 1 AND 200),
  secret_check  bytea NOT NULL,
  created_at    timestamptz NOT NULL,
  expires_at    timestamptz NOT NULL,
  revoked_at    timestamptz,
  CHECK (expires_at > created_at)
);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

CREATE TABLE console_signin_failures (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  client     text NOT NULL CHECK (length(client) BETWEEN 1 AND 100),
  failed_at  timestamptz NOT NULL
);
CREATE INDEX console_signin_failures_client ON console_signin_failures (client, failed_at);
CREATE INDEX console_signin_failures_failed ON console_signin_failures (failed_at);

-- The default privileges gave app_user DML on them: the service has no business here.
REVOKE ALL ON console_sessions, console_signin_failures FROM app_user;
REVOKE ALL ON SEQUENCE console_signin_failures_id_seq FROM app_user;
GRANT SELECT, INSERT, DELETE ON console_sessions TO listing_operator;
GRANT UPDATE (revoked_at) ON console_sessions TO listing_operator;
GRANT SELECT, INSERT, DELETE ON console_signin_failures TO listing_operator;

RESET ROLE;

-- +goose Down
DROP TABLE IF EXISTS console_signin_failures;
DROP TABLE IF EXISTS console_sessions;

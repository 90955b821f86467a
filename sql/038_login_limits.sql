-- The API's login limits, in the database: shared by every API process and kept across
-- restarts (docs/http-api.md, "Login limits"). An account is named by the SHA-256 of its
-- normalized email (32 bytes whatever the client sent; the tables never hold an email), a
-- client by its address key (an IPv6 client as its /64) or, for a login that sent a device
-- token known for the account, by that device ("device:" and the token's hash).
--
-- login_failures     one row per login counted as failed: from the moment it is admitted
--                    (so concurrent logins cannot overrun a budget) until it turns out right.
--                    The limiter counts an account's and a pair's rows of the last window.
-- login_turns        per account, the time from which the next password check from an
--                    unknown client may run: checks beyond the account's free failures are
--                    spaced out, and one whose turn is too far is refused, not queued.
-- login_known_clients
--                    the clients an account logged in from successfully, and when last:
--                    their logins are not slowed down by other clients' failures.
-- login_devices      the SHA-256 of each device token a successful login returned, with its
--                    account and when last used.
--
-- None is workspace data. app_user reads and writes them (the default privileges) one account
-- at a time: RLS, enabled and forced, shows a transaction the rows of the account it named
-- in app.login_account (hex of the hash; unset: no rows). login_limits_sweep, a SECURITY
-- DEFINER function owned by listing_owner, deletes what no longer counts across accounts, and
-- never what is younger than 15 minutes (failures, turns) or a day (known clients, devices).

-- +goose Up
SET LOCAL ROLE listing_owner;

CREATE TABLE login_failures (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account    bytea NOT NULL CHECK (octet_length(account) = 32),
  client     text NOT NULL CHECK (length(client) BETWEEN 1 AND 100),
  failed_at  timestamptz NOT NULL
);
CREATE INDEX login_failures_account ON login_failures (account, failed_at);
CREATE INDEX login_failures_pair ON login_failures (account, client, failed_at);
CREATE INDEX login_failures_failed ON login_failures (failed_at);

CREATE TABLE login_turns (
  account  bytea PRIMARY KEY CHECK (octet_length(account) = 32),
  next_at  timestamptz NOT NULL
);
CREATE INDEX login_turns_next ON login_turns (next_at);

CREATE TABLE login_known_clients (
  account          bytea NOT NULL CHECK (octet_length(account) = 32),
  client           text NOT NULL CHECK (length(client) BETWEEN 1 AND 100),
  last_success_at  timestamptz NOT NULL,
  PRIMARY KEY (account, client)
);
CREATE INDEX login_known_clients_last ON login_known_clients (last_success_at);

CREATE TABLE login_devices (
  token_hash       bytea PRIMARY KEY CHECK (octet_length(token_hash) = 32),
  account          bytea NOT NULL CHECK (octet_length(account) = 32),
  last_success_at  timestamptz NOT NULL
);
CREATE INDEX login_devices_last ON login_devices (last_success_at);

ALTER TABLE login_failures ENABLE ROW LEVEL SECURITY;
ALTER TABLE login_failures FORCE ROW LEVEL SECURITY;
ALTER TABLE login_turns ENABLE ROW LEVEL SECURITY;
ALTER TABLE login_turns FORCE ROW LEVEL SECURITY;
ALTER TABLE login_known_clients ENABLE ROW LEVEL SECURITY;
ALTER TABLE login_known_clients FORCE ROW LEVEL SECURITY;
ALTER TABLE login_devices ENABLE ROW LEVEL SECURITY;
ALTER TABLE login_devices FORCE ROW LEVEL SECURITY;
CREATE POLICY login_failures_account ON login_failures TO app_user
  USING (account = decode(nullif(current_setting('app.login_account', true), ''), 'hex'))
  WITH CHECK (account = decode(nullif(current_setting('app.login_account', true), ''), 'hex'));
CREATE POLICY login_turns_account ON login_turns TO app_user
  USING (account = decode(nullif(current_setting('app.login_account', true), ''), 'hex'))
  WITH CHECK (account = decode(nullif(current_setting('app.login_account', true), ''), 'hex'));
CREATE POLICY login_known_clients_account ON login_known_clients TO app_user
  USING (account = decode(nullif(current_setting('app.login_account', true), ''), 'hex'))
  WITH CHECK (account = decode(nullif(current_setting('app.login_account', true), ''), 'hex'));
CREATE POLICY login_devices_account ON login_devices TO app_user
  USING (account = decode(nullif(current_setting('app.login_account', true), ''), 'hex'))
  WITH CHECK (account = decode(nullif(current_setting('app.login_account', true), ''), 'hex'));
-- The sweep runs as listing_owner, across accounts.
CREATE POLICY login_failures_sweep ON login_failures TO listing_owner USING (true);
CREATE POLICY login_turns_sweep ON login_turns TO listing_owner USING (true);
CREATE POLICY login_known_clients_sweep ON login_known_clients TO listing_owner USING (true);
CREATE POLICY login_devices_sweep ON login_devices TO listing_owner USING (true);

-- +goose StatementBegin
CREATE FUNCTION login_limits_sweep(p_window interval, p_known interval, p_batch int)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH f AS (
    DELETE FROM login_failures WHERE id IN (SELECT id FROM login_failures
      WHERE failed_at < now() - greatest(p_window, interval '15 minutes') LIMIT p_batch)
  ), t AS (
    DELETE FROM login_turns WHERE account IN (SELECT account FROM login_turns
      WHERE next_at < now() - greatest(p_window, interval '15 minutes') LIMIT p_batch)
  ), c AS (
    DELETE FROM login_known_clients WHERE (account, client) IN (SELECT account, client FROM login_known_clients
      WHERE last_success_at < now() - greatest(p_known, interval '1 day') LIMIT p_batch)
  )
  DELETE FROM login_devices WHERE token_hash IN (SELECT token_hash FROM login_devices
    WHERE last_success_at < now() - greatest(p_known, interval '1 day') LIMIT p_batch);
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION login_limits_sweep(interval, interval, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION login_limits_sweep(interval, interval, int) TO app_user;

RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP FUNCTION IF EXISTS login_limits_sweep(interval, interval, int);
DROP TABLE IF EXISTS login_devices;
DROP TABLE IF EXISTS login_known_clients;
DROP TABLE IF EXISTS login_turns;
DROP TABLE IF EXISTS login_failures;
RESET ROLE;

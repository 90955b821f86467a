-- The operator console (issue 14): what operators may read across workspaces, and a record of
-- their actions on the queues.
--
-- Role (cluster-wide, created when missing so a DBA may pre-create it):
--   listing_inspector  NOLOGIN, NOSUPERUSER, NOBYPASSRLS; owns the SECURITY DEFINER functions
--                      below and may read only the columns they return, through SELECT-only
--                      policies. Only listing_operator may execute them (not PUBLIC, not
--                      app_user).
--
-- The functions read across workspaces and change nothing: outbox totals, dead letters with
-- their redrive history, the record of redrives and purges, and operations (one by id, or a
-- workspace's recent failures). Payloads, metadata and operation results are never returned.
-- Redrive and purge stay what `app outbox` does: listing_operator changes one workspace's rows
-- at a time under the tenant policies (sql/009).
--
-- operator_actions records what operators did outside the database (retry and remove of
-- BullMQ jobs), with their name. It is not workspace data: no RLS; app_user has no privilege
-- on it; listing_operator may read it and add to it, never change or delete it.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'listing_inspector') THEN
    CREATE ROLE listing_inspector NOLOGIN NOSUPERUSER NOBYPASSRLS;
  END IF;
END
$$;
-- +goose StatementEnd

GRANT USAGE ON SCHEMA public TO listing_inspector;
SET LOCAL ROLE listing_owner;

GRANT SELECT (id, workspace_id, event_type, destination, status, attempt_count, last_error, created_at)
  ON outbox_events TO listing_inspector;
CREATE POLICY outbox_events_inspector ON outbox_events FOR SELECT TO listing_inspector USING (true);
GRANT SELECT (workspace_id, event_id, redriven_by, reason, redriven_at, previous_attempt_count)
  ON outbox_redrives TO listing_inspector;
CREATE POLICY outbox_redrives_inspector ON outbox_redrives FOR SELECT TO listing_inspector USING (true);
GRANT SELECT (workspace_id, event_id, event_type, destination, purged_by, reason, purged_at)
  ON outbox_purges TO listing_inspector;
CREATE POLICY outbox_purges_inspector ON outbox_purges FOR SELECT TO listing_inspector USING (true);
GRANT SELECT (id, workspace_id, type, status, resource_type, resource_id, error_code, error_message, created_at, updated_at)
  ON operations TO listing_inspector;
CREATE POLICY operations_inspector ON operations FOR SELECT TO listing_inspector USING (true);

CREATE TABLE operator_actions (
  id          uuid PRIMARY KEY,
  operator    text NOT NULL CHECK (length(operator) BETWEEN 1 AND 200),
  action      text NOT NULL CHECK (length(action) BETWEEN 1 AND 100),
  target      text NOT NULL CHECK (length(target) BETWEEN 1 AND 500),
  reason      text NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
  acted_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operator_actions_acted ON operator_actions (acted_at DESC);
-- The default privileges gave app_user DML on it: the service has no business here.
REVOKE ALL ON operator_actions FROM app_user;
GRANT SELECT, INSERT ON operator_actions TO listing_operator;

-- operator_outbox_totals returns the number of events and the oldest creation time per
-- status, destination and workspace, the largest groups first, at most p_limit rows (≤ 10000).
-- +goose StatementBegin
CREATE FUNCTION operator_outbox_totals(p_limit int)
RETURNS TABLE (status text, destination text, workspace_id uuid, events bigint, oldest_created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT o.status, o.destination, o.workspace_id, count(*), min(o.created_at)
  FROM outbox_events o
  GROUP BY o.status, o.destination, o.workspace_id
  ORDER BY count(*) DESC, o.status, o.destination, o.workspace_id
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd

-- operator_dead_letters returns dead letters across workspaces, the newest first, at most
-- p_limit (≤ 1000): what each event was (no payload), its attempts and last error (sanitized
-- by the dispatcher when written; at most 1000 characters), and its redrives (a JSON array of
-- {by, reason, at, previous_attempt_count}, oldest first).
-- +goose StatementBegin
CREATE FUNCTION operator_dead_letters(p_limit int)
RETURNS TABLE (id uuid, workspace_id uuid, destination text, event_type text, attempt_count int,
               last_error text, created_at timestamptz, redrives jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT o.id, o.workspace_id, o.destination, o.event_type, o.attempt_count,
         coalesce(left(o.last_error, 1000), ''), o.created_at,
         coalesce((SELECT jsonb_agg(jsonb_build_object('by', r.redriven_by, 'reason', r.reason, 'at', r.redriven_at,
                                                       'previous_attempt_count', r.previous_attempt_count)
                                    ORDER BY r.redriven_at)
                   FROM outbox_redrives r WHERE r.workspace_id = o.workspace_id AND r.event_id = o.id), '[]'::jsonb)
  FROM outbox_events o
  WHERE o.status = 'dead_letter'
  ORDER BY o.created_at DESC, o.id DESC
  LIMIT least(greatest(p_limit, 0), 1000)
$$;
-- +goose StatementEnd

-- operator_outbox_actions returns the latest redrives and purges across workspaces, the
-- newest first, at most p_limit (≤ 1000): who, why, when, and which event.
-- +goose StatementBegin
CREATE FUNCTION operator_outbox_actions(p_limit int)
RETURNS TABLE (action text, workspace_id uuid, event_id uuid, operator text, reason text, acted_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT a.* FROM (
    SELECT 'redrive'::text, r.workspace_id, r.event_id, r.redriven_by, r.reason, r.redriven_at FROM outbox_redrives r
    UNION ALL
    SELECT 'purge'::text, p.workspace_id, p.event_id, p.purged_by, p.reason, p.purged_at FROM outbox_purges p
  ) a (action, workspace_id, event_id, operator, reason, acted_at)
  ORDER BY a.acted_at DESC
  LIMIT least(greatest(p_limit, 0), 1000)
$$;
-- +goose StatementEnd

-- operator_operation returns the operation p_id, whatever its workspace (no row when none),
-- without its result.
-- +goose StatementBegin
CREATE FUNCTION operator_operation(p_id uuid)
RETURNS TABLE (id uuid, workspace_id uuid, type text, status text, resource_type text, resource_id uuid,
               error_code text, error_message text, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT p.id, p.workspace_id, p.type, p.status, p.resource_type, p.resource_id, p.error_code, p.error_message,
         p.created_at, p.updated_at
  FROM operations p WHERE p.id = p_id
$$;
-- +goose StatementEnd

-- operator_failed_operations returns the failed operations of workspace p_workspace, the
-- latest first, at most p_limit (≤ 1000), without their results.
-- +goose StatementBegin
CREATE FUNCTION operator_failed_operations(p_workspace uuid, p_limit int)
RETURNS TABLE (id uuid, workspace_id uuid, type text, status text, resource_type text, resource_id uuid,
               error_code text, error_message text, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT p.id, p.workspace_id, p.type, p.status, p.resource_type, p.resource_id, p.error_code, p.error_message,
         p.created_at, p.updated_at
  FROM operations p
  WHERE p.workspace_id = p_workspace AND p.status = 'failed'
  ORDER BY p.updated_at DESC, p.id DESC
  LIMIT least(greatest(p_limit, 0), 1000)
$$;
-- +goose StatementEnd

RESET ROLE;
ALTER FUNCTION operator_outbox_totals(int) OWNER TO listing_inspector;
ALTER FUNCTION operator_dead_letters(int) OWNER TO listing_inspector;
ALTER FUNCTION operator_outbox_actions(int) OWNER TO listing_inspector;
ALTER FUNCTION operator_operation(uuid) OWNER TO listing_inspector;
ALTER FUNCTION operator_failed_operations(uuid, int) OWNER TO listing_inspector;
REVOKE ALL ON FUNCTION operator_outbox_totals(int), operator_dead_letters(int), operator_outbox_actions(int),
  operator_operation(uuid), operator_failed_operations(uuid, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operator_outbox_totals(int), operator_dead_letters(int), operator_outbox_actions(int),
  operator_operation(uuid), operator_failed_operations(uuid, int) TO listing_operator;

-- +goose Down
DROP FUNCTION IF EXISTS operator_failed_operations(uuid, int);
DROP FUNCTION IF EXISTS operator_operation(uuid);
DROP FUNCTION IF EXISTS operator_outbox_actions(int);
DROP FUNCTION IF EXISTS operator_dead_letters(int);
DROP FUNCTION IF EXISTS operator_outbox_totals(int);
DROP TABLE IF EXISTS operator_actions;
DROP POLICY IF EXISTS operations_inspector ON operations;
DROP POLICY IF EXISTS outbox_purges_inspector ON outbox_purges;
DROP POLICY IF EXISTS outbox_redrives_inspector ON outbox_redrives;
DROP POLICY IF EXISTS outbox_events_inspector ON outbox_events;
REVOKE ALL ON operations, outbox_purges, outbox_redrives, outbox_events FROM listing_inspector;
REVOKE USAGE ON SCHEMA public FROM listing_inspector;

-- A live outbox and a log of dispatched events.
--
-- outbox_events keeps only what the outbox still owes or could not deliver: pending events
-- (due, waiting for their backoff, or leased by a dispatcher) and dead letters. A claim is a
-- lease written in columns no index covers (locked_by, locked_until, attempt_count), so it
-- is a HOT update: the status stays 'pending' while leased, and "dispatching" is what
-- operators see of a pending event with a lease. Marking an event dispatched moves it, in one
-- statement, to outbox_dispatched: an insert-only log, range-partitioned by day of
-- dispatched_at (UTC), whose old partitions are dropped whole by retention. outbox_events
-- stays small whatever the volume, and the dead row versions per event fall from three (two
-- updates that rewrote every index, then the retention DELETE) to two HOT-prunable ones.
--
-- outbox_dispatched has a default partition: a day whose partition was not created ahead
-- (retention not run for days) still takes its events, so marking never fails for want of a
-- partition. Partitions are created ahead and dropped by outbox_dispatched_maintain, a
-- SECURITY DEFINER function owned by listing_owner (the only role that may create and drop
-- them); app_user may run it with a retention of at least one day, nothing more. Partitions
-- are reached through outbox_dispatched only: app_user and the operators hold no privilege
-- on them, and the parent's policies (tenant, dispatcher's scope) apply.
--
-- Migration of an existing database: under an ACCESS EXCLUSIVE lock on outbox_events (held
-- until the migration commits; writers of events wait for it), every dispatched row is copied
-- into the log with its dispatched_at (rows of the days before today go to the default
-- partition, which retention empties as they age past it), then deleted from outbox_events;
-- dispatching rows become pending rows that keep their lease (locked_by, locked_until), so a
-- dispatcher of the previous version loses its marks and the events are delivered again when
-- their lease expires (at least once, same job id). The lock is held for the time of copying
-- the history: see docs/guarantees.md for the figure measured.

-- +goose Up
SET LOCAL ROLE listing_owner;
LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE;

CREATE TABLE outbox_dispatched (
  id              uuid NOT NULL,
  workspace_id    uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  event_type      text NOT NULL,
  destination     text NOT NULL,
  aggregate_type  text NOT NULL,
  aggregate_id    text NOT NULL,
  event_payload   jsonb NOT NULL,
  metadata        jsonb NOT NULL,
  attempt_count   int NOT NULL,
  created_at      timestamptz NOT NULL,
  dispatched_at   timestamptz NOT NULL
) PARTITION BY RANGE (dispatched_at);
CREATE TABLE outbox_dispatched_default PARTITION OF outbox_dispatched DEFAULT;
-- The reconciler's "last dispatched job of a task" (outbox_last_dispatched_job).
CREATE INDEX outbox_dispatched_aggregate ON outbox_dispatched (workspace_id, aggregate_type, aggregate_id, created_at);
CREATE POLICY outbox_dispatched_tenant ON outbox_dispatched
  USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id());
CREATE POLICY outbox_dispatched_dispatch ON outbox_dispatched TO app_user
  USING (workspace_id = ANY ((SELECT app_workspace_ids())::uuid[]))
  WITH CHECK (workspace_id = ANY ((SELECT app_workspace_ids())::uuid[]));
REVOKE ALL ON outbox_dispatched, outbox_dispatched_default FROM PUBLIC, app_user;
GRANT SELECT, INSERT ON outbox_dispatched TO app_user;
GRANT SELECT ON outbox_dispatched TO listing_operator;

-- outbox_dispatched_maintain creates the partitions of today and the p_ahead days after it
-- (UTC), and drops the partitions wholly older than now() - p_keep, and deletes the default
-- partition's rows older than that. A day whose events already went to the default partition
-- keeps them there (until they age past p_keep) and gets no partition. It waits at most 2 s
-- for its locks (creating and dropping a partition lock outbox_dispatched briefly), and
-- fails rather than queue the dispatchers' marks behind a long transaction.
-- +goose StatementBegin
CREATE FUNCTION outbox_dispatched_maintain(p_keep interval, p_ahead int)
RETURNS TABLE (created int, dropped int, deleted bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public SET lock_timeout = '2s' AS $$
DECLARE
  today  date := (now() AT TIME ZONE 'UTC')::date;
  cutoff timestamptz;
  d      date;
  lo     timestamptz;
  hi     timestamptz;
  part   text;
BEGIN
  IF p_keep IS NULL OR p_keep < interval '1 day' THEN
    RAISE EXCEPTION 'outbox_dispatched_maintain: p_keep must be at least 1 day, got %', p_keep USING ERRCODE = '22023';
  END IF;
  IF p_ahead IS NULL OR p_ahead < 1 OR p_ahead > 31 THEN
    RAISE EXCEPTION 'outbox_dispatched_maintain: p_ahead must be in [1, 31], got %', p_ahead USING ERRCODE = '22023';
  END IF;
  cutoff := now() - p_keep;
  created := 0;
  dropped := 0;
  FOR d IN SELECT g::date FROM generate_series(today, today + p_ahead, interval '1 day') g LOOP
    part := 'outbox_dispatched_' || to_char(d, 'YYYYMMDD');
    CONTINUE WHEN to_regclass('public.' || part) IS NOT NULL;
    lo := d::timestamp AT TIME ZONE 'UTC';
    hi := (d + 1)::timestamp AT TIME ZONE 'UTC';
    CONTINUE WHEN EXISTS (SELECT 1 FROM outbox_dispatched_default WHERE dispatched_at >= lo AND dispatched_at < hi);
    EXECUTE format('CREATE TABLE public.%I PARTITION OF public.outbox_dispatched FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
    EXECUTE format('REVOKE ALL ON public.%I FROM PUBLIC, app_user', part);
    created := created + 1;
  END LOOP;
  FOR part IN
    SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'public.outbox_dispatched'::regclass AND c.relname ~ '^outbox_dispatched_[0-9]{8}$'
      AND ((to_date(substr(c.relname, 19), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC') <= cutoff
    ORDER BY c.relname
  LOOP
    EXECUTE format('DROP TABLE public.%I', part);
    dropped := dropped + 1;
  END LOOP;
  DELETE FROM outbox_dispatched_default WHERE dispatched_at < cutoff;
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN NEXT;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION outbox_dispatched_maintain(interval, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_dispatched_maintain(interval, int) TO app_user;

SELECT outbox_dispatched_maintain(interval '7 days', 3);

-- The history moves to the log, as the owner with RLS not forced for the move (whoever runs
-- the migration), then forced again on both tables.
ALTER TABLE outbox_events NO FORCE ROW LEVEL SECURITY;
INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
                               event_payload, metadata, attempt_count, created_at, dispatched_at)
SELECT id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
       event_payload, metadata, attempt_count, created_at, coalesce(dispatched_at, created_at)
FROM outbox_events WHERE status = 'dispatched';
DELETE FROM outbox_events WHERE status = 'dispatched';
UPDATE outbox_events SET status = 'pending' WHERE status = 'dispatching';
ALTER TABLE outbox_events FORCE ROW LEVEL SECURITY;
ALTER TABLE outbox_dispatched ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

DROP INDEX outbox_events_dispatched, outbox_events_leased;
ALTER TABLE outbox_events
  DROP CONSTRAINT outbox_events_status_check,
  ADD CONSTRAINT outbox_events_status_check CHECK (status IN ('pending', 'dead_letter')),
  DROP COLUMN dispatched_at;
-- Fillfactor 50 leaves room on each page for the claim's and the mark's HOT updates; the
-- table holds what is owed, so a vacuum after every 1,000 dead rows (not 20% of the table)
-- keeps the claim's index scans short.
ALTER TABLE outbox_events SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
  autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000, autovacuum_vacuum_cost_delay = 0);

-- outbox_all_events is every event as operators and tests see it: the live table's (status
-- 'dispatching' for a pending event with a lease) and the log's (status 'dispatched'; its
-- next_attempt_at is its dispatch time). A security_invoker view: the caller's privileges and
-- RLS apply to both tables.
CREATE VIEW outbox_all_events WITH (security_invoker = true) AS
  SELECT id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
         CASE WHEN status = 'pending' AND locked_by IS NOT NULL THEN 'dispatching' ELSE status END AS status,
         attempt_count, next_attempt_at, locked_by, locked_until, last_error, created_at,
         NULL::timestamptz AS dispatched_at, event_payload, metadata
  FROM outbox_events
  UNION ALL
  SELECT id, workspace_id, event_type, destination, aggregate_type, aggregate_id, 'dispatched',
         attempt_count, dispatched_at, NULL, NULL, NULL, created_at, dispatched_at, event_payload, metadata
  FROM outbox_dispatched;
REVOKE ALL ON outbox_all_events FROM PUBLIC, app_user;
GRANT SELECT ON outbox_all_events TO app_user, listing_operator;

-- The functions below belong to their roles (sql/001, 009, 011, 015): replaced as the migrator.
RESET ROLE;

-- A due event: pending, due, and not leased (or its lease expired). Leased events are pending
-- events too: the walk skips the ones whose lease runs.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_due_workspaces(p_now timestamptz, p_limit int)
RETURNS TABLE (workspace_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH RECURSIVE ws AS (
    (SELECT o.workspace_id FROM outbox_events o WHERE o.status = 'pending'
     ORDER BY o.workspace_id LIMIT 1)
    UNION ALL
    SELECT n.workspace_id FROM ws CROSS JOIN LATERAL (
      SELECT o.workspace_id FROM outbox_events o
      WHERE o.status = 'pending' AND o.workspace_id > ws.workspace_id
      ORDER BY o.workspace_id LIMIT 1) n
  )
  SELECT ws.workspace_id
  FROM ws CROSS JOIN LATERAL (
    SELECT o.next_attempt_at AS due FROM outbox_events o
    WHERE o.workspace_id = ws.workspace_id AND o.status = 'pending' AND o.next_attempt_at <= p_now
      AND (o.locked_until IS NULL OR o.locked_until <= p_now)
    ORDER BY o.next_attempt_at LIMIT 1) d
  ORDER BY d.due, ws.workspace_id
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_gauges()
RETURNS TABLE (undelivered bigint, oldest_undelivered_at timestamptz, dead_letters bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT count(*) FILTER (WHERE o.status = 'pending'),
         min(o.created_at) FILTER (WHERE o.status = 'pending'),
         count(*) FILTER (WHERE o.status = 'dead_letter')
  FROM outbox_events o
$$;
-- +goose StatementEnd

-- outbox_stats: the live table's statuses ('dispatching' is a pending event with a lease);
-- the log is not counted (its size is the partitions').
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_stats(p_now timestamptz)
RETURNS TABLE (status text, events bigint, workspaces bigint, due bigint,
               oldest_created_at timestamptz, oldest_due_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT s.status, count(*), count(DISTINCT s.workspace_id),
         count(*) FILTER (WHERE s.status <> 'dead_letter' AND s.due <= p_now),
         min(s.created_at),
         min(s.due)
  FROM (SELECT o.workspace_id, o.created_at,
               CASE WHEN o.status = 'pending' AND o.locked_until IS NOT NULL THEN 'dispatching' ELSE o.status END AS status,
               CASE WHEN o.status = 'dead_letter' THEN NULL
                    ELSE greatest(o.next_attempt_at, o.locked_until) END AS due
        FROM outbox_events o) s
  GROUP BY s.status
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION operator_outbox_totals(p_limit int)
RETURNS TABLE (status text, destination text, workspace_id uuid, events bigint, oldest_created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT s.status, s.destination, s.workspace_id, count(*), min(s.created_at)
  FROM (SELECT CASE WHEN o.status = 'pending' AND o.locked_until IS NOT NULL THEN 'dispatching' ELSE o.status END AS status,
               o.destination, o.workspace_id, o.created_at
        FROM outbox_events o) s
  GROUP BY s.status, s.destination, s.workspace_id
  ORDER BY count(*) DESC, s.status, s.destination, s.workspace_id
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd
GRANT SELECT (locked_until) ON outbox_events TO listing_inspector;

DROP FUNCTION outbox_retention_workspaces(timestamptz, int);

-- The reconciler's questions over the new storage (sql/017).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_owes_task(p_aggregate_type text, p_aggregate_id text, p_payload_key text, p_task_id text)
RETURNS boolean
LANGUAGE sql STABLE SECURITY INVOKER SET search_path = pg_catalog, public AS $$
  SELECT EXISTS (
    SELECT 1 FROM outbox_events o
    WHERE o.aggregate_type = p_aggregate_type AND o.aggregate_id = p_aggregate_id
      AND o.event_payload->>p_payload_key = p_task_id
      AND o.status = 'pending')
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_last_dispatched_job(p_aggregate_type text, p_aggregate_id text, p_payload_key text, p_task_id text)
RETURNS uuid
LANGUAGE sql STABLE SECURITY INVOKER SET search_path = pg_catalog, public AS $$
  SELECT o.id FROM outbox_dispatched o
  WHERE o.aggregate_type = p_aggregate_type AND o.aggregate_id = p_aggregate_id
    AND o.event_payload->>p_payload_key = p_task_id
  ORDER BY o.created_at DESC
  LIMIT 1
$$;
-- +goose StatementEnd

-- +goose Down
-- The log's rows come back as dispatched rows; leased pending rows become dispatching.
SET LOCAL ROLE listing_owner;
LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE;
ALTER TABLE outbox_events RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
  autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold, autovacuum_analyze_scale_factor,
  autovacuum_analyze_threshold, autovacuum_vacuum_cost_delay);
ALTER TABLE outbox_events ADD COLUMN dispatched_at timestamptz,
  DROP CONSTRAINT outbox_events_status_check,
  ADD CONSTRAINT outbox_events_status_check CHECK (status IN ('pending', 'dispatching', 'dispatched', 'dead_letter'));
GRANT SELECT (dispatched_at) ON outbox_events TO listing_discovery;
ALTER TABLE outbox_events NO FORCE ROW LEVEL SECURITY;
ALTER TABLE outbox_dispatched NO FORCE ROW LEVEL SECURITY;
UPDATE outbox_events SET status = 'dispatching' WHERE status = 'pending' AND locked_by IS NOT NULL;
INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload,
                           metadata, status, attempt_count, created_at, dispatched_at)
SELECT id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload,
       metadata, 'dispatched', attempt_count, created_at, dispatched_at
FROM outbox_dispatched ON CONFLICT (id) DO NOTHING;
ALTER TABLE outbox_events FORCE ROW LEVEL SECURITY;
CREATE INDEX outbox_events_leased ON outbox_events (workspace_id, locked_until) WHERE status = 'dispatching';
CREATE INDEX outbox_events_dispatched ON outbox_events (workspace_id, dispatched_at) WHERE status = 'dispatched';
DROP VIEW outbox_all_events;
DROP FUNCTION outbox_dispatched_maintain(interval, int);
DROP TABLE outbox_dispatched;
RESET ROLE;
REVOKE SELECT (locked_until) ON outbox_events FROM listing_inspector;
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_due_workspaces(p_now timestamptz, p_limit int)
RETURNS TABLE (workspace_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH RECURSIVE pending AS (
    (SELECT o.workspace_id, o.next_attempt_at AS due FROM outbox_events o
     WHERE o.status = 'pending'
     ORDER BY o.workspace_id, o.next_attempt_at LIMIT 1)
    UNION ALL
    SELECT n.workspace_id, n.due FROM pending p CROSS JOIN LATERAL (
      SELECT o.workspace_id, o.next_attempt_at AS due FROM outbox_events o
      WHERE o.status = 'pending' AND o.workspace_id > p.workspace_id
      ORDER BY o.workspace_id, o.next_attempt_at LIMIT 1) n
  ), leased AS (
    (SELECT o.workspace_id, o.locked_until AS due FROM outbox_events o
     WHERE o.status = 'dispatching'
     ORDER BY o.workspace_id, o.locked_until LIMIT 1)
    UNION ALL
    SELECT n.workspace_id, n.due FROM leased l CROSS JOIN LATERAL (
      SELECT o.workspace_id, o.locked_until AS due FROM outbox_events o
      WHERE o.status = 'dispatching' AND o.workspace_id > l.workspace_id
      ORDER BY o.workspace_id, o.locked_until LIMIT 1) n
  ), d AS (
    SELECT p.workspace_id, p.due FROM pending p WHERE p.due <= p_now
    UNION ALL
    SELECT l.workspace_id, l.due FROM leased l WHERE l.due <= p_now
  )
  SELECT d.workspace_id
  FROM d
  GROUP BY d.workspace_id
  ORDER BY min(d.due), d.workspace_id
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_gauges()
RETURNS TABLE (undelivered bigint, oldest_undelivered_at timestamptz, dead_letters bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT count(*) FILTER (WHERE o.status IN ('pending', 'dispatching')),
         min(o.created_at) FILTER (WHERE o.status IN ('pending', 'dispatching')),
         count(*) FILTER (WHERE o.status = 'dead_letter')
  FROM outbox_events o
  WHERE o.status IN ('pending', 'dispatching', 'dead_letter')
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_stats(p_now timestamptz)
RETURNS TABLE (status text, events bigint, workspaces bigint, due bigint,
               oldest_created_at timestamptz, oldest_due_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT o.status, count(*), count(DISTINCT o.workspace_id),
         count(*) FILTER (WHERE (o.status = 'pending' AND o.next_attempt_at <= p_now)
                             OR (o.status = 'dispatching' AND o.locked_until <= p_now)),
         min(o.created_at),
         min(CASE o.status WHEN 'pending' THEN o.next_attempt_at WHEN 'dispatching' THEN o.locked_until END)
  FROM outbox_events o
  GROUP BY o.status
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION operator_outbox_totals(p_limit int)
RETURNS TABLE (status text, destination text, workspace_id uuid, events bigint, oldest_created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT o.status, o.destination, o.workspace_id, count(*), min(o.created_at)
  FROM outbox_events o
  GROUP BY o.status, o.destination, o.workspace_id
  ORDER BY count(*) DESC, o.status, o.destination, o.workspace_id
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_owes_task(p_aggregate_type text, p_aggregate_id text, p_payload_key text, p_task_id text)
RETURNS boolean
LANGUAGE sql STABLE SECURITY INVOKER SET search_path = pg_catalog, public AS $$
  SELECT EXISTS (
    SELECT 1 FROM outbox_events o
    WHERE o.aggregate_type = p_aggregate_type AND o.aggregate_id = p_aggregate_id
      AND o.event_payload->>p_payload_key = p_task_id
      AND o.status IN ('pending', 'dispatching'))
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_last_dispatched_job(p_aggregate_type text, p_aggregate_id text, p_payload_key text, p_task_id text)
RETURNS uuid
LANGUAGE sql STABLE SECURITY INVOKER SET search_path = pg_catalog, public AS $$
  SELECT o.id FROM outbox_events o
  WHERE o.aggregate_type = p_aggregate_type AND o.aggregate_id = p_aggregate_id
    AND o.event_payload->>p_payload_key = p_task_id
    AND o.status = 'dispatched'
  ORDER BY o.created_at DESC
  LIMIT 1
$$;
-- +goose StatementEnd
ALTER FUNCTION outbox_retention_workspaces(timestamptz, int) OWNER TO listing_discovery;
REVOKE ALL ON FUNCTION outbox_retention_workspaces(timestamptz, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_retention_workspaces(timestamptz, int) TO app_user;

-- Discovery in time proportional to the workspaces, not to the backlog (issue 13).
--
-- outbox_due_workspaces (sql/001) grouped every pending row and every dispatching row by
-- workspace to find each workspace's oldest due time: with a backlog, the whole backlog, read
-- at every discovery (every BusyPollInterval, 50 ms, while there is work). In the benchmark's
-- end-to-end run (100,000 commands, 200,000 outbox rows) it took 332 ms a call on average.
--
-- Now each of its two sides is a loose index scan along its partial index (outbox_events_due,
-- outbox_events_leased): the first live entry of a workspace holds its oldest due time, and
-- the next workspace is one index descent away (workspace_id > the last one). Same result,
-- same order, same columns read (the ones granted to listing_discovery); owner, SECURITY
-- DEFINER and grants are kept by CREATE OR REPLACE. Measured on a static backlog: 200,000
-- rows in 100 workspaces 488 -> 28 ms; 100,000 rows in 10,000 workspaces 432 -> 200 ms. In the
-- end-to-end run, while the backlog drains: 10 ms a call against 332 ms. The dispatcher also
-- spaces discoveries by at least four times the last one's duration (Dispatcher.feed), which
-- bounds discovery's share of the database whatever the number of workspaces with work.

-- +goose Up
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_due_workspaces(p_now timestamptz, p_limit int)
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

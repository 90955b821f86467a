-- The console's overview (docs/operations.md, "The operator console"): the engine at a glance
-- now, and over the last hour and day.
--
-- Now is read when the page is drawn, through operator_overview_tasks: per task table the
-- unfinished tasks (over <table>_unfinished, 026_task_tables.sql) and those failed since a
-- time (over <table>_failed, 039_operator_view.sql), nothing else.
--
-- Over time is a per-minute sample the console writes (infra/console.Sampler), one row per
-- minute and flow in overview_flow_samples and one per minute in overview_outbox_samples,
-- kept two days. A sample reads
--   operator_overview_tasks       as above (waiting and running at the sample's time);
--   operator_overview_log         from the log of delivered events (outbox_dispatched, over
--                                 its BRIN index of dispatched_at), per operation type, the
--                                 operations accepted, succeeded and failed in the minute,
--                                 with commit → start and commit → finish (p50, p99);
--   operator_overview_deliveries  from the same log, per destination, the events delivered
--                                 in the minute, and among a flow's request events the
--                                 redeliveries (its task had one before) and last looks.
-- The service's own writes pay nothing for it: no index or trigger is added to a table they
-- write.

-- +goose Up
SET LOCAL ROLE listing_owner;

CREATE TABLE overview_flow_samples (
  minute          timestamptz NOT NULL,
  flow            text NOT NULL,
  waiting         bigint NOT NULL,  -- tasks pending at the sample's time
  running         bigint NOT NULL,  -- tasks running at the sample's time
  queue_waiting   bigint,           -- jobs waiting in the flow's queue (Redis); NULL: not read
  accepted        bigint NOT NULL,  -- operations accepted (committed) in the minute
  succeeded       bigint NOT NULL,
  failed          bigint NOT NULL,
  delivered       bigint NOT NULL,  -- the flow's request events delivered to its queue
  redelivered     bigint NOT NULL,  -- of those, a task's second or later delivery (not last looks)
  last_looks      bigint NOT NULL,
  start_p50       real,             -- commit → job start of the operations finished, seconds
  start_p99       real,
  finish_p50      real,             -- commit → finish of the operations finished, seconds
  finish_p99      real,
  PRIMARY KEY (minute, flow)
);

CREATE TABLE overview_outbox_samples (
  minute              timestamptz PRIMARY KEY,
  owed                bigint NOT NULL,  -- events pending or being dispatched at the sample's time
  oldest_owed_seconds real,             -- the oldest of those; NULL: none owed
  delivered           bigint NOT NULL   -- events delivered in the minute
);

-- The default privileges gave app_user DML on them: the service has no business here.
REVOKE ALL ON overview_flow_samples, overview_outbox_samples FROM app_user;
GRANT SELECT, INSERT, DELETE ON overview_flow_samples, overview_outbox_samples TO listing_operator;

RESET ROLE;
GRANT SELECT (event_type, aggregate_type, aggregate_id, workspace_id, event_payload) ON outbox_dispatched TO listing_inspector;

-- operator_overview_tasks returns one row per task table: its tasks pending and running, the
-- oldest pending task's last move, and its tasks failed at or after p_failed_since.
-- +goose StatementBegin
CREATE FUNCTION operator_overview_tasks(p_failed_since timestamptz)
RETURNS TABLE (task_table text, pending bigint, running bigint, oldest_pending_at timestamptz, failed bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  branches text;
BEGIN
  SELECT string_agg(format($f$SELECT %L::text, u.pending, u.running, u.oldest_pending_at,
        (SELECT count(*) FROM public.%I t WHERE t.status = 'failed' AND t.updated_at >= $1)
      FROM (SELECT count(*) FILTER (WHERE t.status = 'pending') AS pending, count(*) FILTER (WHERE t.status = 'running') AS running,
                   min(t.updated_at) FILTER (WHERE t.status = 'pending') AS oldest_pending_at
            FROM public.%I t WHERE t.status IN ('pending', 'running')) u$f$,
      x.table_name, x.table_name, x.table_name), ' UNION ALL ' ORDER BY x.table_name)
    INTO branches FROM task_tables x;
  IF branches IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY EXECUTE branches USING coalesce(p_failed_since, '-infinity'::timestamptz);
END
$$;
-- +goose StatementEnd

-- operator_overview_log returns, per operation type, the operations accepted (their pending
-- operation.status_changed) and finished (succeeded, failed) with a commit in [p_from, p_to)
-- and delivered by p_to + 5 minutes, and of those finished the percentiles of commit → start
-- (the event's started_at) and commit → finish (its commit), in seconds, from the
-- operation's creation.
-- +goose StatementBegin
CREATE FUNCTION operator_overview_log(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (op_type text, accepted bigint, succeeded bigint, failed bigint,
               start_p50 float8, start_p99 float8, finish_p50 float8, finish_p99 float8)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH e AS (
    SELECT d.event_payload->>'type' AS op_type, d.event_payload->>'status' AS status, d.created_at,
           (d.event_payload->>'started_at')::timestamptz AS started_at,
           (d.event_payload->>'operation_id')::uuid AS operation_id
    FROM outbox_dispatched d
    WHERE d.dispatched_at >= p_from AND d.dispatched_at < p_to + interval '5 minutes'
      AND d.created_at >= p_from AND d.created_at < p_to
      AND d.event_type = 'operation.status_changed'
  ), f AS (
    SELECT e.op_type, e.status, extract(epoch FROM e.started_at - p.created_at) AS start_s,
           extract(epoch FROM e.created_at - p.created_at) AS finish_s
    FROM e JOIN operations p ON p.id = e.operation_id
    WHERE e.status IN ('succeeded', 'failed')
  )
  SELECT a.op_type, a.accepted, coalesce(b.succeeded, 0), coalesce(b.failed, 0),
         b.start_p50, b.start_p99, b.finish_p50, b.finish_p99
  FROM (SELECT op_type, count(*) FILTER (WHERE status = 'pending') AS accepted FROM e GROUP BY op_type) a
  LEFT JOIN (
    SELECT op_type, count(*) FILTER (WHERE status = 'succeeded') AS succeeded, count(*) FILTER (WHERE status = 'failed') AS failed,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY start_s) AS start_p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY start_s) AS start_p99,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY finish_s) AS finish_p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY finish_s) AS finish_p99
    FROM f GROUP BY op_type
  ) b ON b.op_type = a.op_type
$$;
-- +goose StatementEnd

-- operator_overview_deliveries returns, per destination, the events delivered in
-- [p_from, p_to), and among those of an event type in p_request_types (the flows' request
-- events) the last looks (a last_look field) and the redeliveries (an earlier request event
-- of the same task is in the log, over outbox_dispatched_aggregate).
-- +goose StatementBegin
CREATE FUNCTION operator_overview_deliveries(p_from timestamptz, p_to timestamptz, p_request_types text[])
RETURNS TABLE (destination text, delivered bigint, redelivered bigint, last_looks bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT d.destination, count(*),
         count(*) FILTER (WHERE d.event_type = ANY (p_request_types) AND NOT d.event_payload ? 'last_look'
           AND EXISTS (SELECT 1 FROM outbox_dispatched o
                       WHERE o.workspace_id = d.workspace_id AND o.aggregate_type = d.aggregate_type
                         AND o.aggregate_id = d.aggregate_id AND o.created_at < d.created_at
                         AND o.event_type = d.event_type)),
         count(*) FILTER (WHERE d.event_type = ANY (p_request_types) AND d.event_payload ? 'last_look')
  FROM outbox_dispatched d
  WHERE d.dispatched_at >= p_from AND d.dispatched_at < p_to
  GROUP BY d.destination
$$;
-- +goose StatementEnd

ALTER FUNCTION operator_overview_tasks(timestamptz) OWNER TO listing_inspector;
ALTER FUNCTION operator_overview_log(timestamptz, timestamptz) OWNER TO listing_inspector;
ALTER FUNCTION operator_overview_deliveries(timestamptz, timestamptz, text[]) OWNER TO listing_inspector;
REVOKE ALL ON FUNCTION operator_overview_tasks(timestamptz), operator_overview_log(timestamptz, timestamptz),
  operator_overview_deliveries(timestamptz, timestamptz, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operator_overview_tasks(timestamptz), operator_overview_log(timestamptz, timestamptz),
  operator_overview_deliveries(timestamptz, timestamptz, text[]) TO listing_operator;

-- +goose Down
DROP FUNCTION IF EXISTS operator_overview_deliveries(timestamptz, timestamptz, text[]);
DROP FUNCTION IF EXISTS operator_overview_log(timestamptz, timestamptz);
DROP FUNCTION IF EXISTS operator_overview_tasks(timestamptz);
REVOKE SELECT (event_type, aggregate_type, aggregate_id, workspace_id, event_payload) ON outbox_dispatched FROM listing_inspector;
SET LOCAL ROLE listing_owner;
DROP TABLE IF EXISTS overview_outbox_samples;
DROP TABLE IF EXISTS overview_flow_samples;
RESET ROLE;

-- The console's overview reads a minute of the log once (docs/operations.md, "The overview and
-- what it costs"). sql/054's sampler read each minute's rows of outbox_dispatched twice, once
-- in operator_overview_log (operations accepted and finished, their latencies) and once in
-- operator_overview_deliveries (events delivered, last looks, redeliveries), over the log's
-- BRIN index of dispatched_at; the first of them read the rows delivered up to five minutes
-- after the minute, so that a round catching up on missed minutes read each minute's rows up
-- to six times. operator_overview_minute replaces both with one read of the rows delivered
-- from the minute's start to p_until (the sampler passes the minute's end plus its lag, ten
-- seconds: what it counts as the minute's is what it could see when it sampled on time),
-- whatever the round's time, and returns the same figures: counts exact, the percentiles
-- from at most p_sample finished operations per type and the redeliveries from at most
-- p_sample probed request events per destination, drawn uniformly at random as in sql/054
-- (each candidate with probability 1.25 p_sample / n, then p_sample of those at random; all
-- of them when there are no more).
-- overview_summarize_log (sql/054) is kept as it is: it summarizes each complete BRIN range
-- once, those written since its last call, so that the one read visits the minute's ranges
-- and not every range written since the partition's last vacuum.

-- +goose Up
DROP FUNCTION operator_overview_log(timestamptz, timestamptz, int);
DROP FUNCTION operator_overview_deliveries(timestamptz, timestamptz, text[], int);
-- Where a row of the log is (its partition and place in it), to read a sampled row again.
GRANT SELECT (tableoid, ctid) ON outbox_dispatched TO listing_inspector;

-- operator_overview_minute returns one row per operation type (kind 'operation', name the
-- type) and one per destination (kind 'destination', name the destination) of the log's
-- events delivered in [p_from, p_until) (p_until ≥ p_to), read once over the BRIN index:
--   operation:   accepted (pending operation.status_changed), succeeded, failed: those with a
--                commit in [p_from, p_to); sampled, and the percentiles of commit → start
--                (the event's started_at) and commit → finish (its commit), in seconds from
--                the operation's creation, of a uniform random sample of at most p_sample of
--                those finished (one primary-key read of operations each);
--   destination: delivered, the events delivered in [p_from, p_to); among those of a type in
--                p_request_types (the flows' request events) the last looks (a last_look
--                field) and the other request events (requests); of a uniform random sample
--                of at most p_sample of those requests (probed: its size), how many are
--                redeliveries (redelivered: an earlier request event of the same task was
--                delivered before p_until; one probe of outbox_dispatched_aggregate_id per
--                partition up to p_until's, the days ahead left out).
-- The other columns of a row are NULL. Of each row read only what the counts need is kept (in
-- memory, work_mem 128 MB: flags, the type or destination, where the row is, a random
-- number); the counts are made in one pass over them (grouping sets), the candidates for
-- both samples drawn in a second, and the sampled rows (at most 2 p_sample per flow) read
-- again by their ctid for what the percentiles and probes need. The log is read over its
-- BRIN index whatever the planner's statistics (enable_seqscan off): a partition not yet
-- analyzed (autovacuum off, or a new day) is otherwise read whole, each round.
-- +goose StatementBegin
CREATE FUNCTION operator_overview_minute(p_from timestamptz, p_to timestamptz, p_until timestamptz,
                                         p_request_types text[], p_sample int)
RETURNS TABLE (kind text, name text, accepted bigint, succeeded bigint, failed bigint, sampled bigint,
               start_p50 float8, start_p99 float8, finish_p50 float8, finish_p99 float8,
               delivered bigint, last_looks bigint, requests bigint, probed bigint, redelivered bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public SET work_mem = '128MB'
  SET enable_seqscan = off AS $$
  WITH e AS MATERIALIZED (
    SELECT y.op, y.del, y.op_type, y.status, y.destination,
           y.del AND y.event_type = ANY (p_request_types) AS request,
           y.del AND y.event_type = ANY (p_request_types) AND y.look AS look,
           y.ctid, y.tableoid, random() AS u
    FROM (SELECT d.event_type = 'operation.status_changed' AND d.created_at >= p_from AND d.created_at < p_to AS op,
                 d.dispatched_at < p_to AS del, d.event_type,
                 CASE WHEN d.event_type = 'operation.status_changed' THEN d.event_payload->>'type' END AS op_type,
                 CASE WHEN d.event_type = 'operation.status_changed' THEN d.event_payload->>'status' END AS status,
                 CASE WHEN d.event_type = ANY (p_request_types) THEN d.event_payload ? 'last_look' END AS look,
                 d.destination, d.ctid, d.tableoid
          FROM outbox_dispatched d
          WHERE d.dispatched_at >= p_from AND d.dispatched_at < p_until) y
    WHERE y.op OR y.del
  ), n AS (
    SELECT e.op, e.op_type, e.del, e.destination,
           count(*) FILTER (WHERE e.status = 'pending') AS accepted,
           count(*) FILTER (WHERE e.status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE e.status = 'failed') AS failed,
           count(*) AS delivered, count(*) FILTER (WHERE e.look) AS last_looks,
           count(*) FILTER (WHERE e.request AND NOT e.look) AS requests
    FROM e GROUP BY GROUPING SETS ((e.op, e.op_type), (e.del, e.destination))
  ), c AS (
    SELECT CASE WHEN o.op_type IS NOT NULL THEN 'operation' ELSE 'destination' END AS kind,
           coalesce(o.op_type, d.destination) AS name, e.ctid, e.tableoid, e.u
    FROM e
    LEFT JOIN n o ON o.op AND e.op AND e.status IN ('succeeded', 'failed') AND o.op_type = e.op_type
                     AND e.u < 1.25::float8 * p_sample / nullif(o.succeeded + o.failed, 0)
    LEFT JOIN n d ON d.del AND e.request AND NOT e.look AND d.destination = e.destination
                     AND e.u < 1.25::float8 * p_sample / nullif(d.requests, 0)
    WHERE o.op_type IS NOT NULL OR d.destination IS NOT NULL
  ), s AS (
    SELECT x.kind, x.name, q.workspace_id, q.event_type, q.aggregate_type, q.aggregate_id, q.created_at, q.event_payload
    FROM (SELECT c.*, row_number() OVER (PARTITION BY c.kind, c.name ORDER BY c.u) AS r FROM c) x
    JOIN outbox_dispatched q ON q.tableoid = x.tableoid AND q.ctid = x.ctid
    WHERE x.r <= p_sample
  ), ol AS (
    SELECT s.name, count(*) AS sampled,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM (s.event_payload->>'started_at')::timestamptz - p.created_at)) AS start_p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM (s.event_payload->>'started_at')::timestamptz - p.created_at)) AS start_p99,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.created_at - p.created_at)) AS finish_p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM s.created_at - p.created_at)) AS finish_p99
    FROM s JOIN operations p ON p.id = (s.event_payload->>'operation_id')::uuid
    WHERE s.kind = 'operation'
    GROUP BY s.name
  ), dp AS (
    SELECT s.name, count(*) AS probed,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM outbox_dispatched q
                                          WHERE q.aggregate_id = s.aggregate_id AND q.aggregate_type = s.aggregate_type
                                            AND q.created_at < s.created_at AND q.workspace_id = s.workspace_id
                                            AND q.event_type = s.event_type AND q.dispatched_at < p_until)) AS redelivered
    FROM s WHERE s.kind = 'destination' GROUP BY s.name
  )
  SELECT 'operation', o.op_type, o.accepted, o.succeeded, o.failed, coalesce(ol.sampled, 0),
         ol.start_p50, ol.start_p99, ol.finish_p50, ol.finish_p99, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint
  FROM n o LEFT JOIN ol ON ol.name = o.op_type WHERE o.op
  UNION ALL
  SELECT 'destination', d.destination, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
         d.delivered, d.last_looks, d.requests, coalesce(dp.probed, 0), coalesce(dp.redelivered, 0)
  FROM n d LEFT JOIN dp ON dp.name = d.destination WHERE d.del
$$;
-- +goose StatementEnd
ALTER FUNCTION operator_overview_minute(timestamptz, timestamptz, timestamptz, text[], int) OWNER TO listing_inspector;
REVOKE ALL ON FUNCTION operator_overview_minute(timestamptz, timestamptz, timestamptz, text[], int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operator_overview_minute(timestamptz, timestamptz, timestamptz, text[], int) TO listing_operator;

-- +goose Down
DROP FUNCTION IF EXISTS operator_overview_minute(timestamptz, timestamptz, timestamptz, text[], int);
REVOKE SELECT (tableoid, ctid) ON outbox_dispatched FROM listing_inspector;

-- sql/054's definitions.
-- operator_overview_log returns, per operation type, the operations accepted (their pending
-- operation.status_changed) and finished (succeeded, failed) with a commit in [p_from, p_to)
-- and delivered by p_to + 5 minutes, and the percentiles of commit → start (the event's
-- started_at) and commit → finish (its commit), in seconds from the operation's creation, of
-- a uniform random sample of at most p_sample of those finished (sampled: its size; all of
-- them when there are no more than p_sample).
-- +goose StatementBegin
CREATE FUNCTION operator_overview_log(p_from timestamptz, p_to timestamptz, p_sample int)
RETURNS TABLE (op_type text, accepted bigint, succeeded bigint, failed bigint, sampled bigint,
               start_p50 float8, start_p99 float8, finish_p50 float8, finish_p99 float8)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public SET work_mem = '64MB' AS $$
  WITH e AS MATERIALIZED (
    SELECT x.op_type, x.status, x.created_at, x.started_at, x.operation_id, random() AS u
    FROM (SELECT d.event_payload->>'type' AS op_type, d.event_payload->>'status' AS status, d.created_at,
                 CASE WHEN d.event_payload->>'status' IN ('succeeded', 'failed') THEN d.event_payload->>'started_at' END AS started_at,
                 CASE WHEN d.event_payload->>'status' IN ('succeeded', 'failed') THEN d.event_payload->>'operation_id' END AS operation_id
          FROM outbox_dispatched d
          WHERE d.dispatched_at >= p_from AND d.dispatched_at < p_to + interval '5 minutes'
            AND d.created_at >= p_from AND d.created_at < p_to
            AND d.event_type = 'operation.status_changed') x
  ), n AS (
    SELECT e.op_type, count(*) FILTER (WHERE e.status = 'pending') AS accepted,
           count(*) FILTER (WHERE e.status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE e.status = 'failed') AS failed
    FROM e GROUP BY e.op_type
  ), s AS (
    SELECT x.op_type, x.created_at, x.started_at::timestamptz AS started_at, x.operation_id::uuid AS operation_id
    FROM (SELECT e.op_type, e.created_at, e.started_at, e.operation_id,
                 row_number() OVER (PARTITION BY e.op_type ORDER BY e.u) AS r
          FROM e JOIN n ON n.op_type = e.op_type
          WHERE e.status IN ('succeeded', 'failed') AND e.u < 1.25::float8 * p_sample / nullif(n.succeeded + n.failed, 0)) x
    WHERE x.r <= p_sample
  ), f AS (
    SELECT s.op_type, extract(epoch FROM s.started_at - p.created_at) AS start_s,
           extract(epoch FROM s.created_at - p.created_at) AS finish_s
    FROM s JOIN operations p ON p.id = s.operation_id
  )
  SELECT n.op_type, n.accepted, n.succeeded, n.failed, coalesce(b.sampled, 0),
         b.start_p50, b.start_p99, b.finish_p50, b.finish_p99
  FROM n LEFT JOIN (
    SELECT f.op_type, count(*) AS sampled,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY f.start_s) AS start_p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY f.start_s) AS start_p99,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY f.finish_s) AS finish_p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY f.finish_s) AS finish_p99
    FROM f GROUP BY f.op_type
  ) b ON b.op_type = n.op_type
$$;
-- +goose StatementEnd

-- operator_overview_deliveries returns, per destination, the events delivered in
-- [p_from, p_to); among those of an event type in p_request_types (the flows' request
-- events) the last looks (a last_look field) and the other request events (requests); and,
-- for a uniform random sample of at most p_sample of those requests (probed: its size; all
-- of them when there are no more than p_sample), how many are redeliveries (redelivered: an
-- earlier request event of the same task is in the log, over outbox_dispatched_aggregate_id).
-- +goose StatementBegin
CREATE FUNCTION operator_overview_deliveries(p_from timestamptz, p_to timestamptz, p_request_types text[], p_sample int)
RETURNS TABLE (destination text, delivered bigint, last_looks bigint, requests bigint, probed bigint, redelivered bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public SET work_mem = '64MB' AS $$
  WITH e AS MATERIALIZED (
    SELECT x.destination, x.request, x.look,
           CASE WHEN x.request AND NOT x.look THEN x.workspace_id END AS workspace_id,
           CASE WHEN x.request AND NOT x.look THEN x.event_type END AS event_type,
           CASE WHEN x.request AND NOT x.look THEN x.aggregate_type END AS aggregate_type,
           CASE WHEN x.request AND NOT x.look THEN x.aggregate_id END AS aggregate_id,
           CASE WHEN x.request AND NOT x.look THEN x.created_at END AS created_at, random() AS u
    FROM (SELECT d.destination, d.event_type = ANY (p_request_types) AS request,
                 d.event_type = ANY (p_request_types) AND d.event_payload ? 'last_look' AS look,
                 d.workspace_id, d.event_type, d.aggregate_type, d.aggregate_id, d.created_at
          FROM outbox_dispatched d
          WHERE d.dispatched_at >= p_from AND d.dispatched_at < p_to) x
  ), n AS (
    SELECT e.destination, count(*) AS delivered, count(*) FILTER (WHERE e.look) AS last_looks,
           count(*) FILTER (WHERE e.request AND NOT e.look) AS requests
    FROM e GROUP BY e.destination
  ), s AS (
    SELECT x.destination, x.workspace_id, x.event_type, x.aggregate_type, x.aggregate_id, x.created_at
    FROM (SELECT e.destination, e.workspace_id, e.event_type, e.aggregate_type, e.aggregate_id, e.created_at,
                 row_number() OVER (PARTITION BY e.destination ORDER BY e.u) AS r
          FROM e JOIN n ON n.destination = e.destination
          WHERE e.request AND NOT e.look AND e.u < 1.25::float8 * p_sample / nullif(n.requests, 0)) x
    WHERE x.r <= p_sample
  ), p AS (
    SELECT s.destination, count(*) AS probed,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM outbox_dispatched o
                                          WHERE o.aggregate_id = s.aggregate_id AND o.aggregate_type = s.aggregate_type
                                            AND o.created_at < s.created_at AND o.workspace_id = s.workspace_id
                                            AND o.event_type = s.event_type)) AS redelivered
    FROM s GROUP BY s.destination
  )
  SELECT n.destination, n.delivered, n.last_looks, n.requests, coalesce(p.probed, 0), coalesce(p.redelivered, 0)
  FROM n LEFT JOIN p ON p.destination = n.destination
$$;
-- +goose StatementEnd

ALTER FUNCTION operator_overview_log(timestamptz, timestamptz, int) OWNER TO listing_inspector;
ALTER FUNCTION operator_overview_deliveries(timestamptz, timestamptz, text[], int) OWNER TO listing_inspector;
REVOKE ALL ON FUNCTION operator_overview_log(timestamptz, timestamptz, int),
  operator_overview_deliveries(timestamptz, timestamptz, text[], int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operator_overview_log(timestamptz, timestamptz, int),
  operator_overview_deliveries(timestamptz, timestamptz, text[], int) TO listing_operator;

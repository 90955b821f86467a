-- The console's overview, a sample's work bounded (docs/operations.md, "The overview and what
-- it costs"): operator_overview_log and operator_overview_deliveries (sql/050) count the
-- minute's events in the log over its BRIN index of dispatched_at as before, but read
-- another table only for a bounded random sample of them, so that the part of a sample that
-- probes an index per row costs the same at any rate:
--   operator_overview_log         the percentiles of commit → start and commit → finish from
--                                 at most p_sample finished operations per operation type,
--                                 drawn uniformly at random (all of them when fewer), each
--                                 one primary-key read of operations; the counts (accepted,
--                                 succeeded, failed) from the log alone, exact; sampled says
--                                 how many finished operations the percentiles are from.
--   operator_overview_deliveries  the redeliveries probed (an earlier request event of the
--                                 same task in the log) for at most p_sample request events
--                                 per destination, drawn uniformly at random (all of them
--                                 when fewer); delivered, last looks and request events
--                                 counted exactly. The caller scales the redeliveries found
--                                 to the request events and says so.
-- Each reads the minute's rows once over the BRIN index (only the fields it needs, kept in
-- memory: work_mem 64 MB holds a minute of 100,000 operations), counts them, and draws the
-- sample from them: each candidate with probability 1.25 p_sample / n (n its count), then
-- p_sample of those drawn at random. With no more than p_sample, every one is taken; above,
-- the draw holds fewer than p_sample with a probability under 1e-6 (p_sample ≥ 1,000), and the
-- sample is uniform either way. overview_flow_samples keeps each minute's sample sizes
-- (latency_sample, redelivered_sample: NULL when every row was read).
-- Their read of the minute is as tight as the log's BRIN index is summarized: a range never
-- summarized matches every query. VACUUM summarizes (autovacuum: after inserts of 20 % of a
-- partition; never where autovacuum is off), so without more a minute's read could cover
-- every page written since the partition's last vacuum. overview_summarize_log, which the
-- sampler runs before it reads, summarizes the complete ranges of the partitions of today
-- and yesterday (UTC) and of the default partition written since its last call (each range
-- read once; overview_log_summary keeps where it stopped): never the last range, whose last
-- page is still being filled (a summarized range makes each insert past its maximum update
-- the summary).
-- The service's own writes pay nothing for it: no index, trigger or column is added to a
-- table they write.

-- +goose Up
SET LOCAL ROLE listing_owner;
ALTER TABLE overview_flow_samples
  ADD COLUMN latency_sample bigint,      -- finished operations the percentiles are from; NULL: all of them
  ADD COLUMN redelivered_sample bigint;  -- request events probed for redeliveries, scaled up; NULL: all of them (exact)
RESET ROLE;

DROP FUNCTION operator_overview_log(timestamptz, timestamptz);
DROP FUNCTION operator_overview_deliveries(timestamptz, timestamptz, text[]);

SET LOCAL ROLE listing_owner;
CREATE TABLE overview_log_summary (
  partition  text PRIMARY KEY,  -- a partition of outbox_dispatched
  next_block bigint NOT NULL    -- its BRIN ranges before this block are summarized
);
REVOKE ALL ON overview_log_summary FROM app_user;
RESET ROLE;

-- overview_summarize_log summarizes the BRIN ranges of dispatched_at (outbox_dispatched_at)
-- of today's and yesterday's partitions (UTC) and of the default partition that are complete
-- (the relation has a block after them) and lie after where its last call stopped, and
-- returns how many it summarized. It waits at most 1 s for a partition's lock (SHARE UPDATE
-- EXCLUSIVE, which inserts do not take: a VACUUM of the partition holds it) and fails
-- rather than wait longer.
-- +goose StatementBegin
CREATE FUNCTION overview_summarize_log() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public SET lock_timeout = '1s' AS $$
DECLARE
  r      record;
  ppr    int;
  blocks bigint;
  b      bigint;
  done   bigint := 0;
BEGIN
  FOR r IN
    SELECT c.oid AS part, c.relname, ic.oid AS idx, ic.reloptions
    FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
    JOIN pg_index i ON i.indrelid = c.oid JOIN pg_class ic ON ic.oid = i.indexrelid
    JOIN pg_am a ON a.oid = ic.relam AND a.amname = 'brin'
    WHERE h.inhparent = 'public.outbox_dispatched'::regclass
      AND c.relname IN ('outbox_dispatched_' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD'),
                        'outbox_dispatched_' || to_char((now() - interval '1 day') AT TIME ZONE 'UTC', 'YYYYMMDD'),
                        'outbox_dispatched_default')
    ORDER BY c.relname
  LOOP
    ppr := coalesce((SELECT o.option_value::int FROM pg_options_to_table(r.reloptions) o WHERE o.option_name = 'pages_per_range'), 128);
    blocks := pg_relation_size(r.part) / current_setting('block_size')::int;
    b := coalesce((SELECT s.next_block FROM overview_log_summary s WHERE s.partition = r.relname), 0);
    WHILE b + ppr < blocks LOOP
      done := done + brin_summarize_range(r.idx, b);
      b := b + ppr;
    END LOOP;
    INSERT INTO overview_log_summary (partition, next_block) VALUES (r.relname, b)
      ON CONFLICT (partition) DO UPDATE SET next_block = excluded.next_block;
  END LOOP;
  DELETE FROM overview_log_summary s
  WHERE NOT EXISTS (SELECT 1 FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
                    WHERE h.inhparent = 'public.outbox_dispatched'::regclass AND c.relname = s.partition);
  RETURN done;
END
$$;
-- +goose StatementEnd
ALTER FUNCTION overview_summarize_log() OWNER TO listing_owner;
REVOKE ALL ON FUNCTION overview_summarize_log() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION overview_summarize_log() TO listing_operator;

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

-- +goose Down
DROP FUNCTION IF EXISTS overview_summarize_log();
DROP FUNCTION IF EXISTS operator_overview_deliveries(timestamptz, timestamptz, text[], int);
DROP FUNCTION IF EXISTS operator_overview_log(timestamptz, timestamptz, int);
SET LOCAL ROLE listing_owner;
ALTER TABLE overview_flow_samples DROP COLUMN IF EXISTS latency_sample, DROP COLUMN IF EXISTS redelivered_sample;
DROP TABLE IF EXISTS overview_log_summary;
RESET ROLE;

-- sql/050's definitions.
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

ALTER FUNCTION operator_overview_log(timestamptz, timestamptz) OWNER TO listing_inspector;
ALTER FUNCTION operator_overview_deliveries(timestamptz, timestamptz, text[]) OWNER TO listing_inspector;
REVOKE ALL ON FUNCTION operator_overview_log(timestamptz, timestamptz),
  operator_overview_deliveries(timestamptz, timestamptz, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operator_overview_log(timestamptz, timestamptz),
  operator_overview_deliveries(timestamptz, timestamptz, text[]) TO listing_operator;

-- Fair share per store (infra/outbox/doc.go, "Fair share"): a workspace's slots of a flow
-- queue are kept per lane, the store its request names (the payload's store_id; '' for a
-- request that names none), so that one store's backlog, waiting for its rate limit
-- (052_store_rate_limits.sql) in the slots it holds, never holds back a request to another
-- store of the workspace.
--   outbox_fair_slots.lane   the lane of the admitted task: (workspace, queue, lane, slot) is
--                            unique, so each lane has its own slots 1..FAIR_SHARE_SLOTS.
--   outbox_events.held_lane  the lane of a held request: the release and the sweep give a
--                            lane's free slot to that lane's oldest held request only.
-- Slots taken and events held before this migration are in lane ''.

-- +goose Up
SET LOCAL ROLE listing_owner;

ALTER TABLE outbox_fair_slots ADD COLUMN lane text NOT NULL DEFAULT '',
  DROP CONSTRAINT outbox_fair_slots_pkey,
  ADD PRIMARY KEY (workspace_id, destination, lane, slot);
ALTER TABLE outbox_events ADD COLUMN held_lane text;
ALTER TABLE outbox_events NO FORCE ROW LEVEL SECURITY;
UPDATE outbox_events SET held_lane = '' WHERE status = 'held';
ALTER TABLE outbox_events FORCE ROW LEVEL SECURITY;
-- The release's and the sweep's walk: the oldest held events of a lane.
DROP INDEX outbox_events_held;
CREATE INDEX outbox_events_held ON outbox_events (workspace_id, destination, held_lane, created_at, id) WHERE status = 'held';

-- The task tables' trigger (053): the freed slot goes to the oldest held event of its lane.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_fair_share_release() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  dest text;
  ln text;
BEGIN
  DELETE FROM outbox_events WHERE workspace_id = OLD.workspace_id AND status = 'held' AND held_task = OLD.id;
  DELETE FROM outbox_fair_slots WHERE workspace_id = OLD.workspace_id AND task_id = OLD.id RETURNING destination, lane INTO dest, ln;
  IF dest IS NOT NULL THEN
    UPDATE outbox_events SET status = 'pending', held_task = NULL, held_lane = NULL, next_attempt_at = now()
    WHERE id = (SELECT o.id FROM outbox_events o
                WHERE o.workspace_id = OLD.workspace_id AND o.destination = dest AND o.held_lane = ln AND o.status = 'held'
                ORDER BY o.created_at, o.id LIMIT 1 FOR UPDATE SKIP LOCKED);
  END IF;
  RETURN NULL;
END
$$;
-- +goose StatementEnd

RESET ROLE;
GRANT SELECT (held_lane) ON outbox_events TO listing_discovery;

DROP FUNCTION outbox_held_backlogs(int);
-- outbox_held_lanes returns up to p_limit (workspace, queue, lane) triples with held events,
-- one index descent each (a loose scan of outbox_events_held), without counting them. With
-- nothing held it is one descent of an empty index.
-- +goose StatementBegin
CREATE FUNCTION outbox_held_lanes(p_limit int)
RETURNS TABLE (workspace_id uuid, destination text, lane text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH RECURSIVE h AS (
    (SELECT o.workspace_id, o.destination, o.held_lane FROM outbox_events o WHERE o.status = 'held'
     ORDER BY o.workspace_id, o.destination, o.held_lane LIMIT 1)
    UNION ALL
    SELECT n.workspace_id, n.destination, n.held_lane FROM h CROSS JOIN LATERAL (
      SELECT o.workspace_id, o.destination, o.held_lane FROM outbox_events o
      WHERE o.status = 'held' AND (o.workspace_id, o.destination, o.held_lane) > (h.workspace_id, h.destination, h.held_lane)
      ORDER BY o.workspace_id, o.destination, o.held_lane LIMIT 1) n
  )
  SELECT h.workspace_id, h.destination, h.held_lane FROM h LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd
ALTER FUNCTION outbox_held_lanes(int) OWNER TO listing_discovery;
REVOKE ALL ON FUNCTION outbox_held_lanes(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_held_lanes(int) TO app_user;

-- +goose Down
DROP FUNCTION outbox_held_lanes(int);
-- +goose StatementBegin
CREATE FUNCTION outbox_held_backlogs(p_limit int)
RETURNS TABLE (workspace_id uuid, destination text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH RECURSIVE h AS (
    (SELECT o.workspace_id, o.destination FROM outbox_events o WHERE o.status = 'held'
     ORDER BY o.workspace_id, o.destination LIMIT 1)
    UNION ALL
    SELECT n.workspace_id, n.destination FROM h CROSS JOIN LATERAL (
      SELECT o.workspace_id, o.destination FROM outbox_events o
      WHERE o.status = 'held' AND (o.workspace_id, o.destination) > (h.workspace_id, h.destination)
      ORDER BY o.workspace_id, o.destination LIMIT 1) n
  )
  SELECT h.workspace_id, h.destination FROM h LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd
ALTER FUNCTION outbox_held_backlogs(int) OWNER TO listing_discovery;
REVOKE ALL ON FUNCTION outbox_held_backlogs(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_held_backlogs(int) TO app_user;
REVOKE SELECT (held_lane) ON outbox_events FROM listing_discovery;

SET LOCAL ROLE listing_owner;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_fair_share_release() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  dest text;
BEGIN
  DELETE FROM outbox_events WHERE workspace_id = OLD.workspace_id AND status = 'held' AND held_task = OLD.id;
  DELETE FROM outbox_fair_slots WHERE workspace_id = OLD.workspace_id AND task_id = OLD.id RETURNING destination INTO dest;
  IF dest IS NOT NULL THEN
    UPDATE outbox_events SET status = 'pending', held_task = NULL, next_attempt_at = now()
    WHERE id = (SELECT o.id FROM outbox_events o
                WHERE o.workspace_id = OLD.workspace_id AND o.destination = dest AND o.status = 'held'
                ORDER BY o.created_at, o.id LIMIT 1 FOR UPDATE SKIP LOCKED);
  END IF;
  RETURN NULL;
END
$$;
-- +goose StatementEnd
DROP INDEX outbox_events_held;
CREATE INDEX outbox_events_held ON outbox_events (workspace_id, destination, created_at, id) WHERE status = 'held';
ALTER TABLE outbox_events DROP COLUMN held_lane;
-- One lane per queue again: of the slots sharing a number in a workspace's queue, the
-- lowest lane's is kept; the others' tasks lose theirs (their end releases nothing, and the
-- sweep gives the free slots to the held events).
ALTER TABLE outbox_fair_slots NO FORCE ROW LEVEL SECURITY;
DELETE FROM outbox_fair_slots s USING outbox_fair_slots t
WHERE s.workspace_id = t.workspace_id AND s.destination = t.destination AND s.slot = t.slot AND t.lane < s.lane;
ALTER TABLE outbox_fair_slots FORCE ROW LEVEL SECURITY;
ALTER TABLE outbox_fair_slots DROP CONSTRAINT outbox_fair_slots_pkey, DROP COLUMN lane,
  ADD PRIMARY KEY (workspace_id, destination, slot);
RESET ROLE;

-- Fair share across workspaces (infra/outbox/doc.go, "Fair share"; docs/architecture.md).
--
-- The dispatcher admits at most FAIR_SHARE_SLOTS request events per (workspace, flow queue)
-- into Redis at a time and holds the rest in the outbox:
--   outbox_fair_slots  one row per admitted task: the slot it holds (1..slots) in its
--                      workspace's flow queue. The claim takes a slot in the statement that
--                      leases the event (a unique slot number per workspace and queue, so two
--                      dispatchers claiming one workspace at once cannot both take it).
--                      A task holds at most one slot: its redeliveries and last looks go
--                      through at once.
--   status 'held'      a request event the claim found no free slot for. Held rows leave
--                      outbox_events_due (status = 'pending'): no claim, no discovery and no
--                      low-water mark walks them again, whatever their number. held_task is
--                      the task they ask for.
--   task tables        when a task ends (its status leaves pending and running) or its row
--                      is deleted, a trigger frees its slot and gives it to the oldest held
--                      event of its workspace and queue (back to pending, due now), and
--                      deletes the held events of the task itself (a cancelled task's
--                      backlog leaves with it). Added to every task table, present and
--                      future (a trigger on task_tables, as sql/040).
-- outbox_owes_task counts held events as owed: the reconciler leaves a held task alone.
-- outbox_held_backlogs and outbox_held_counts give the dispatcher the held backlogs (its
-- sweep, its gauge listing_fair_share_held{flow}) without reading any payload.

-- +goose Up
SET LOCAL ROLE listing_owner;

ALTER TABLE outbox_events ADD COLUMN held_task uuid,
  DROP CONSTRAINT outbox_events_status_check,
  ADD CONSTRAINT outbox_events_status_check CHECK (status IN ('pending', 'held', 'dead_letter'));
-- The sweep's and the release's walk: the oldest held events of a workspace's queue.
CREATE INDEX outbox_events_held ON outbox_events (workspace_id, destination, created_at, id) WHERE status = 'held';
-- A task's held events, dropped when it ends.
CREATE INDEX outbox_events_held_task ON outbox_events (workspace_id, held_task) WHERE status = 'held';

CREATE TABLE outbox_fair_slots (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  destination  text NOT NULL,
  slot         int NOT NULL CHECK (slot >= 1),
  task_id      uuid NOT NULL,
  event_id     uuid NOT NULL,
  taken_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, destination, slot),
  UNIQUE (workspace_id, task_id)
);
ALTER TABLE outbox_fair_slots ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY outbox_fair_slots_tenant ON outbox_fair_slots
  USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id());
CREATE POLICY outbox_fair_slots_dispatch ON outbox_fair_slots TO app_user
  USING (workspace_id = ANY ((SELECT app_workspace_ids())::uuid[]))
  WITH CHECK (workspace_id = ANY ((SELECT app_workspace_ids())::uuid[]));
REVOKE ALL ON outbox_fair_slots FROM PUBLIC, app_user;
GRANT SELECT, INSERT, DELETE ON outbox_fair_slots TO app_user;
GRANT SELECT ON outbox_fair_slots TO listing_operator;
GRANT SELECT (destination, held_task) ON outbox_events TO listing_discovery;

-- outbox_fair_share_release is the task tables' trigger (AFTER UPDATE OF status, AFTER
-- DELETE): it runs with the caller's rights, in the task's transaction, under its workspace.
-- +goose StatementBegin
CREATE FUNCTION outbox_fair_share_release() RETURNS trigger
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
REVOKE ALL ON FUNCTION outbox_fair_share_release() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_fair_share_release() TO app_user;

-- prepare_task_fair_share gives task table p_table the trigger above (idempotent).
-- +goose StatementBegin
CREATE FUNCTION prepare_task_fair_share(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  rel regclass := format('public.%I', p_table)::regclass;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = rel AND tgname = p_table || '_fair_share_end') THEN
    EXECUTE format($f$CREATE TRIGGER %I AFTER UPDATE OF status ON %s FOR EACH ROW
      WHEN (OLD.status IN ('pending', 'running') AND NEW.status NOT IN ('pending', 'running'))
      EXECUTE FUNCTION outbox_fair_share_release()$f$, p_table || '_fair_share_end', rel);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = rel AND tgname = p_table || '_fair_share_gone') THEN
    EXECUTE format($f$CREATE TRIGGER %I AFTER DELETE ON %s FOR EACH ROW
      WHEN (OLD.status IN ('pending', 'running'))
      EXECUTE FUNCTION outbox_fair_share_release()$f$, p_table || '_fair_share_gone', rel);
  END IF;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION prepare_task_fair_share(text) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION task_tables_fair_share() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM prepare_task_fair_share(NEW.table_name);
  RETURN NEW;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_tables_fair_share() FROM PUBLIC;
CREATE TRIGGER task_tables_fair_share AFTER INSERT ON task_tables
  FOR EACH ROW EXECUTE FUNCTION task_tables_fair_share();

SELECT prepare_task_fair_share(table_name) FROM task_tables;

RESET ROLE;

-- outbox_held_backlogs returns up to p_limit (workspace, queue) pairs with held events, one
-- index descent each (a loose scan of outbox_events_held), without counting them.
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

-- outbox_held_counts returns the held events per queue (the gauge).
-- +goose StatementBegin
CREATE FUNCTION outbox_held_counts()
RETURNS TABLE (destination text, events bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT o.destination, count(*) FROM outbox_events o WHERE o.status = 'held' GROUP BY o.destination
$$;
-- +goose StatementEnd
ALTER FUNCTION outbox_held_backlogs(int) OWNER TO listing_discovery;
ALTER FUNCTION outbox_held_counts() OWNER TO listing_discovery;
REVOKE ALL ON FUNCTION outbox_held_backlogs(int), outbox_held_counts() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_held_backlogs(int), outbox_held_counts() TO app_user;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_owes_task(p_aggregate_type text, p_aggregate_id text, p_payload_key text, p_task_id text)
RETURNS boolean
LANGUAGE sql STABLE SECURITY INVOKER SET search_path = pg_catalog, public AS $$
  SELECT EXISTS (
    SELECT 1 FROM outbox_events o
    WHERE o.aggregate_type = p_aggregate_type AND o.aggregate_id = p_aggregate_id
      AND o.event_payload->>p_payload_key = p_task_id
      AND o.status IN ('pending', 'held'))
$$;
-- +goose StatementEnd

-- +goose Down
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
DROP FUNCTION outbox_held_backlogs(int);
DROP FUNCTION outbox_held_counts();
SET LOCAL ROLE listing_owner;
DROP TRIGGER task_tables_fair_share ON task_tables;
DROP FUNCTION task_tables_fair_share();
-- +goose StatementBegin
DO $$
DECLARE
  t text;
BEGIN
  FOR t IN SELECT table_name FROM task_tables LOOP
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON public.%I', t || '_fair_share_end', t);
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON public.%I', t || '_fair_share_gone', t);
  END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION prepare_task_fair_share(text);
DROP FUNCTION outbox_fair_share_release();
DROP TABLE outbox_fair_slots;
-- Held events go back to the claim.
ALTER TABLE outbox_events NO FORCE ROW LEVEL SECURITY;
UPDATE outbox_events SET status = 'pending', next_attempt_at = now() WHERE status = 'held';
ALTER TABLE outbox_events FORCE ROW LEVEL SECURITY;
DROP INDEX outbox_events_held, outbox_events_held_task;
REVOKE SELECT (destination, held_task) ON outbox_events FROM listing_discovery;
ALTER TABLE outbox_events DROP COLUMN held_task,
  DROP CONSTRAINT outbox_events_status_check,
  ADD CONSTRAINT outbox_events_status_check CHECK (status IN ('pending', 'dead_letter'));
RESET ROLE;

-- A freed slot is refilled by the dispatcher, not by the task's end (infra/outbox doc.go,
-- "Fair share").
--
-- outbox_fair_share_release (the task tables' trigger: 053, 062, 066) gave the freed slot to
-- the lane's oldest held event in the transaction ending the task: a walk of the lane's
-- held index from its front, past the entry of every event released before whose dead row
-- version no index scan had yet marked dead. Under load (concurrent transactions keep
-- those versions visible for a while) each task's end walked hundreds to thousands of such
-- entries (a 5,000-event backlog: about 1,400 buffers, 10 ms, per task), more the further
-- the backlog had drained. Now the trigger frees the slot only; the worker wakes the
-- dispatcher for the workspace (EventPublisher.TaskEnded), whose next round gives the free
-- slots of the workspace's held lanes to their oldest held events in one statement
-- (unholdSQL) before it claims: one walk per round, not one per task.

-- +goose Up
SET LOCAL ROLE listing_owner;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_fair_share_release() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  DELETE FROM outbox_fair_slots WHERE workspace_id = OLD.workspace_id AND task_id = OLD.id;
  IF NOT FOUND THEN
    DELETE FROM outbox_events WHERE workspace_id = OLD.workspace_id AND status = 'held' AND held_task = OLD.id;
  END IF;
  RETURN NULL;
END
$$;
-- +goose StatementEnd
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_fair_share_release() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  dest text;
  ln text;
BEGIN
  DELETE FROM outbox_fair_slots WHERE workspace_id = OLD.workspace_id AND task_id = OLD.id RETURNING destination, lane INTO dest, ln;
  IF dest IS NULL THEN
    DELETE FROM outbox_events WHERE workspace_id = OLD.workspace_id AND status = 'held' AND held_task = OLD.id;
  ELSE
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

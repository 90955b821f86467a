-- The end of a task (outbox_fair_share_release, the task tables' trigger: 053, 062) looks
-- for the task's own held requests only when the task held no slot.
--
-- A task that holds a slot had its request admitted, and the claim never holds a request of
-- a task that holds a slot. (Only a second request of a task admitted while its first was
-- held leaves a held one behind; the reconciler does not deliver a task again while its
-- request is held (outbox_owes_task). Such a request is admitted later, its job finds the
-- task finished, and the sweep frees its slot as stale.) The lookup of the
-- task's held requests (outbox_events_held_task) ran at every task's end, and its plan,
-- made while no event was held (the statistics of a quiet table), walked the workspace's
-- whole held backlog along outbox_events_held instead: every held event's entry, at every
-- task's end (a 3,000-event backlog: 3,000 buffers, about 1 ms, per task).
--
-- A task without a slot (it ended while its request was held: cancelled) still drops its
-- held requests, in the transaction that ends it. Fair share off: one probe of the empty
-- slots table and one of the empty held index per task's end.

-- +goose Up
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

-- +goose Down
SET LOCAL ROLE listing_owner;
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

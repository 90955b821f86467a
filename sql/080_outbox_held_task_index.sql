-- The refill's walk of a lane's held events (infra/outbox unholdSQL) along outbox_events_held.
--
-- outbox_events_held_task (053) led with workspace_id, as outbox_events_held does: under the
-- dispatcher's generic plans, from the statistics of a table whose held events were few
-- when last analysed, the refill's walk ("the oldest held events of a lane after its mark,
-- LIMIT the free slots") was planned as a scan of outbox_events_held_task on workspace_id
-- alone (every held event of the workspace, 6,000 of them 6,400 buffers) and a sort, at
-- every refill: 15-25 ms each, most of the dispatcher's time with a 50,000-event backlog.
-- Keyed on held_task alone it serves only what it is for (a task's held events, dropped
-- when the task ends: outbox_fair_share_release), and the walk has outbox_events_held.

-- +goose Up
SET LOCAL ROLE listing_owner;
DROP INDEX outbox_events_held_task;
CREATE INDEX outbox_events_held_task ON outbox_events (held_task) WHERE status = 'held';
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP INDEX outbox_events_held_task;
CREATE INDEX outbox_events_held_task ON outbox_events (workspace_id, held_task) WHERE status = 'held';
RESET ROLE;

-- outbox_events_held_task serves only the release of a task's held events (held_task = the
-- task, which implies held_task IS NOT NULL). As a partial index on status = 'held' alone,
-- it also matched the refill's walk of a lane and the sweep's listing of the lanes with held
-- events, and under the dispatcher's generic plans, from statistics taken while few events
-- were held, the planner chose it for both: every held event read and filtered, then
-- sorted. With a 100,000-event backlog (make bench's end-to-end section, fair share at its
-- default) the refill read 5,095 buffers a call (907 us of PostgreSQL a job) and the sweep
-- 214,827 (6.4 s a call). Its predicate now names held_task too, which neither of those
-- statements implies, so they walk outbox_events_held, whose order is theirs.

-- +goose Up
SET LOCAL ROLE listing_owner;
DROP INDEX outbox_events_held_task;
CREATE INDEX outbox_events_held_task ON outbox_events (held_task) WHERE status = 'held' AND held_task IS NOT NULL;
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP INDEX outbox_events_held_task;
CREATE INDEX outbox_events_held_task ON outbox_events (held_task) WHERE status = 'held';
RESET ROLE;

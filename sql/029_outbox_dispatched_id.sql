-- An event of the dispatched log found by its id.
--
-- The operators' `outbox show` (and the console's event page) reads one event by workspace
-- and id from outbox_all_events. On the log, outbox_dispatched (sql/018), the only index led
-- with (workspace_id, aggregate_type, ...): a dispatched event was found by reading every
-- event of its workspace still in the log, in every partition. An index on id makes it one
-- probe per partition. It costs every dispatched event one more index entry: the ids are
-- UUIDv7 (time-ordered), so the entries go to the index's rightmost leaf, one small record
-- of WAL each (`make soak` prints the WAL per event by relation, this index included).
--
-- On the partitioned table the index is built on every partition under a SHARE lock, which
-- holds back the dispatchers' marks (inserts into the log) for the build's duration: on the
-- log of a large installation (days of history, tens of millions of rows), migrate in a
-- quiet hour, or create the partitions' indexes first with CREATE INDEX CONCURRENTLY
-- (docs/operations.md, "Upgrading an outbox with a long history").

-- +goose Up
SET LOCAL ROLE listing_owner;
CREATE INDEX outbox_dispatched_id ON outbox_dispatched (id);
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP INDEX outbox_dispatched_id;
RESET ROLE;

-- The log's aggregate index leads with the aggregate's id.
--
-- outbox_dispatched_aggregate (sql/018) serves the reconciler's "last dispatched job of a
-- task" (outbox_last_dispatched_job: aggregate type and id, newest created_at first). Led by
-- workspace_id, its inserts spread over every leaf of the day's partition, and after each
-- checkpoint the first insert into a leaf writes the whole page to the WAL: measured on a
-- day-partition of 1 M events, 2.3 KB of full-page images per event right after a
-- checkpoint, 5.2 KB at 4 M (docs/operations.md). The aggregates of the events the log takes
-- are mostly new (a task, its operation, a store or media item just created), and their ids
-- are UUIDv7, in time order: led by the aggregate's id, the inserts go to the index's
-- newest leaves, as the id index's do. The lookup's equality on aggregate type and id and
-- its order on created_at use the index as before; RLS still filters by workspace.
--
-- Like sql/029, the index is built on every partition under a SHARE lock that holds back
-- the dispatchers' marks while it builds: on a log of tens of millions of rows, migrate in a
-- quiet hour, or build each partition's index first with CREATE INDEX CONCURRENTLY
-- (docs/operations.md, "Upgrading an outbox with a long history").

-- +goose Up
SET LOCAL ROLE listing_owner;
CREATE INDEX outbox_dispatched_aggregate_id ON outbox_dispatched (aggregate_id, aggregate_type, created_at);
DROP INDEX outbox_dispatched_aggregate;
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
CREATE INDEX outbox_dispatched_aggregate ON outbox_dispatched (workspace_id, aggregate_type, aggregate_id, created_at);
DROP INDEX outbox_dispatched_aggregate_id;
RESET ROLE;

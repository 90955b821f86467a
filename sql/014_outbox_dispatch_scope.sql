-- The dispatcher's multi-workspace scope (issue 13).
--
-- The dispatcher claims, marks and releases outbox rows as app_user, so RLS applies to it. Until
-- now it did so one workspace per transaction (app.workspace_id), and a round of 32 workspaces
-- cost 32 transactions of four statements each: at 1,000 events/s spread over 100 workspaces
-- nearly every event paid a claim and a mark transaction of its own, ~0.8 ms of server time
-- each (pgbench on this machine: 13 workspaces claimed one transaction each 10.8 ms, in one
-- statement 1.2 ms). The claim became the bound of both latency and drain.
--
-- app.workspace_ids scopes a transaction to a list of workspaces, for outbox_events only and
-- for app_user only: the dispatcher sets it to the workspaces of its round (never to "all":
-- an unset or empty list matches nothing), and claims them in one statement. Every other
-- table, and every other transaction, keeps the single workspace of app.workspace_id. The
-- list is read once per statement (the sub-select is an InitPlan), not once per row.

-- +goose Up
SET LOCAL ROLE listing_owner;
-- +goose StatementBegin
CREATE FUNCTION app_workspace_ids() RETURNS uuid[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT nullif(current_setting('app.workspace_ids', true), '')::uuid[]
$$;
-- +goose StatementEnd
GRANT EXECUTE ON FUNCTION app_workspace_ids() TO app_user;
CREATE POLICY outbox_events_dispatch ON outbox_events TO app_user
  USING (workspace_id = ANY ((SELECT app_workspace_ids())::uuid[]))
  WITH CHECK (workspace_id = ANY ((SELECT app_workspace_ids())::uuid[]));
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP POLICY IF EXISTS outbox_events_dispatch ON outbox_events;
DROP FUNCTION IF EXISTS app_workspace_ids();
RESET ROLE;

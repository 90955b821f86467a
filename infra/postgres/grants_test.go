package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// definer is what the catalog says of one SECURITY DEFINER function: the role it runs as and
// the roles that may execute it (comma-separated, sorted; the owner left out).
type definer struct {
	Owner    string
	Grantees string
}

// securityDefiners is every SECURITY DEFINER function of the database. A function added, or a
// grant widened, must change this table.
var securityDefiners = map[string]definer{
	// Workspace discovery of the dispatcher, the cleanup and the reconciler: ids only.
	"outbox_due_workspaces(timestamp with time zone,integer)":                          {"listing_discovery", "app_user"},
	"outbox_due_workspaces(timestamp with time zone,integer,timestamp with time zone)": {"listing_discovery", "app_user"},
	"idempotency_expired_workspaces(timestamp with time zone,integer)":                 {"listing_discovery", "app_user"},
	// stuck_task_workspaces reads the tables named in task_tables (sql/026), which only
	// listing_owner writes; listing_discovery may read that registry's names and nothing else of
	// it. prepare_task_table, which fills the registry, is no definer: it runs with its caller's
	// rights (the tables' owner, in migrations) and nobody else may execute it.
	"stuck_task_workspaces(timestamp with time zone,integer)": {"listing_discovery", "app_user"},
	// The count of one aggregate's unfinished tasks across the task tables (sql/060): a
	// number, under the tables' RLS.
	"task_unfinished(text,uuid)": {"listing_owner", "app_user"},
	// Retention of the log of dispatched events: creates and drops its day partitions.
	"outbox_dispatched_maintain(interval,integer)": {"listing_owner", "app_user"},
	// The dispatcher's gauges: three numbers across workspaces.
	"outbox_gauges()": {"listing_discovery", "app_user"},
	// Fair share's sweep and gauge: the (workspace, queue, lane) triples with held events, and the
	// held count per queue (no payload).
	"outbox_held_lanes(integer)": {"listing_discovery", "app_user"},
	"outbox_held_counts()":       {"listing_discovery", "app_user"},
	// Operators only: aggregates across workspaces.
	"outbox_stats(timestamp with time zone)": {"listing_discovery", "listing_operator"},
	// Operators only: the console's reads across workspaces (no payloads, no results).
	"operator_outbox_totals(integer)":          {"listing_inspector", "listing_operator"},
	"operator_dead_letters(integer)":           {"listing_inspector", "listing_operator"},
	"operator_outbox_actions(integer)":         {"listing_inspector", "listing_operator"},
	"operator_operation(uuid)":                 {"listing_inspector", "listing_operator"},
	"operator_failed_operations(uuid,integer)": {"listing_inspector", "listing_operator"},
	// Failures and backlogs of every task table (sql/039): lifecycle columns only.
	"operator_failures(text,text,timestamp with time zone,timestamp with time zone,uuid,integer)": {"listing_inspector", "listing_operator"},
	"operator_workspaces(timestamp with time zone,integer)":                                       {"listing_inspector", "listing_operator"},
	"operator_outbox_delivered(timestamp with time zone)":                                         {"listing_inspector", "listing_operator"},
	"operator_recent_operations(uuid,integer)":                                                    {"listing_inspector", "listing_operator"},
	"operator_store_backlogs(uuid)":                                                               {"listing_inspector", "listing_operator"},
	"operator_workspace_flows(uuid,timestamp with time zone)":                                     {"listing_inspector", "listing_operator"},
	// The overview's largest backlogs (sql/057): counts per workspace and flow, no payload.
	"operator_backlogs(integer)":     {"listing_inspector", "listing_operator"},
	"operator_held_backlogs(uuid[])": {"listing_inspector", "listing_operator"},
	// The console's overview (sql/050, 054, 064): counts and percentiles, no ids.
	"operator_overview_tasks(timestamp with time zone)":                                                                   {"listing_inspector", "listing_operator"},
	"operator_overview_minute(timestamp with time zone,timestamp with time zone,timestamp with time zone,text[],integer)": {"listing_inspector", "listing_operator"},
	// The overview's sampler keeps the log's BRIN index summarized (sql/054): no rows returned.
	"overview_summarize_log()": {"listing_owner", "listing_operator"},
	// Retention of the login limits: deletes, across accounts, what no longer counts.
	"login_limits_sweep(interval,interval,integer)": {"listing_owner", "app_user"},
	// Auth flows that act before the user is known.
	"auth_user_by_email(text)":                               {"listing_auth", "app_user"},
	"auth_use_refresh_token(bytea,timestamp with time zone)": {"listing_auth", "app_user"},
}

func TestSecurityDefinerFunctionsAndGrantees(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	// A NULL proacl means the default privileges: EXECUTE for PUBLIC.
	rows, err := db.Owner.Query(ctx, `
		SELECT p.oid::regprocedure::text, o.rolname,
		       coalesce((SELECT string_agg(CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, ',' ORDER BY 1)
		                 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		                 WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner), '')
		FROM pg_proc p JOIN pg_roles o ON o.oid = p.proowner JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE p.prosecdef AND n.nspname NOT IN ('pg_catalog', 'information_schema')`)
	require.NoError(t, err)
	got := map[string]definer{}
	for rows.Next() {
		var fn string
		var d definer
		require.NoError(t, rows.Scan(&fn, &d.Owner, &d.Grantees))
		got[fn] = d
	}
	require.NoError(t, rows.Err())
	require.Equal(t, securityDefiners, got)

	// Every owner is a role made for its functions: it cannot log in, is no superuser and
	// does not bypass RLS.
	for _, d := range got {
		var login, super, bypass bool
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT rolcanlogin, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1`,
			d.Owner).Scan(&login, &super, &bypass))
		require.False(t, login || super || bypass, "%s: login %v, superuser %v, bypassrls %v", d.Owner, login, super, bypass)
	}
}

// The operator role logs in, without superuser or BYPASSRLS; app_user cannot become it.
func TestOperatorRole(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var login, super, bypass bool
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT rolcanlogin, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = 'listing_operator'`).
		Scan(&login, &super, &bypass))
	require.True(t, login)
	require.False(t, super)
	require.False(t, bypass)

	op := db.OperatorPool(t)
	var n int
	require.NoError(t, op.QueryRow(ctx, `SELECT count(*) FROM outbox_stats(now())`).Scan(&n))
	_, err := db.App.Exec(ctx, `SELECT * FROM outbox_stats(now())`)
	require.ErrorContains(t, err, "permission denied")
	for _, call := range []string{`operator_outbox_totals(10)`, `operator_dead_letters(10)`, `operator_outbox_actions(10)`,
		`operator_operation(gen_random_uuid())`, `operator_failed_operations(gen_random_uuid(), 10)`} {
		_, err = op.Exec(ctx, `SELECT * FROM `+call)
		require.NoError(t, err, call)
		_, err = db.App.Exec(ctx, `SELECT * FROM `+call)
		require.ErrorContains(t, err, "permission denied", "app_user: %s", call)
	}
	// The record of operators' actions: listing_operator reads and adds, app_user nothing.
	_, err = op.Exec(ctx, `INSERT INTO operator_actions (id, operator, action, target, reason) VALUES (gen_random_uuid(), 'ada', 'retry', 'q/1', 'why')`)
	require.NoError(t, err)
	_, err = op.Exec(ctx, `DELETE FROM operator_actions`)
	require.ErrorContains(t, err, "permission denied")
	_, err = db.App.Exec(ctx, `SELECT count(*) FROM operator_actions`)
	require.ErrorContains(t, err, "permission denied")
	// The console's sessions and failed sign-ins: listing_operator reads, adds, revokes
	// (revoked_at only) and deletes; app_user nothing.
	_, err = op.Exec(ctx, `INSERT INTO console_sessions (id_hash, operator, secret_check, created_at, expires_at)
		VALUES ('\x01', 'ada', '\x02', now(), now() + interval '1 hour')`)
	require.NoError(t, err)
	_, err = op.Exec(ctx, `UPDATE console_sessions SET revoked_at = now()`)
	require.NoError(t, err)
	_, err = op.Exec(ctx, `UPDATE console_sessions SET expires_at = now() + interval '1 year'`)
	require.ErrorContains(t, err, "permission denied")
	_, err = op.Exec(ctx, `UPDATE console_sessions SET operator = 'bob'`)
	require.ErrorContains(t, err, "permission denied")
	_, err = op.Exec(ctx, `INSERT INTO console_signin_failures (client, failed_at) VALUES ('192.0.2.1', now())`)
	require.NoError(t, err)
	_, err = op.Exec(ctx, `DELETE FROM console_signin_failures`)
	require.NoError(t, err)
	_, err = op.Exec(ctx, `DELETE FROM console_sessions`)
	require.NoError(t, err)
	for _, table := range []string{"console_sessions", "console_signin_failures"} {
		_, err = db.App.Exec(ctx, `SELECT count(*) FROM `+table)
		require.ErrorContains(t, err, "permission denied", table)
	}
	_, err = db.App.Exec(ctx, `SELECT nextval('console_signin_failures_id_seq')`)
	require.ErrorContains(t, err, "permission denied")
	_, err = db.App.Exec(ctx, "SET ROLE listing_operator")
	require.Error(t, err)

	// Without a workspace, the operator sees no outbox row either.
	seedWorkspace(t, db)
	require.NoError(t, op.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&n))
	require.Zero(t, n)
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// scopeSQL scopes the rest of its transaction to workspaces and no user, and lets it commit
// without waiting for the WAL flush. $1 is app.workspace_id (one workspace, as postgres.InTx
// sets it), $2 app.workspace_ids (a list, which sql/014 lets app_user use on outbox_events
// only): exactly one of them is set. Local settings (set_config's third argument) end with
// the transaction.
//
// synchronous_commit = off is safe for the dispatcher's own transactions only, and only
// because delivery is at least once: a server crash can lose the last such commits (never
// out of order, never half of one), which undoes a claim (the rows are due again: published
// again under the same id), a mark (published again after the lease) or a release (the lease
// expires). No event is lost, none published while another claim holds it. The business
// transactions that write outbox rows keep the server's durable commit.
//
// plan_cache_mode = force_generic_plan: the dispatcher's statements are prepared once per
// connection and their plans do not depend on the values (index scans by workspace and by
// id); planning the claim anew each time (PostgreSQL's default for the first executions, and
// whenever it judges a custom plan cheaper) costs about as much as running it.
//
// enable_seqscan and enable_bitmapscan off: every statement here reads its rows along an
// index, by primary key or along outbox_events_due from a workspace's mark, and must keep
// doing so whatever the statistics say. outbox_events' statistics describe a table that
// holds what is owed (a few rows), its heap and indexes stay grown after a held snapshot,
// and a generic plan made from them chose to read the whole heap (a sequential scan) or
// the whole due index (a bitmap scan) to find a round's rows by id: under a held snapshot
// every mark then read every row version and entry left since, and PostgreSQL's time per
// event grew with the hold.
const scopeSQL = `SELECT set_config('app.workspace_id', $1, true), set_config('app.workspace_ids', $2, true),
	set_config('app.user_id', '', true), set_config('synchronous_commit', 'off', true),
	set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
	set_config('enable_bitmapscan', 'off', true)`

// scopeOf returns the app.workspace_id and app.workspace_ids values of wss: one workspace
// goes in the first, several in the second (an array literal); none, or only uuid.Nil,
// scopes to no workspace (no rows, as postgres.InTx).
func scopeOf(wss []uuid.UUID) (one, list string) {
	wss = slices.DeleteFunc(slices.Clone(wss), func(id uuid.UUID) bool { return id == uuid.Nil })
	switch len(wss) {
	case 0:
		return "", ""
	case 1:
		return wss[0].String(), ""
	}
	var b strings.Builder
	b.Grow(len(wss)*37 + 1)
	b.WriteByte('{')
	for i, id := range wss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(id.String())
	}
	b.WriteByte('}')
	return "", b.String()
}

// scopedStmt is one statement to run in a transaction of its own, scoped to workspaces.
type scopedStmt struct {
	wss  []uuid.UUID
	sql  string
	args []any
	// read, when not nil, consumes the statement's rows (it need not close them).
	read func(pgx.Rows) error
}

// inWorkspaces runs each statement in an RLS transaction of its own, scoped to its
// workspaces, all in one round trip. errs[i] is nil when stmts[i] committed and its rows were
// read; rows its read saw are to be acted on only then. A failing read of our own does not
// undo what the server ran: that group commits (for a claim, its rows wait for their lease to
// expire) and the later groups run.
//
// It sends one batch of [BEGIN, scopeSQL(wss), stmt, COMMIT] per statement. An explicit
// BEGIN/COMMIT inside the pipeline makes each group its own transaction: the earlier ones stay
// committed whatever happens later. When a statement fails, PostgreSQL skips everything up to
// the batch's Sync, so that statement and every later one fail (their errs say so) and the
// failed transaction is still open on the connection: inWorkspaces then rolls it back, on the
// same connection, before the connection is released (a pool would close a connection left
// in a transaction).
func inWorkspaces(ctx context.Context, pool *pgxpool.Pool, stmts []scopedStmt) []error {
	errs := make([]error, len(stmts))
	if len(stmts) == 0 {
		return errs
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer conn.Release()
	b := &pgx.Batch{}
	for _, st := range stmts {
		b.Queue("BEGIN")
		one, list := scopeOf(st.wss)
		b.Queue(scopeSQL, one, list)
		b.Queue(st.sql, st.args...)
		b.Queue("COMMIT")
	}
	br := conn.SendBatch(ctx, b)
	var failed error // a server-side failure: PostgreSQL skips the rest of the batch
	for i, st := range stmts {
		if failed != nil {
			errs[i] = fmt.Errorf("not run: an earlier transaction of its round trip failed: %w", failed)
			continue
		}
		committed, err := readScoped(br, st.read)
		errs[i] = err
		if !committed {
			failed = err
		}
	}
	_ = br.Close() // every group's outcome is already in errs
	if conn.Conn().PgConn().TxStatus() != 'I' {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	return errs
}

// readScoped reads the results of one [BEGIN, scope, stmt, COMMIT] group. committed reports
// whether the server acknowledged its COMMIT; err is the group's first failure. A failure of
// read alone (ours, not the server's) leaves the group committed and the batch running.
func readScoped(br pgx.BatchResults, read func(pgx.Rows) error) (committed bool, err error) {
	if _, err := br.Exec(); err != nil { // BEGIN
		return false, err
	}
	if _, err := br.Exec(); err != nil { // scope
		return false, err
	}
	rows, err := br.Query()
	if err != nil {
		return false, err
	}
	var readErr error
	if read != nil {
		readErr = read(rows)
	}
	rows.Close()
	if readErr == nil {
		readErr = rows.Err() // a server error while streaming the rows, or a Scan error
	}
	tag, err := br.Exec() // COMMIT
	switch {
	case err != nil:
		return false, errors.Join(readErr, err)
	case tag.String() != "COMMIT":
		return false, errors.Join(readErr, fmt.Errorf("transaction not committed (%s)", tag))
	}
	return true, readErr
}

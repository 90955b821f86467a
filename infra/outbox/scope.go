package outbox

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// scopeSQL scopes the rest of its transaction to one workspace and no user, as
// postgres.SetScope does, and lets it commit without waiting for the WAL flush. Local
// settings (set_config's third argument) end with the transaction.
//
// synchronous_commit = off is safe for the dispatcher's own transactions only, and only
// because delivery is at least once: a server crash can lose the last such commits (never
// out of order, never half of one), which undoes a claim (the rows are due again: published
// again under the same id), a mark (published again after the lease) or a release (the lease
// expires). No event is lost, none published while another claim holds it. The business
// transactions that write outbox rows keep the server's durable commit.
const scopeSQL = `SELECT set_config('app.workspace_id', $1, true), set_config('app.user_id', '', true),
	set_config('synchronous_commit', 'off', true)`

// batchSender sends a pgx.Batch: the pool (the Dispatcher) or one connection (tests).
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// inWorkspace runs one statement in an RLS transaction scoped to ws, in one round trip.
//
// It sends the batch [scopeSQL(ws), stmt] without BEGIN. pgx pipelines a batch (extended
// protocol, one Sync at the end; or one multi-statement simple query), and PostgreSQL runs
// everything before the Sync as one implicit transaction: stmt sees the setting, the
// transaction commits at the Sync, and when either statement fails nothing of it is kept.
// The setting, being local, ends with that transaction, so the connection goes back to the
// pool unscoped. The transaction runs at the session's default isolation (READ COMMITTED,
// PostgreSQL's default, as postgres.InTx asks for).
//
// read, when not nil, consumes stmt's rows (it need not close them). The commit outcome is
// known only when inWorkspace returns: rows read before are not to be acted on unless it
// returns nil (claim: publish only then).
func inWorkspace(ctx context.Context, s batchSender, ws uuid.UUID, read func(pgx.Rows) error, stmt string, args ...any) error {
	scope := "" // uuid.Nil: no workspace, no rows (as postgres.SetScope)
	if ws != uuid.Nil {
		scope = ws.String()
	}
	b := &pgx.Batch{}
	b.Queue(scopeSQL, scope)
	b.Queue(stmt, args...)
	br := s.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			if read != nil {
				err = read(rows)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	}
	// Close reads up to the Sync's ReadyForQuery: an error there (the commit) is returned.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/app/bus"
)

// Scope is the RLS context of a transaction. A zero WorkspaceID sets no workspace: workspace
// tables then read as empty and refuse writes.
type Scope struct {
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
}

type txKey struct{}

// scopedTx is what the context carries: the transaction and the scope it was opened with.
type scopedTx struct {
	tx    pgx.Tx
	scope Scope
	// afterCommit holds the hooks registered with AfterCommit, run in order once the commit
	// has returned successfully; keys dedupes them.
	afterCommit []func()
	keys        map[any]struct{}
	// beforeCommit holds the statements queued with BeforeCommit.
	beforeCommit []queued
	// opened holds what each Opening's Read returned, by Opening.Key.
	opened map[any]any
	// locked holds rows read under a row lock on behalf of the repository of their table
	// (port.LockingOperation), until that repository's next locking read of the row takes it.
	locked map[lockedKey]any
	// preloaded holds the rows a group transaction read ahead for its steps
	// (port.LockPreloader), under row locks, for any step's next locking read of the row;
	// a write of the row drops it.
	preloaded map[lockedKey]any
}

// lockedKey names a row of scopedTx.locked.
type lockedKey struct {
	ws    uuid.UUID // the scope it was read under (a group transaction changes it)
	table string
	id    uuid.UUID
}

// keepLocked keeps v, the row id of table just read under a row lock in the transaction of
// ctx, for the next locking read of the row (takeLocked).
func keepLocked(ctx context.Context, table string, id uuid.UUID, v any) {
	st, ok := ctx.Value(txKey{}).(*scopedTx)
	if !ok {
		return
	}
	if st.locked == nil {
		st.locked = map[lockedKey]any{}
	}
	st.locked[lockedKey{st.scope.WorkspaceID, table, id}] = v
}

// takeLocked returns (and forgets) the row id of table kept by keepLocked, or read ahead by
// the group transaction (scopedTx.preloaded), if any.
func takeLocked[T any](ctx context.Context, table string, id uuid.UUID) (T, bool) {
	st, ok := ctx.Value(txKey{}).(*scopedTx)
	if !ok || (st.locked == nil && st.preloaded == nil) {
		var zero T
		return zero, false
	}
	k := lockedKey{st.scope.WorkspaceID, table, id}
	if v, ok := st.locked[k].(T); ok {
		delete(st.locked, k)
		delete(st.preloaded, k) // read before the kept row: older
		return v, true
	}
	v, ok := st.preloaded[k].(T)
	delete(st.preloaded, k)
	return v, ok
}

// dropLocked forgets the row id of table kept by keepLocked or read ahead: it is being
// written.
func dropLocked(ctx context.Context, table string, id uuid.UUID) {
	if st, ok := ctx.Value(txKey{}).(*scopedTx); ok {
		k := lockedKey{st.scope.WorkspaceID, table, id}
		delete(st.locked, k)
		delete(st.preloaded, k)
	}
}

// scopedKey is an AfterCommit key within the workspace it was registered under.
type scopedKey struct {
	ws  uuid.UUID
	key any
}

// queued is a statement queued to run with the COMMIT.
type queued struct {
	sql   string
	args  []any
	onErr func(error) error
	// table is the table a BeforeCommitWrite statement writes ("" for any other statement).
	table string
	// rows is the RowsWrite of a BeforeCommitRows statement, else nil.
	rows *RowsWrite
}

// ErrNoTx is returned by TxFromContext when the context carries no transaction: repositories
// refuse to run outside the RLS transaction rather than fall back to the pool.
var ErrNoTx = errors.New("postgres: no transaction in context")

// TxFromContext returns the RLS transaction opened by InTx or the bus middleware, and its scope.
func TxFromContext(ctx context.Context) (pgx.Tx, Scope, error) {
	st, ok := ctx.Value(txKey{}).(*scopedTx)
	if !ok {
		return nil, Scope{}, ErrNoTx
	}
	return st.tx, st.scope, nil
}

// AfterCommit registers fn to run once the transaction of ctx has committed: InTx calls it,
// after the commit returned successfully, on the goroutine that called InTx, before InTx
// returns. It never runs when the transaction rolls back or its commit fails. key dedupes:
// a second registration with an equal, non-nil key in the same transaction is ignored (e.g.
// one wake-up per workspace however many events a transaction writes). fn must be quick and
// must not block (hand slow work to a goroutine of your own) and it cannot fail: it is for
// signals whose loss is tolerated, never for work that must happen. Keys dedupe within one
// workspace (a group transaction, InGroupTx, holds the steps of several). It returns ErrNoTx when
// ctx carries no transaction.
func AfterCommit(ctx context.Context, key any, fn func()) error {
	st, ok := ctx.Value(txKey{}).(*scopedTx)
	if !ok {
		return ErrNoTx
	}
	if key != nil {
		// Per workspace: a group transaction (InGroupTx) runs the steps of several.
		k := scopedKey{st.scope.WorkspaceID, key}
		if _, dup := st.keys[k]; dup {
			return nil
		}
		if st.keys == nil {
			st.keys = map[any]struct{}{}
		}
		st.keys[k] = struct{}{}
	}
	st.afterCommit = append(st.afterCommit, fn)
	return nil
}

// BeforeCommit queues a statement to run at the end of the transaction of ctx, after fn has
// returned nil, sent to the server in the same round trip as the COMMIT (saving one round
// trip per statement); in a group transaction (InGroupTx), at the end of the step, in the
// round trip of the next step's first statement or of the COMMIT. Queued statements run in order. Their results are not read: to stop the
// commit, a statement must fail on the server (raise an error); the transaction then rolls
// back and InTx returns that error, passed through onErr when onErr is not nil (to name it),
// and translated (see TranslateError). It returns ErrNoTx when ctx carries no transaction.
func BeforeCommit(ctx context.Context, onErr func(error) error, sql string, args ...any) error {
	st, ok := ctx.Value(txKey{}).(*scopedTx)
	if !ok {
		return ErrNoTx
	}
	st.beforeCommit = append(st.beforeCommit, queued{sql: sql, args: args, onErr: onErr})
	return nil
}

// InTx runs fn in a READ COMMITTED transaction with the given RLS scope and commits when fn
// returns nil. fn receives a context carrying the transaction (see TxFromContext). The
// rollback runs with context.WithoutCancel so a cancelled request still releases its locks;
// the commit error is returned, translated (see TranslateError). fn must not call external
// systems: a transaction is held open while it runs. After a successful commit, the hooks fn
// registered with AfterCommit run before InTx returns.
func InTx(ctx context.Context, pool *pgxpool.Pool, scope Scope, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return inTx(ctx, pool, scope, nil, fn)
}

func inTx(ctx context.Context, pool *pgxpool.Pool, scope Scope, openings []*Opening, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if _, _, err := TxFromContext(ctx); err == nil {
		return errors.New("postgres.InTx: already inside a transaction")
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres.InTx: begin: %w", TranslateError(err))
	}
	// Released last: a connection left inside a transaction is closed by the pool, not reused.
	defer conn.Release()
	st := &scopedTx{scope: scope}
	var tx pgx.Tx
	if len(openings) == 0 {
		// BEGIN and the scope travel in one round trip (a simple-protocol query of two statements).
		tx, err = conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: beginScoped(scope)})
	} else {
		tx, st.opened, err = beginOpened(ctx, conn, scope, openings)
	}
	if err != nil {
		return fmt.Errorf("postgres.InTx: begin: %w", TranslateError(err))
	}
	st.tx = tx
	committed := false
	defer func() {
		// Also on a panic or runtime.Goexit (a failed test assertion) inside fn.
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := fn(context.WithValue(ctx, txKey{}, st), tx); err != nil {
		return err
	}
	committed = true // a failed commit has ended the transaction too
	if err := commit(ctx, conn, tx, st.beforeCommit); err != nil {
		return fmt.Errorf("postgres.InTx: commit: %w", TranslateError(err))
	}
	for _, hook := range st.afterCommit {
		hook()
	}
	return nil
}

// commit commits tx, sending the queued statements and the COMMIT in one round trip (the
// consecutive writes of BeforeCommitWrite as one statement: mergeWrites). When a
// statement fails, the server skips the rest of the batch (the COMMIT too): the transaction
// is rolled back on the connection before it returns to the pool.
func commit(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, stmts []queued) error {
	if len(stmts) == 0 {
		return tx.Commit(ctx)
	}
	stmts = mergeWrites(stmts)
	b := &pgx.Batch{}
	for _, q := range stmts {
		b.Queue(q.sql, q.args...)
	}
	b.Queue("COMMIT")
	// Sent on the connection: tx (pgx's) is never used again; the connection's state is what
	// the server reports.
	br := conn.SendBatch(ctx, b)
	var err error
	for _, q := range stmts {
		if _, err = br.Exec(); err != nil {
			if q.onErr != nil {
				err = q.onErr(err)
			}
			break
		}
	}
	if err == nil {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil && tag.String() != "COMMIT" {
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if conn.Conn().PgConn().TxStatus() != 'I' {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	return err
}

// settings returns the values of app.workspace_id and app.user_id for scope ("" for none).
func (s Scope) settings() (workspace, user string) {
	if s.WorkspaceID != uuid.Nil {
		workspace = s.WorkspaceID.String()
	}
	if s.UserID != uuid.Nil {
		user = s.UserID.String()
	}
	return workspace, user
}

// beginScoped is the query that begins a READ COMMITTED transaction and sets its RLS scope
// for the rest of the transaction (local settings; "" for no workspace or no user). The ids
// are written into the text in their canonical UUID form (hex digits and dashes only), so
// nothing in it comes from user input.
func beginScoped(scope Scope) string {
	ws, user := scope.settings()
	return "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT set_config('app.workspace_id', '" + ws +
		"', true), set_config('app.user_id', '" + user + "', true)"
}

// actAs scopes the rest of the transaction of ctx to user (app.user_id), for the auth flows
// that learn who the user is inside the transaction (login, refresh). A transaction already
// scoped to another user is refused: it never turns into someone else's.
func actAs(ctx context.Context, op string, user uuid.UUID) error {
	st, ok := ctx.Value(txKey{}).(*scopedTx)
	if !ok {
		return fmt.Errorf("%s: %w", op, ErrNoTx)
	}
	if st.scope.UserID == user {
		return nil
	}
	if st.scope.UserID != uuid.Nil || user == uuid.Nil {
		return fmt.Errorf("%s: the transaction acts for another user", op)
	}
	if _, err := st.tx.Exec(ctx, `SELECT set_config('app.user_id', $1, true)`, user.String()); err != nil {
		return fmt.Errorf("%s: %w", op, TranslateError(err))
	}
	st.scope.UserID = user
	return nil
}

// ErrRunAgain, wrapped by the error of a statement queued for the commit (BeforeCommit's
// onErr), says that the transaction acted on a world that changed before it could commit
// (a row it found absent was committed by another transaction meanwhile): TxMiddleware then
// runs the chain once more, in a new transaction, which sees that row. The first run's
// writes were rolled back with its transaction.
var ErrRunAgain = errors.New("postgres: the transaction must run again")

// TxMiddleware is the command-bus middleware that runs the rest of the chain in one RLS
// transaction scoped to the invocation's actor. The chain's outcome is returned only when the
// commit succeeded. A commit that fails with ErrRunAgain runs the chain once more.
//
// Each of openers may give the transaction an Opening, sent with its BEGIN (see Opening): the
// middleware that reads it with Opened must come after this one in the chain.
func TxMiddleware(pool *pgxpool.Pool, openers ...Opener) bus.Middleware {
	return func(ctx context.Context, inv bus.Invocation, next bus.Next) (bus.Outcome, error) {
		var openings []*Opening
		for _, open := range openers {
			openings = append(openings, open(ctx, inv)...)
		}
		var out bus.Outcome
		run := func() error {
			return inTx(ctx, pool, Scope{WorkspaceID: inv.Actor.WorkspaceID, UserID: inv.Actor.UserID}, openings,
				func(ctx context.Context, _ pgx.Tx) error {
					var err error
					out, err = next(ctx)
					return err
				})
		}
		err := run()
		if errors.Is(err, ErrRunAgain) {
			err = run()
		}
		if err != nil {
			return bus.Outcome{}, err
		}
		return out, nil
	}
}

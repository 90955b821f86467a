package postgres

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/app/bus"
)

// Opening is a statement sent in the round trip of a transaction's BEGIN, right after the
// scope is set: for a middleware whose first statements need nothing that the transaction does
// before them (the idempotency guard's lock and read), it saves one round trip. It runs under
// the transaction's RLS scope like any other statement of the transaction, and in READ
// COMMITTED with a snapshot of its own: a statement sees what committed before it started,
// including what committed while an earlier Opening of the same round trip ran.
type Opening struct {
	// Key names the result for Opened; compare it with == (an unexported type of the owner).
	Key  any
	SQL  string
	Args []any
	// Read consumes the statement's rows (it need not close them); what it returns is what
	// Opened(ctx, Key) returns inside the transaction. When it fails, the transaction rolls
	// back and InTx returns its error.
	Read func(pgx.Rows) (any, error)
	// OnErr, when not nil, names a server error of the statement (as BeforeCommit's onErr).
	OnErr func(error) error
}

// Opener returns the Openings of an invocation's transaction, sent in order; none for nil.
type Opener func(ctx context.Context, inv bus.Invocation) []*Opening

// Opened returns what the Read of the transaction's Opening with key returned, and whether the
// transaction of ctx was opened with one.
func Opened(ctx context.Context, key any) (any, bool) {
	st, ok := ctx.Value(txKey{}).(*scopedTx)
	if !ok {
		return nil, false
	}
	v, ok := st.opened[key]
	return v, ok
}

// scopeSQL sets a transaction's RLS scope (local settings; "" for no workspace or no user).
const scopeSQL = `SELECT set_config('app.workspace_id', $1, true), set_config('app.user_id', $2, true)`

// beginOpened begins a READ COMMITTED transaction on conn, sets its scope and runs openings,
// all in one round trip, and returns the transaction and what each Opening's Read returned.
// On error the transaction is rolled back before it returns.
func beginOpened(ctx context.Context, conn *pgxpool.Conn, scope Scope, openings []*Opening) (pgx.Tx, map[any]any, error) {
	ws, user := scope.settings()
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	b.Queue(scopeSQL, ws, user)
	for _, o := range openings {
		b.Queue(o.SQL, o.Args...)
	}
	br := conn.SendBatch(ctx, b)
	opened, err := readOpenings(br, openings)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
		return nil, nil, err
	}
	return &connTx{conn: conn.Conn()}, opened, nil
}

// readOpenings reads the results of beginOpened's batch: BEGIN, the scope, then each opening.
func readOpenings(br pgx.BatchResults, openings []*Opening) (map[any]any, error) {
	for range 2 { // BEGIN, scope
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	opened := make(map[any]any, len(openings))
	for _, o := range openings {
		rows, err := br.Query()
		if err == nil {
			var v any
			v, err = o.Read(rows)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
			opened[o.Key] = v
		}
		if err != nil {
			if o.OnErr != nil {
				err = o.OnErr(err)
			}
			return nil, err
		}
	}
	return opened, nil
}

// connTx is a transaction that beginOpened began on conn itself (pgx's own Tx can only be had
// by letting pgx send the BEGIN, in a round trip of its own), or one of its savepoints
// (Begin). It behaves as pgx's: Commit and Rollback end it once (ErrTxClosed after, and for
// every statement; a savepoint ends with its transaction too), a commit that the server turned
// into a rollback is ErrTxCommitRollback, and a savepoint's Commit releases it, its Rollback
// rolls back to it.
type connTx struct {
	conn   *pgx.Conn
	parent *connTx // nil: the transaction; otherwise a savepoint of parent
	name   string  // a savepoint's name
	ended  bool
	// savepoints counts the savepoints begun in the transaction, for their names.
	savepoints *int64
}

func (tx *connTx) closed() bool { return tx.ended || (tx.parent != nil && tx.parent.closed()) }

func (tx *connTx) end(ctx context.Context, top, savepoint string) (pgconn.CommandTag, error) {
	if tx.closed() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	tx.ended = true
	if tx.parent != nil {
		return tx.conn.Exec(ctx, savepoint+tx.name)
	}
	return tx.conn.Exec(ctx, top)
}

func (tx *connTx) Commit(ctx context.Context) error {
	tag, err := tx.end(ctx, "COMMIT", "RELEASE SAVEPOINT ")
	if err == nil && tx.parent == nil && tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return err
}

// Rollback rolls back; when that fails the connection stays inside the transaction, and the
// pool closes it on release rather than reuse it.
func (tx *connTx) Rollback(ctx context.Context) error {
	_, err := tx.end(ctx, "ROLLBACK", "ROLLBACK TO SAVEPOINT ")
	return err
}

func (tx *connTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if tx.closed() {
		return nil, pgx.ErrTxClosed
	}
	if tx.savepoints == nil {
		tx.savepoints = new(int64)
	}
	*tx.savepoints++
	sp := &connTx{conn: tx.conn, parent: tx, name: "sp_" + strconv.FormatInt(*tx.savepoints, 10), savepoints: tx.savepoints}
	if _, err := tx.conn.Exec(ctx, "SAVEPOINT "+sp.name); err != nil {
		return nil, err
	}
	return sp, nil
}

func (tx *connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if tx.closed() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return tx.conn.Exec(ctx, sql, args...)
}

func (tx *connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if tx.closed() {
		return nil, pgx.ErrTxClosed
	}
	return tx.conn.Query(ctx, sql, args...)
}

func (tx *connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if tx.closed() {
		return closedRow{}
	}
	return tx.conn.QueryRow(ctx, sql, args...)
}

func (tx *connTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if tx.closed() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return tx.conn.SendBatch(ctx, b)
}

func (tx *connTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if tx.closed() {
		return 0, pgx.ErrTxClosed
	}
	return tx.conn.CopyFrom(ctx, table, columns, src)
}

func (tx *connTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if tx.closed() {
		return nil, pgx.ErrTxClosed
	}
	return tx.conn.Prepare(ctx, name, sql)
}

func (tx *connTx) LargeObjects() pgx.LargeObjects {
	panic("postgres: large objects are not supported in a transaction begun with an Opening")
}

func (tx *connTx) Conn() *pgx.Conn { return tx.conn }

// closedRow is the Row of a query on an ended transaction.
type closedRow struct{}

func (closedRow) Scan(...any) error { return pgx.ErrTxClosed }

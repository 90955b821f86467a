package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Group commit: the short steps that concurrent goroutines of one process run on a pool
// (the begin and record steps of the jobs a worker runs at the same time) commit together,
// in one transaction, instead of one transaction each. A step that arrives while fewer than
// maxLeaders group transactions run starts one at once (alone, at low load: no wait); one that
// arrives while they all run waits for the next, which takes every step waiting, up to
// maxGroup. Each step runs under its own workspace's RLS scope: the group's steps run ordered
// by workspace, and the transaction's app.workspace_id is set before the first step of each
// workspace. The statements a step queues with BeforeCommit (its last writes of the task and
// the operation, its outbox rows) run under its scope right after it, sent in the round trip
// of the next step's first statement, or of the COMMIT. The locking reads the steps declare
// (port.LockPreloader: a task and its operation) are sent ahead, all in the group's first
// round trip, so that a group of steps that read only those rows costs two round trips (that
// one and the COMMIT's), not one per step. When a step fails (or a statement it
// queued), the group's transaction rolls back and every step of it runs again alone, in a
// transaction of its own: a failing step never fails another one.
//
// Two leaders, not more: in make bench's end to end (50 concurrent no-op jobs, 2026-12-04,
// commit 9ab59dd with each count), 1, 2, 3 and 4 leaders made 0.24, 0.37, 0.53 and 0.64
// transactions per job, and PostgreSQL's CPU per job fell with them; one leader lost no
// throughput against two, but a group that waits (a row lock, a slow statement) would then
// hold up every step of the process.
const (
	maxGroup   = 32
	maxLeaders = 2
)

// errAlone tells a step that its group failed: it runs again alone.
var errAlone = errors.New("postgres: the group transaction failed; run alone")

// groupUnit is one step waiting for, or running in, a group transaction.
type groupUnit struct {
	ws, key uuid.UUID
	// pre is the step's locking read to send ahead (port.LockPreloader), or nil.
	pre *preload
	fn  func(ctx context.Context) error
	// res receives the outcome: nil (committed), errAlone, or errLead (this step's goroutine
	// leads the next group).
	res chan error
}

var errLead = errors.New("postgres: lead the next group")

// grouper is the group commit of one pool.
type grouper struct {
	mu      sync.Mutex
	pending []*groupUnit
	leaders int
}

var groupers sync.Map // *pgxpool.Pool → *grouper

func grouperOf(pool *pgxpool.Pool) *grouper {
	if g, ok := groupers.Load(pool); ok {
		return g.(*grouper)
	}
	g, _ := groupers.LoadOrStore(pool, &grouper{})
	return g.(*grouper)
}

// InGroupTx runs fn in a transaction scoped to workspaceID (no user) that it may share with
// the concurrent InGroupTx calls of other goroutines on the same pool, each under its own
// workspace's scope (group commit). It returns once that transaction committed, or fn's
// error. fn may run twice: when the shared transaction fails (another step's error, a
// conflict) fn runs again alone, in a transaction of its own; it must therefore set what it
// hands out on every run (not keep state from an earlier run). fn must not depend on the
// transaction's other statements (they are other workspaces' steps) and must be short.
//
// key names what fn locks and changes (a task id): a group never holds two steps of the same
// key (a row lock does not keep apart two steps of one transaction); the second waits for
// the next group. uuid.Nil is no key.
func (t Transactor) InGroupTx(ctx context.Context, workspaceID, key uuid.UUID, fn func(ctx context.Context) error) error {
	if _, _, err := TxFromContext(ctx); err == nil {
		return errors.New("postgres.InGroupTx: already inside a transaction")
	}
	g := grouperOf(t.Pool)
	pre, _ := ctx.Value(preloadKey{}).(*preload)
	u := &groupUnit{ws: workspaceID, key: key, pre: pre, fn: fn, res: make(chan error, 1)}
	g.mu.Lock()
	var err error
	if g.leaders < maxLeaders {
		g.leaders++
		g.mu.Unlock()
		err = g.lead(ctx, t.Pool, u)
	} else {
		g.pending = append(g.pending, u)
		g.mu.Unlock()
		if err = <-u.res; err == errLead {
			err = g.lead(ctx, t.Pool, u)
		}
	}
	if err == errAlone {
		return runGroup(ctx, t.Pool, []*groupUnit{u})
	}
	return err
}

// lead runs first and the steps waiting (up to maxGroup) as one group, tells each its
// outcome, and hands the lead on to a step still waiting (or gives it up). It returns first's
// outcome.
func (g *grouper) lead(ctx context.Context, pool *pgxpool.Pool, first *groupUnit) (err error) {
	g.mu.Lock()
	batch := []*groupUnit{first}
	keys := map[uuid.UUID]bool{first.key: true}
	rest := g.pending[:0]
	for _, u := range g.pending {
		if len(batch) == maxGroup || (u.key != uuid.Nil && keys[u.key]) {
			rest = append(rest, u)
			continue
		}
		keys[u.key] = true
		batch = append(batch, u)
	}
	clear(g.pending[len(rest):])
	g.pending = rest
	g.mu.Unlock()

	done := false
	defer func() {
		// Also on a panic or runtime.Goexit in a step: the others run again alone.
		outcome := errAlone
		if done {
			outcome = err
		}
		for _, u := range batch[1:] {
			if outcome == nil {
				u.res <- nil
			} else {
				u.res <- errAlone
			}
		}
		g.mu.Lock()
		if len(g.pending) > 0 {
			next := g.pending[0]
			g.pending = g.pending[1:]
			next.res <- errLead
		} else {
			g.leaders--
		}
		g.mu.Unlock()
	}()
	err = runGroup(ctx, pool, batch)
	done = true
	if err != nil && len(batch) > 1 {
		return errAlone
	}
	return err
}

// runGroup runs the steps of batch in one transaction, each under its workspace's scope,
// and commits: nil when every step returned nil and the commit succeeded, else the first
// error (a step's, or the commit's). Steps of the same workspace run one after another, under
// one scope change. The steps' declared locking reads go first, together (preloadRows). What
// is pending (the BEGIN and the first scope, a scope change, the statements the step before
// queued with BeforeCommit) travels with the first statement a step sends (groupTx), or with
// the COMMIT; a transaction that sent nothing and queued nothing is never begun.
func runGroup(ctx context.Context, pool *pgxpool.Pool, batch []*groupUnit) error {
	// Same workspaces next to each other: one scope change per workspace.
	order := batch
	if len(batch) > 1 {
		order = slices.Clone(batch)
		slices.SortStableFunc(order, func(a, b *groupUnit) int { return slices.Compare(a.ws[:], b.ws[:]) })
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres.InGroupTx: begin: %w", TranslateError(err))
	}
	// Released last: a connection left inside a transaction is closed by the pool, not reused.
	defer conn.Release()
	gtx := &groupTx{Tx: &connTx{conn: conn.Conn()}, pending: []queued{
		{sql: beginSQL}, {sql: scopeSQL, args: []any{order[0].ws.String(), ""}}}}
	st := &scopedTx{tx: gtx, scope: Scope{WorkspaceID: order[0].ws}}
	committed := false
	defer func() {
		// Also on a panic or runtime.Goexit inside a step.
		if !committed && conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if err := preloadRows(ctx, gtx, st, order); err != nil {
		return err
	}
	tctx := context.WithValue(ctx, txKey{}, st)
	queuedAny := false
	for _, u := range order {
		if u.ws != st.scope.WorkspaceID {
			gtx.setScope(u.ws.String())
			st.scope.WorkspaceID = u.ws
		}
		st.locked = nil // what a step kept is its own
		if err := u.fn(tctx); err != nil {
			return err
		}
		// The step's queued statements, under its scope, go with what the next step sends
		// first, or with the COMMIT.
		if len(st.beforeCommit) > 0 {
			queuedAny = true
			gtx.pending = append(gtx.pending, st.beforeCommit...)
			st.beforeCommit = nil
		}
	}
	committed = true // a failed commit has ended the transaction too
	if !gtx.begun && !queuedAny {
		// Nothing was sent and nothing is queued: no transaction to end.
		gtx.pending = nil
		runHooks(st)
		return nil
	}
	stmts := gtx.pending
	for len(stmts) > 0 && stmts[len(stmts)-1].sql == groupScopeSQL {
		stmts = stmts[:len(stmts)-1] // a scope change no statement followed
	}
	gtx.pending = nil
	if err := commit(ctx, conn, gtx, stmts); err != nil {
		return fmt.Errorf("postgres.InGroupTx: commit: %w", TranslateError(err))
	}
	runHooks(st)
	return nil
}

// preloadKey marks a context given to InGroupTx with the step's locking read to send ahead
// (*preload; Repository.PreloadLocking).
type preloadKey struct{}

// preload is a locking read of one row (and the rows locked with it) that a group
// transaction sends ahead of its steps.
type preload struct {
	sql  string
	args []any
	// read scans the statement's row: the rows to keep (none when there is no row).
	read func(pgx.Row) ([]preloadedRow, error)
}

// preloadedRow is a row read ahead, kept for the locking reads of the group's steps.
type preloadedRow struct {
	table string
	id    uuid.UUID
	v     any
}

// preloadRows sends the locking reads the steps of order declared (port.LockPreloader),
// each under its step's scope, in one round trip with what is pending (the BEGIN and the first
// scope), and keeps the rows they return in st.preloaded, under their step's workspace. The
// scope is then set back to the first step's (pending, sent with the next statement).
func preloadRows(ctx context.Context, gtx *groupTx, st *scopedTx, order []*groupUnit) error {
	b := &pgx.Batch{}
	var sent []*groupUnit // per queued statement: its step, or nil for a scope change
	ws := order[0].ws     // the scope pending sets
	for _, u := range order {
		if u.pre == nil {
			continue
		}
		if u.ws != ws {
			b.Queue(groupScopeSQL, u.ws.String())
			sent = append(sent, nil)
			ws = u.ws
		}
		b.Queue(u.pre.sql, u.pre.args...)
		sent = append(sent, u)
	}
	if len(b.QueuedQueries) == 0 {
		return nil
	}
	br := gtx.sendPending(ctx, b)
	err := func() error {
		for _, u := range sent {
			if u == nil {
				if _, err := br.Exec(); err != nil {
					return fmt.Errorf("postgres.InGroupTx: scope: %w", err)
				}
				continue
			}
			rows, err := u.pre.read(br.QueryRow())
			if err != nil {
				return err
			}
			for _, r := range rows {
				if st.preloaded == nil {
					st.preloaded = make(map[lockedKey]any, 2*len(sent))
				}
				st.preloaded[lockedKey{u.ws, r.table, r.id}] = r.v
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("postgres.InGroupTx: %w", TranslateError(cerr))
	}
	if err != nil {
		return err
	}
	if ws != order[0].ws {
		gtx.pending = append(gtx.pending, queued{sql: groupScopeSQL, args: []any{order[0].ws.String()}})
	}
	return nil
}

// runHooks runs the AfterCommit hooks of st, in order.
func runHooks(st *scopedTx) {
	for _, hook := range st.afterCommit {
		hook()
	}
}

// beginSQL begins a group transaction.
const beginSQL = "BEGIN ISOLATION LEVEL READ COMMITTED"

// groupScopeSQL sets the workspace of the rest of a group transaction (the user stays none).
const groupScopeSQL = `SELECT set_config('app.workspace_id', $1, true)`

// groupTx is the transaction of a group as its steps see it: what is pending (the BEGIN and
// the first scope, or a scope change) travels to the server in the round trip of the next
// statement (a row read or a batch, as the repositories' loads, shares it; Exec sends it in a
// batch with its statement; Query, CopyFrom and a savepoint send it first).
type groupTx struct {
	pgx.Tx
	pending []queued
	// begun is set once the BEGIN has been sent.
	begun bool
}

// setScope makes ws the scope of what is sent or queued next.
func (t *groupTx) setScope(ws string) {
	if n := len(t.pending); n > 0 {
		// The previous scope has no statement after it: it changes.
		switch last := &t.pending[n-1]; last.sql {
		case groupScopeSQL:
			last.args = []any{ws}
			return
		case scopeSQL:
			last.args = []any{ws, ""}
			return
		}
	}
	t.pending = append(t.pending, queued{sql: groupScopeSQL, args: []any{ws}})
}

// take returns what is pending, as sent from now on (writes of one table run merged, see
// mergeWrites).
func (t *groupTx) take() []queued {
	p := mergeWrites(t.pending)
	t.pending = nil
	t.begun = true
	return p
}

func (t *groupTx) flush(ctx context.Context) error {
	if len(t.pending) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	br := t.sendPending(ctx, b)
	err := br.(*skipFirst).first()
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("postgres.InGroupTx: %w", cerr)
	}
	return err
}

// sendPending sends b after what is pending; the results it returns start with b's.
func (t *groupTx) sendPending(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	pending := t.take()
	qs := make([]*pgx.QueuedQuery, 0, len(pending)+len(b.QueuedQueries))
	for _, q := range pending {
		qs = append(qs, &pgx.QueuedQuery{SQL: q.sql, Arguments: q.args})
	}
	b.QueuedQueries = append(qs, b.QueuedQueries...)
	return &skipFirst{BatchResults: t.Tx.SendBatch(ctx, b), pending: pending}
}

func (t *groupTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if len(t.pending) == 0 {
		return t.Tx.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.sendPending(ctx, b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *groupTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *groupTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if len(t.pending) > 0 {
		return t.sendPending(ctx, b)
	}
	return t.Tx.SendBatch(ctx, b)
}

func (t *groupTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.flush(ctx); err != nil {
		return 0, err
	}
	return t.Tx.CopyFrom(ctx, table, cols, src)
}

func (t *groupTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Begin(ctx)
}

// QueryRow sends the pending scope change and the query in one round trip.
func (t *groupTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if len(t.pending) == 0 {
		return t.Tx.QueryRow(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.SendBatch(ctx, b)
	return &batchRow{br: br}
}

// skipFirst reads (and drops) the results of the statements that were pending (the BEGIN,
// scope changes, and the statements the steps before queued with BeforeCommit). A pending
// statement that fails is not the sending step's: its error reaches that step opaque (the
// group fails, and each step runs again alone, where it reports its own).
type skipFirst struct {
	pgx.BatchResults
	pending []queued
	done    bool
	err     error
}

func (s *skipFirst) first() error {
	if !s.done {
		s.done = true
		for _, q := range s.pending {
			if _, err := s.BatchResults.Exec(); err != nil {
				switch q.sql {
				case groupScopeSQL, scopeSQL, beginSQL:
					s.err = fmt.Errorf("postgres.InGroupTx: scope: %w", err)
				default:
					if q.onErr != nil {
						err = q.onErr(err)
					}
					s.err = fmt.Errorf("postgres.InGroupTx: a statement an earlier step of the group queued failed: %v", err)
				}
				break
			}
		}
	}
	return s.err
}

func (s *skipFirst) Exec() (pgconn.CommandTag, error) {
	if err := s.first(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return s.BatchResults.Exec()
}

func (s *skipFirst) Query() (pgx.Rows, error) {
	if err := s.first(); err != nil {
		return nil, err
	}
	return s.BatchResults.Query()
}

func (s *skipFirst) QueryRow() pgx.Row {
	if err := s.first(); err != nil {
		return errRow{err}
	}
	return s.BatchResults.QueryRow()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// batchRow is the row of a one-query batch: the batch is closed once it is scanned.
type batchRow struct{ br pgx.BatchResults }

func (r *batchRow) Scan(dest ...any) error {
	err := r.br.QueryRow().Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

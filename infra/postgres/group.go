package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/app/port"
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
// one and the COMMIT's), not one per step.
//
// Each step keeps its own fate:
//   - it runs with its own context's values (the request's correlation id and trace
//     context, its logger, its principal; stepContext), never another step's;
//   - its failure is its own: when a step fails (or a statement it queued), the group's
//     transaction rolls back and every step of it runs again alone, in a transaction of its
//     own; a step that panics gets its panic as its error (with its stack) and is not run
//     again, the others run again alone;
//   - its waits are bounded: the group's transaction waits at most groupLockTimeout for a row
//     lock (a step that meets it runs again alone, where it may wait; the others commit
//     without it, in the next group), and at most groupTimeout in all; no single step's
//     cancellation ends a group (its COMMIT included); a step waiting for a group leaves the
//     queue when its context is done, and is never handed the lead.
//
// Two leaders, not more: in make bench's end to end (50 concurrent no-op jobs, 2026-12-04,
// commit 9ab59dd with each count), 1, 2, 3 and 4 leaders made 0.24, 0.37, 0.53 and 0.64
// transactions per job, and PostgreSQL's CPU per job fell with them; one leader lost no
// throughput against two, but a group that waits (a row lock, a slow statement) would then
// hold up every step of the process.
const (
	maxGroup   = 32
	maxLeaders = 2
	// groupLockTimeout bounds each row-lock wait of a group's transaction (lock_timeout):
	// one step's row held elsewhere does not hold up the others' commit for longer.
	groupLockTimeout = 500 * time.Millisecond
	// groupTimeout bounds a group's transaction, from the connection's acquisition to the
	// COMMIT: its statements run under a context of their own (no step's), ended then.
	groupTimeout = port.GroupTimeout
)

// errAlone tells a step that its group failed: it runs again alone.
var errAlone = errors.New("postgres: the group transaction failed; run alone")

// groupUnit is one step waiting for, or running in, a group transaction.
type groupUnit struct {
	// ctx is the step's own context: its values, and its cancellation while it waits.
	ctx     context.Context
	ws, key uuid.UUID
	// pre is the step's locking read to send ahead (port.LockPreloader), or nil.
	pre *preload
	fn  func(ctx context.Context) error
	// skipped is set (by the leader) when the step was not run in its group: its context
	// had ended.
	skipped error
	// res receives the outcome: nil (committed), errAlone, errLead (this step's goroutine
	// leads the next group), or the step's own error (its panic, its context's end).
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
// conflict, a row lock held past groupLockTimeout) fn runs again alone, in a transaction of
// its own; it must therefore set what it hands out on every run (not keep state from an
// earlier run). fn must not depend on the transaction's other statements (they are other
// workspaces' steps) and must be short.
//
// fn's context carries ctx's values and the transaction; in a group, its cancellation and
// deadline are the group's (see stepContext): ctx's own end is seen before fn runs (fn is
// then not run; InGroupTx returns ctx's error) and not while it runs. A panic in fn is
// returned as fn's error (*StepPanic), in a group as alone.
//
// key names what fn locks and changes (a task id): a group never holds two steps of the same
// key (a row lock does not keep apart two steps of one transaction); the second waits for
// the next group. uuid.Nil is no key.
func (t Transactor) InGroupTx(ctx context.Context, workspaceID, key uuid.UUID, fn func(ctx context.Context) error) error {
	if _, _, err := TxFromContext(ctx); err == nil {
		return errors.New("postgres.InGroupTx: already inside a transaction")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres.InGroupTx: %w", err)
	}
	g := grouperOf(t.Pool)
	pre, _ := ctx.Value(preloadKey{}).(*preload)
	u := &groupUnit{ctx: ctx, ws: workspaceID, key: key, pre: pre, fn: fn, res: make(chan error, 1)}
	g.mu.Lock()
	var err error
	if g.leaders < maxLeaders {
		g.leaders++
		g.mu.Unlock()
		err = g.lead(t.Pool, u)
	} else {
		g.pending = append(g.pending, u)
		g.mu.Unlock()
		if err = g.wait(u); err == errLead {
			err = g.lead(t.Pool, u)
		}
	}
	if err == errAlone {
		_, err = runGroup(t.Pool, []*groupUnit{u}, false)
	}
	return err
}

// wait waits for u's outcome. When u's context ends first and u is still queued, it leaves
// the queue and returns the context's error; taken into a group already, u waits for the
// group's outcome (bounded by groupTimeout). A lead handed to u once its context ended is
// handed on.
func (g *grouper) wait(u *groupUnit) error {
	select {
	case err := <-u.res:
		if err == errLead && u.ctx.Err() != nil {
			g.handOn()
			return fmt.Errorf("postgres.InGroupTx: %w", u.ctx.Err())
		}
		return err
	case <-u.ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(g.pending, u); i >= 0 {
		g.pending = slices.Delete(g.pending, i, i+1)
		g.mu.Unlock()
		return fmt.Errorf("postgres.InGroupTx: %w", u.ctx.Err())
	}
	g.mu.Unlock()
	if err := <-u.res; err != errLead {
		return err
	}
	g.handOn()
	return fmt.Errorf("postgres.InGroupTx: %w", u.ctx.Err())
}

// handOn hands the lead to the first step waiting whose context lives (one whose context
// ended is told so and leaves), or gives it up.
func (g *grouper) handOn() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.pending) > 0 {
		next := g.pending[0]
		g.pending[0] = nil
		g.pending = g.pending[1:]
		if err := next.ctx.Err(); err != nil {
			next.res <- fmt.Errorf("postgres.InGroupTx: %w", err)
			continue
		}
		next.res <- errLead
		return
	}
	g.leaders--
}

// lead runs first and the steps waiting (up to maxGroup) as one group, tells each its
// outcome, and hands the lead on to a step still waiting (or gives it up). It returns first's
// outcome. A step that meets the group's lock time-out is told to run alone and the others
// run again as a group without it; a step that panicked gets its panic; any other failure
// sends every step of the group to run alone.
func (g *grouper) lead(pool *pgxpool.Pool, first *groupUnit) error {
	g.mu.Lock()
	batch := []*groupUnit{first}
	keys := map[uuid.UUID]bool{first.key: true}
	rest := g.pending[:0]
	var gone []*groupUnit
	for _, u := range g.pending {
		switch {
		case u.ctx.Err() != nil:
			gone = append(gone, u)
		case len(batch) == maxGroup || (u.key != uuid.Nil && keys[u.key]):
			rest = append(rest, u)
		default:
			keys[u.key] = true
			batch = append(batch, u)
		}
	}
	clear(g.pending[len(rest):])
	g.pending = rest
	g.mu.Unlock()
	for _, u := range gone {
		u.res <- fmt.Errorf("postgres.InGroupTx: %w", u.ctx.Err())
	}

	outcome := make(map[*groupUnit]error, len(batch))
	defer func() {
		// Also on a runtime.Goexit in a step: the others run again alone.
		for _, u := range batch[1:] {
			err, ok := outcome[u]
			if !ok {
				err = errAlone
			}
			u.res <- err
		}
		g.handOn()
	}()
	run := batch
	for len(run) > 0 {
		culprit, err := runGroup(pool, run, true)
		switch {
		case err == nil:
			for _, u := range run {
				outcome[u] = u.skipped
			}
			run = nil
		case culprit != nil && isStepPanic(err):
			for _, u := range run {
				outcome[u] = errAlone
			}
			outcome[culprit] = err
			run = nil
		case culprit != nil && isLockTimeout(err):
			outcome[culprit] = errAlone
			run = slices.DeleteFunc(slices.Clone(run), func(u *groupUnit) bool { return u == culprit })
		case len(batch) == 1:
			outcome[first] = err // a failure alone is the step's own
			run = nil
		default:
			for _, u := range run {
				outcome[u] = errAlone
			}
			run = nil
		}
	}
	return outcome[first]
}

// runGroup runs the steps of batch in one transaction, each under its workspace's scope,
// and commits: nil when every step it ran returned nil and the commit succeeded, else the
// first error (a step's, its panic's, or the commit's) and, when the error is one step's
// own (its error, its panic, the failure of its locking read), that step. Steps of the same
// workspace run one after another, under one scope change. The steps' declared locking
// reads go first, together (preloadRows). What is pending (the BEGIN and the first scope, a
// scope change, the statements the step before queued with BeforeCommit) travels with the
// first statement a step sends (groupTx), or with the COMMIT; a transaction that sent nothing
// and queued nothing is never begun. bounded: each row-lock wait is bounded by
// groupLockTimeout.
//
// A batch of one runs under its step's own context. A larger one runs under a context of
// its own, bounded by groupTimeout, each step under a stepContext; a step whose own context
// has ended is not run (skipped).
func runGroup(pool *pgxpool.Pool, batch []*groupUnit, bounded bool) (*groupUnit, error) {
	ctx := batch[0].ctx
	shared := len(batch) > 1
	if shared {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), groupTimeout)
		defer cancel()
	}
	// Same workspaces next to each other: one scope change per workspace.
	order := batch
	if shared {
		order = slices.Clone(batch)
		slices.SortStableFunc(order, func(a, b *groupUnit) int { return slices.Compare(a.ws[:], b.ws[:]) })
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres.InGroupTx: begin: %w", TranslateError(err))
	}
	// Released last: a connection left inside a transaction is closed by the pool, not reused.
	defer conn.Release()
	open := scopeSQL
	if bounded {
		open = boundedScopeSQL
	}
	gtx := &groupTx{Tx: &connTx{conn: conn.Conn()}, pending: []queued{
		{sql: beginSQL}, {sql: open, args: []any{order[0].ws.String(), ""}}}}
	st := &scopedTx{tx: gtx, scope: Scope{WorkspaceID: order[0].ws}}
	committed := false
	defer func() {
		// Also on a runtime.Goexit inside a step.
		if !committed && conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if culprit, err := preloadRows(ctx, gtx, st, order); err != nil {
		return culprit, err
	}
	queuedAny := false
	for _, u := range order {
		u.skipped = nil
		sctx := context.Context(nil)
		if shared {
			if err := u.ctx.Err(); err != nil {
				u.skipped = fmt.Errorf("postgres.InGroupTx: %w", err)
				continue
			}
			sctx = newStepContext(ctx, u.ctx, st)
		} else {
			sctx = context.WithValue(ctx, txKey{}, st)
		}
		if u.ws != st.scope.WorkspaceID {
			gtx.setScope(u.ws.String())
			st.scope.WorkspaceID = u.ws
		}
		st.locked = nil // what a step kept is its own
		if err := runStep(sctx, u.fn); err != nil {
			return u, err
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
		return nil, nil
	}
	stmts := gtx.pending
	for len(stmts) > 0 && stmts[len(stmts)-1].sql == groupScopeSQL {
		stmts = stmts[:len(stmts)-1] // a scope change no statement followed
	}
	gtx.pending = nil
	if err := commit(ctx, conn, gtx, stmts); err != nil {
		return nil, fmt.Errorf("postgres.InGroupTx: commit: %w", TranslateError(err))
	}
	runHooks(st)
	return nil, nil
}

// StepPanic is the error of a step of InGroupTx that panicked: the panic's value, and the
// stack of the step's goroutine where it panicked.
type StepPanic struct {
	Value any
	Stack []byte
}

func (p *StepPanic) Error() string {
	return fmt.Sprintf("postgres.InGroupTx: the step panicked: %v\n%s", p.Value, p.Stack)
}

// runStep runs fn, its panic returned as its error (*StepPanic).
func runStep(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &StepPanic{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn(ctx)
}

func isStepPanic(err error) bool {
	var p *StepPanic
	return errors.As(err, &p)
}

// stepContext is the context a step of a group runs with: its own context's values (the
// request's correlation id and trace context, its logger, its principal), the group's
// transaction, and the group's cancellation (Done, Err): one step's context ending cancels
// no statement of the shared transaction. Its deadline is the earlier of its own and the
// group's.
type stepContext struct {
	group context.Context
	own   context.Context // the step's context without its cancellation
	st    *scopedTx
	end   time.Time
	ends  bool
}

func newStepContext(group, own context.Context, st *scopedTx) *stepContext {
	c := &stepContext{group: group, own: context.WithoutCancel(own), st: st}
	c.end, c.ends = group.Deadline()
	if d, ok := own.Deadline(); ok && (!c.ends || d.Before(c.end)) {
		c.end, c.ends = d, true
	}
	return c
}

func (c *stepContext) Deadline() (time.Time, bool) { return c.end, c.ends }
func (c *stepContext) Done() <-chan struct{}       { return c.group.Done() }
func (c *stepContext) Err() error                  { return c.group.Err() }

func (c *stepContext) Value(key any) any {
	if _, ok := key.(txKey); ok {
		return c.st
	}
	return c.own.Value(key)
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
func preloadRows(ctx context.Context, gtx *groupTx, st *scopedTx, order []*groupUnit) (*groupUnit, error) {
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
		return nil, nil
	}
	br := gtx.sendPending(ctx, b)
	var culprit *groupUnit
	err := func() error {
		if err := br.(*skipFirst).first(); err != nil {
			return err
		}
		for _, u := range sent {
			if u == nil {
				if _, err := br.Exec(); err != nil {
					return fmt.Errorf("postgres.InGroupTx: scope: %w", err)
				}
				continue
			}
			rows, err := u.pre.read(br.QueryRow())
			if err != nil {
				culprit = u
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
		return culprit, err
	}
	if ws != order[0].ws {
		gtx.pending = append(gtx.pending, queued{sql: groupScopeSQL, args: []any{order[0].ws.String()}})
	}
	return nil, nil
}

// runHooks runs the AfterCommit hooks of st, in order.
func runHooks(st *scopedTx) {
	for _, hook := range st.afterCommit {
		hook()
	}
}

// beginSQL begins a group transaction.
const beginSQL = "BEGIN ISOLATION LEVEL READ COMMITTED"

// boundedScopeSQL is scopeSQL that also bounds the row-lock waits of the rest of the
// transaction (groupLockTimeout).
var boundedScopeSQL = fmt.Sprintf(`SELECT set_config('app.workspace_id', $1, true), set_config('app.user_id', $2, true), `+
	`set_config('lock_timeout', '%dms', true)`, groupLockTimeout.Milliseconds())

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
		case scopeSQL, boundedScopeSQL:
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
				case groupScopeSQL, scopeSQL, boundedScopeSQL, beginSQL:
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

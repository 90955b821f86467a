package postgres_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/testwait"
)

// InGroupTx commits the steps waiting at the same time in one transaction, each under its
// own workspace's scope (its statements, and the ones it queues for the COMMIT, pass RLS for
// its workspace only); a failing step fails alone, and the others commit exactly once.
func TestInGroupTxCommitsConcurrentStepsTogether(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := db.Owner.Exec(ctx, `CREATE TABLE group_probe (workspace_id uuid NOT NULL, step int NOT NULL, at_commit bool NOT NULL);
		ALTER TABLE group_probe ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
		CREATE POLICY group_probe_tenant ON group_probe USING (workspace_id = app_workspace_id())
			WITH CHECK (workspace_id = app_workspace_id());
		GRANT SELECT, INSERT ON group_probe TO app_user;
		CREATE TABLE group_unique (k int PRIMARY KEY); INSERT INTO group_unique VALUES (1);
		GRANT SELECT, INSERT ON group_unique TO app_user`)
	require.NoError(t, err)
	tr := postgres.Transactor{Pool: db.App}
	wss := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}

	var hooks atomic.Int64
	boom := errors.New("boom")
	// step i writes a row now and one at the COMMIT, both under its workspace's scope, sees
	// none of the other workspaces' rows, and notes its transaction when it has committed.
	// With fail, it fails; with failQueued, a statement it queues for the COMMIT fails.
	step := func(i int, ws uuid.UUID, fail, failQueued bool, hold chan struct{}, committed func(int64)) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			tx, scope, err := postgres.TxFromContext(ctx)
			require.NoError(t, err)
			require.Equal(t, ws, scope.WorkspaceID)
			var txid int64
			var other int
			if err := tx.QueryRow(ctx, `SELECT txid_current(), (SELECT count(*) FROM group_probe WHERE workspace_id <> $1)`, ws).Scan(&txid, &other); err != nil {
				return err
			}
			require.Zero(t, other, "a step saw another workspace's rows")
			if _, err := tx.Exec(ctx, `INSERT INTO group_probe VALUES ($1, $2, false)`, ws, i); err != nil {
				return err
			}
			if i%2 == 0 {
				err = postgres.BeforeCommit(ctx, nil, `INSERT INTO group_probe VALUES ($1, $2, true)`, ws, i)
			} else {
				err = postgres.BeforeCommitWrite(ctx, "group_probe", nil, `INSERT INTO group_probe VALUES ($1, $2, true)`, ws, i)
			}
			if err != nil {
				return err
			}
			if failQueued {
				if err := postgres.BeforeCommitWrite(ctx, "group_unique", func(err error) error { return errors.Join(boom, err) },
					`INSERT INTO group_unique VALUES ($1)`, 1); err != nil {
					return err
				}
			}
			if err := postgres.AfterCommit(ctx, nil, func() { hooks.Add(1); committed(txid) }); err != nil {
				return err
			}
			if hold != nil {
				select {
				case <-hold:
				case <-ctx.Done(): // the test ended (its deferred cancel): let go of the connection
					return ctx.Err()
				}
			}
			if fail {
				return boom
			}
			return nil
		}
	}

	// round: holders steps hold every group transaction open; the waiting ones that arrive
	// meanwhile then commit together. Steps are numbered from base; the one at fail fails,
	// the one at failQueued queues a statement that fails.
	const holders = postgres.MaxLeaders
	const waiting = 28 - holders
	round := func(base, fail, failQueued int) ([]error, map[int64]int) {
		var mu sync.Mutex
		txids := map[int64]int{}
		committed := func(id int64) { mu.Lock(); txids[id]++; mu.Unlock() }
		hold := make(chan struct{})
		errs := make([]error, holders+waiting)
		var wg sync.WaitGroup
		for i := range holders {
			wg.Go(func() {
				errs[i] = tr.InGroupTx(ctx, wss[i%3], uuid.Nil, step(base+i, wss[i%3], false, false, hold, committed))
			})
		}
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state = 'idle in transaction'`, db.Name).Scan(&n))
			return n == holders
		}, 10*time.Second, 10*time.Millisecond)
		for i := holders; i < holders+waiting; i++ {
			wg.Go(func() {
				errs[i] = tr.InGroupTx(ctx, wss[i%3], uuid.Nil, step(base+i, wss[i%3], base+i == fail, base+i == failQueued, nil, committed))
			})
		}
		time.Sleep(200 * time.Millisecond) // let them queue
		close(hold)
		wg.Wait()
		return errs, txids
	}

	errs, txids := round(0, -1, -1)
	for i, err := range errs {
		require.NoError(t, err, "step %d", i)
	}
	require.EqualValues(t, holders+waiting, hooks.Load(), "one after-commit hook per committed step")
	// The waiting steps shared transactions: far fewer commits than steps.
	require.Less(t, len(txids), holders+waiting/2, "transactions of the %d steps: %v", holders+waiting, txids)

	errs, _ = round(100, 110, -1)
	for i, err := range errs {
		if 100+i == 110 {
			require.ErrorIs(t, err, boom)
			continue
		}
		require.NoError(t, err, "step %d", 100+i)
	}
	// A statement queued by a step in the middle of a group (sent with the next step's first
	// statement) fails: that step fails alone, with its statement's error, named.
	errs, _ = round(200, -1, 213)
	for i, err := range errs {
		if 200+i == 213 {
			require.ErrorIs(t, err, boom)
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "23505", pe.Code)
			continue
		}
		require.NoError(t, err, "step %d", 200+i)
	}

	// Every step but the failing one committed once, both rows, in its workspace.
	var rows, dups, failed int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT (step, at_commit)),
		count(*) FILTER (WHERE step = 110) FROM group_probe`).Scan(&rows, &dups, &failed))
	require.Equal(t, 2*(3*(holders+waiting)-2), rows)
	require.Zero(t, dups)
	require.Zero(t, failed)
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM group_probe WHERE step = 213`).Scan(&failed))
	require.Zero(t, failed)
	for _, i := range []int{0, 5, 27, 100, 109, 111, 127, 200, 212, 214, 227} {
		var n int
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM group_probe WHERE step = $1 AND workspace_id = $2`, i, wss[(i%100)%3]).Scan(&n))
		require.Equal(t, 2, n, "step %d", i)
	}
	require.EqualValues(t, 3*(holders+waiting)-2, hooks.Load(), "one after-commit hook per committed step")
}

// UpdateAtCommit's write reaches the row with the COMMIT, and not at all when the
// transaction rolls back.
func TestUpdateAtCommitWritesWithTheCommit(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ws := uuid.New()
	_, err := db.Owner.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'ws')`, ws)
	require.NoError(t, err)
	ops := postgres.NewOperations()
	op := domain.NewOperation(ws, uuid.Nil, "t", "t", uuid.New(), time.Now())
	tr := postgres.Transactor{Pool: db.App}
	require.NoError(t, tr.InTx(ctx, ws, uuid.Nil, func(ctx context.Context) error { return ops.Insert(ctx, op) }))
	start := func(ctx context.Context) error {
		_, err := ops.UpdateAtCommit(ctx, op.ID, func(o *domain.Operation) error {
			_, err := o.Start(time.Now())
			return err
		})
		if err != nil {
			return err
		}
		got, err := ops.Get(ctx, op.ID)
		require.NoError(t, err)
		require.Equal(t, domain.OperationPending, got.Status, "written with the COMMIT, not before")
		return nil
	}
	status := func() domain.OperationStatus {
		var got domain.Operation
		require.NoError(t, tr.InTx(ctx, ws, uuid.Nil, func(ctx context.Context) error {
			var err error
			got, err = ops.Get(ctx, op.ID)
			return err
		}))
		return got.Status
	}
	boom := errors.New("boom")
	require.ErrorIs(t, tr.InTx(ctx, ws, uuid.Nil, func(ctx context.Context) error { require.NoError(t, start(ctx)); return boom }), boom)
	require.Equal(t, domain.OperationPending, status(), "rolled back")
	require.NoError(t, tr.InTx(ctx, ws, uuid.Nil, start))
	require.Equal(t, domain.OperationRunning, status())
}

// A step waiting for a group leaves the queue when its context ends: InGroupTx returns at
// once with the context's error, its fn never runs (it is never taken into a group nor
// handed the lead), and the steps that waited with it commit.
func TestInGroupTxWaiterWhoseContextEndsLeaves(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := postgres.Transactor{Pool: db.App}
	ws := uuid.New()
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	defer release()
	occupyLeaders(t, ctx, tr, ws, &wg, hold)
	// Two waiters: the first one's context ends while it waits, the second's lives.
	var ran atomic.Bool
	cctx, ccancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		gone <- tr.InGroupTx(cctx, ws, uuid.Nil, func(context.Context) error { ran.Store(true); return nil })
	}()
	time.Sleep(100 * time.Millisecond) // queued first
	committed := make(chan error, 1)
	go func() {
		committed <- tr.InGroupTx(ctx, ws, uuid.Nil, func(ctx context.Context) error {
			_, _, err := postgres.TxFromContext(ctx)
			return err
		})
	}()
	time.Sleep(100 * time.Millisecond)
	ccancel()
	select {
	case err := <-gone:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(2 * time.Second):
		t.Fatal("a waiter whose context ended still waits")
	}
	release()
	select {
	case err := <-committed:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the waiter after it never committed")
	}
	require.False(t, ran.Load(), "the step whose context ended ran")
}

// No single step's cancellation ends its group: the step that leads a group (the first one
// queued) cancels its own context in the middle of its step, and the group still runs its
// statements and commits, every step of it, in one transaction.
func TestInGroupTxLeadersCancellationEndsNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := postgres.Transactor{Pool: db.App}
	ws := uuid.New()
	// Two holds: the first leader lets go first (its goroutine hands the lead to the first
	// step queued, which takes them all), the other after.
	holds := []chan struct{}{make(chan struct{}), make(chan struct{})}
	releases := []func(){sync.OnceFunc(func() { close(holds[0]) }), sync.OnceFunc(func() { close(holds[1]) })}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	defer releases[1]()
	defer releases[0]()
	occupyLeaders(t, ctx, tr, ws, &wg, holds...)
	// step notes its transaction after a statement; the first one cancels its own context
	// before it.
	const n = 8
	txids := make([]int64, n)
	errs := make([]error, n)
	step := func(i int, cancelOwn func()) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if cancelOwn != nil {
				cancelOwn()
			}
			tx, _, err := postgres.TxFromContext(ctx)
			if err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&txids[i])
		}
	}
	var steps sync.WaitGroup
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	steps.Go(func() { errs[0] = tr.InGroupTx(lctx, ws, uuid.Nil, step(0, lcancel)) })
	time.Sleep(100 * time.Millisecond) // queued first: it leads the next group
	for i := 1; i < n; i++ {
		steps.Go(func() { errs[i] = tr.InGroupTx(ctx, ws, uuid.Nil, step(i, nil)) })
	}
	time.Sleep(200 * time.Millisecond)
	releases[0]()
	steps.Wait()
	releases[1]()
	for i, err := range errs {
		require.NoError(t, err, "step %d", i)
		require.Equal(t, txids[0], txids[i], "step %d ran in the leader's group", i)
	}
}

// occupyLeaders starts postgres.MaxLeaders steps of ws on wg, the i-th holding its group
// until holds[i] is closed (the last hold for the steps beyond it), and waits (bounded) until
// each runs: every leader is busy, so the next InGroupTx queues.
func occupyLeaders(t *testing.T, ctx context.Context, tr postgres.Transactor, ws uuid.UUID, wg *sync.WaitGroup,
	holds ...chan struct{}) {
	t.Helper()
	leading := make(chan struct{}, postgres.MaxLeaders)
	for i := range postgres.MaxLeaders {
		hold := holds[min(i, len(holds)-1)]
		wg.Go(func() {
			assert.NoError(t, tr.InGroupTx(ctx, ws, uuid.Nil, func(ctx context.Context) error {
				leading <- struct{}{}
				select {
				case <-hold:
				case <-ctx.Done():
				}
				return nil
			}))
		})
	}
	for range postgres.MaxLeaders {
		testwait.Recv(t, leading, "a leader's step")
	}
}

package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// The steps of a group transaction whose locking reads are marked (port.LockPreloader) have
// them sent ahead, together: a group of such steps that read and write only their task and
// its operation costs two round trips whatever its size (the reads, then the writes with the
// COMMIT). A row that a step writes is read again by the steps after it, as written: no step
// gets a row as it was read ahead once the group changed it.
func TestInGroupTxPreloadsTheStepsLockingReads(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wss := []uuid.UUID{uuid.New(), uuid.New()}
	now := time.Now().UTC().Truncate(time.Microsecond)
	// Three tasks in the first workspace, one in the second.
	var all []domain.StoreVerification
	for i := range 4 {
		_, _, task := seedVerification(ctx, t, db, wss[i/3], now)
		all = append(all, task)
	}
	counter := &tripCounter{}
	pool := tracedPool(ctx, t, db, 8, counter)
	ops, tasks := postgres.NewOperations(), postgres.NewStoreVerifications()
	tr := postgres.Transactor{Pool: pool}

	// group runs step(task) for every task in one group transaction: steps that send
	// nothing hold every group's lead while the steps queue, then one of them lets go (its
	// goroutine hands the lead to the first step waiting, which takes them all), then the
	// others. It returns the round trips the group made. Every wait ends with ctx (the
	// test's end cancels it).
	group := func(step func(task domain.StoreVerification) func(ctx context.Context) error) int64 {
		holds := []chan struct{}{make(chan struct{}), make(chan struct{})}
		leading := make(chan struct{}, postgres.MaxLeaders)
		var wg sync.WaitGroup
		t.Cleanup(wg.Wait) // after ctx is cancelled: no step outlives the test
		for i := range postgres.MaxLeaders {
			hold := holds[min(i, 1)]
			wg.Go(func() {
				assert.NoError(t, tr.InGroupTx(ctx, wss[0], uuid.Nil, func(ctx context.Context) error {
					leading <- struct{}{}
					select {
					case <-hold:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}))
			})
		}
		for range postgres.MaxLeaders {
			select {
			case <-leading:
			case <-ctx.Done():
				t.Fatalf("the holding steps did not lead: %v", ctx.Err())
			}
		}
		before := counter.trips.Load()
		for _, task := range all {
			wg.Go(func() {
				assert.NoError(t, tr.InGroupTx(tasks.PreloadLocking(ctx, task.ID), task.WorkspaceID, task.ID, step(task)))
			})
		}
		time.Sleep(200 * time.Millisecond) // let them queue
		close(holds[0])
		time.Sleep(100 * time.Millisecond)
		close(holds[1])
		wg.Wait()
		return counter.trips.Load() - before
	}

	// Each step starts its task's operation: every read is taken from the ones sent ahead.
	trips := group(func(task domain.StoreVerification) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := tasks.UpdateAtCommit(port.LockingOperation(ctx), task.ID, func(v *domain.StoreVerification) error {
				return v.Start(now)
			})
			if err != nil {
				return err
			}
			_, err = ops.UpdateAtCommit(ctx, task.OperationID, func(o *domain.Operation) error {
				_, err := o.Start(now)
				return err
			})
			return err
		}
	})
	require.EqualValues(t, 2, trips, "the reads of every step in one round trip, the writes with the COMMIT")
	for _, task := range all {
		var status string
		var attempts int
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT t.status, t.attempts FROM store_verifications t WHERE t.id = $1`, task.ID).
			Scan(&status, &attempts))
		require.Equal(t, "running", status)
		require.Equal(t, 1, attempts)
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT status FROM operations WHERE id = $1`, task.OperationID).Scan(&status))
		require.Equal(t, "running", status)
	}

	// Each step of the first workspace also counts an attempt on the other tasks of its
	// workspace before its own: every count lands, whichever step wrote a row first.
	group(func(task domain.StoreVerification) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			for _, other := range all {
				if other.ID == task.ID || other.WorkspaceID != task.WorkspaceID {
					continue
				}
				// Read without a lock (the group holds it) and saved: the row read ahead
				// for the other task's step is stale from here on.
				v, err := tasks.Get(ctx, other.ID)
				if err != nil {
					return err
				}
				v.Attempts++
				if err := tasks.Save(ctx, v); err != nil {
					return err
				}
			}
			_, err := tasks.Update(port.LockingOperation(ctx), task.ID, func(v *domain.StoreVerification) error {
				v.Attempts++
				return nil
			})
			return err
		}
	})
	for i, task := range all {
		var attempts int
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT attempts FROM store_verifications WHERE id = $1`, task.ID).Scan(&attempts))
		if i < 3 {
			require.Equal(t, 1+3, attempts, "task %d: its own count and the two others'", i)
		} else {
			require.Equal(t, 1+1, attempts, "task %d: alone in its workspace", i)
		}
	}
}

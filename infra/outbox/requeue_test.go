package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// Requeue and Take act on an event only under the claim that published it: once its lease
// ran out and another claim took it, the first claim's consumer can neither hand it back
// (which would release the second claim's lease and let a third delivery run beside it)
// nor take it (its handler must not run). The claim holding it does both.
func TestRequeueAndTakeNeedTheClaim(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	id := bulkInsert(t, db, []uuid.UUID{ws}, 1)[0]
	ctx := context.Background()
	d, err := NewDispatcher(fastConfig(), db.App, PublisherMap{}, nil, nil)
	require.NoError(t, err)
	rows, err := d.claim(ctx, []uuid.UUID{ws}, "first/1", 10)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.NoError(t, Take(ctx, db.App, ws, id.String(), "first/1", time.Minute), "the claim holds it")

	// The first claim's lease runs out (time travel), a second claim takes the event.
	_, err = db.Owner.Exec(ctx, `UPDATE outbox_events SET locked_until = now() WHERE id = $1`, id)
	require.NoError(t, err)
	require.ErrorIs(t, Take(ctx, db.App, ws, id.String(), "first/1", time.Minute), ErrClaimLost, "its lease ran out")
	rows, err = d.claim(ctx, []uuid.UUID{ws}, "second/1", 10)
	require.NoError(t, err)
	require.Len(t, rows, 1)

	lease := func() (by string, until time.Duration, attempt string) {
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT coalesce(locked_by, ''),
			coalesce(extract(epoch FROM locked_until - now()), 0)::float8 * interval '1 second', coalesce(metadata->>'job_attempt', '')
			FROM outbox_events WHERE id = $1`, id).Scan(&by, &until, &attempt))
		return by, until, attempt
	}
	err = Requeue(ctx, db.App, ws, id.String(), "first/1", time.Second, JobDelivery{Attempt: 2})
	require.ErrorIs(t, err, ErrClaimLost)
	by, _, attempt := lease()
	require.Equal(t, "second/1", by, "the stale claim's requeue leaves the second claim's lease alone")
	require.Empty(t, attempt)
	require.ErrorIs(t, Take(ctx, db.App, ws, id.String(), "first/1", time.Minute), ErrClaimLost)
	require.ErrorIs(t, Requeue(ctx, db.App, ws, id.String(), "", time.Second, JobDelivery{Attempt: 2}), ErrClaimLost,
		"no claim token, no requeue")

	require.NoError(t, Take(ctx, db.App, ws, id.String(), "second/1", 5*time.Minute))
	by, until, _ := lease()
	require.Equal(t, "second/1", by)
	require.Greater(t, until, 4*time.Minute, "taken: the lease runs from now for the transport's lease")
	require.NoError(t, Requeue(ctx, db.App, ws, id.String(), "second/1", time.Second, JobDelivery{Attempt: 2}))
	by, _, attempt = lease()
	require.Empty(t, by, "handed back: unleased")
	require.Equal(t, "2", attempt)
}

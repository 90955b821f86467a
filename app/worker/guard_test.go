package worker_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// guardsOf is a TaskGuards whose Check answers err for every task.
type guardsOf struct{ err error }

func (g guardsOf) Check(context.Context, string, uuid.UUID) error             { return g.err }
func (g guardsOf) Unfinished(context.Context, string, uuid.UUID) (int, error) { return 0, nil }

// A declared guard that does not hold refuses the task in its begin step with the guard's
// error, before the flow's Begin and without a call; one that holds changes nothing.
func TestLifecycleGuardRefusesBeforeBegin(t *testing.T) {
	l := newLifecycle(t)
	began := 0
	l.env.Deps.Guards = guardsOf{err: domain.ErrPublicationUnpublished}
	f := l.flow(t, func() (string, error) { return "done", nil }, func(*domain.MaterialTransfer) error { began++; return nil })
	tr, job := l.task(t)
	require.True(t, worker.IsPermanent(f.Handle(context.Background(), job)))
	got, op := l.state(t, tr)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "PUBLICATION_UNPUBLISHED", got.ErrorCode)
	require.Equal(t, domain.OperationFailed, op.Status)
	require.Zero(t, began)
	require.Zero(t, l.calls)

	l.env.Deps.Guards = guardsOf{}
	f = l.flow(t, func() (string, error) { return "done", nil }, func(*domain.MaterialTransfer) error { began++; return nil })
	tr, job = l.task(t)
	require.NoError(t, f.Handle(context.Background(), job))
	got, _ = l.state(t, tr)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, 1, began)
}

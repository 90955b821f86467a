package domain

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// An operation's start publishes nothing; its finish carries when it started (started_at),
// and only when it did.
func TestOperationFinishedCarriesItsStart(t *testing.T) {
	created := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	started := created.Add(time.Minute).In(time.FixedZone("X", 3600))
	op := NewOperation(uuid.New(), uuid.New(), "publication", "publication", uuid.New(), created)
	_, ok := op.RunningSince()
	require.False(t, ok, "pending")

	changed, err := op.Start(started)
	require.NoError(t, err)
	require.True(t, changed)
	again, err := op.Start(started.Add(time.Hour))
	require.NoError(t, err)
	require.False(t, again, "a second start changes nothing")
	since, ok := op.RunningSince()
	require.True(t, ok)
	require.True(t, started.Equal(since))

	before := op
	require.NoError(t, op.Succeed(json.RawMessage(`{}`), started.Add(time.Minute)))
	ev := op.Finished(before)
	require.Equal(t, OperationSucceeded, ev.Status)
	require.Equal(t, 3, ev.Version)
	require.NotNil(t, ev.StartedAt)
	require.True(t, started.Equal(*ev.StartedAt))
	require.Equal(t, time.UTC, ev.StartedAt.Location(), "RFC 3339 in UTC")
	raw, err := json.Marshal(ev)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"started_at":"2026-12-03T09:01:00Z"`)

	// Failed without having started: no started_at.
	never := NewOperation(uuid.New(), uuid.New(), "publication", "publication", uuid.New(), created)
	before = never
	require.NoError(t, never.Fail("DELIVERY_EXHAUSTED", "gave up", created.Add(time.Hour)))
	ev = never.Finished(before)
	require.Nil(t, ev.StartedAt)
	require.Equal(t, 2, ev.Version)
	raw, err = json.Marshal(ev)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "started_at")
}

// TestCancelOnlyBeforeStart: a pending task and operation end cancelled (terminal, one
// version more); a running one is refused OPERATION_RUNNING, a finished one stays as it is.
func TestCancelOnlyBeforeStart(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	task := NewTask(NewID(), NewID(), NewID(), now)
	require.NoError(t, task.Cancel(now))
	require.Equal(t, TaskCancelled, task.Status)
	require.True(t, task.Status.Terminal())
	require.Equal(t, 2, task.Version)
	require.ErrorIs(t, task.Start(now), ErrTaskFinished, "a cancelled task never starts")
	require.ErrorIs(t, task.Cancel(now), ErrTaskFinished)

	running := NewTask(NewID(), NewID(), NewID(), now)
	require.NoError(t, running.Start(now))
	require.ErrorIs(t, running.Cancel(now), ErrTaskStarted)
	require.Equal(t, TaskRunning, running.Status)

	op := NewOperation(NewID(), NewID(), OpPublication, "publication", NewID(), now)
	before := op
	require.NoError(t, op.Cancel(now))
	require.Equal(t, OperationCancelled, op.Status)
	ev := op.Finished(before)
	require.Equal(t, OperationCancelled, ev.Status)
	require.Nil(t, ev.StartedAt, "it never started")
	require.ErrorIs(t, op.Cancel(now), ErrOperationFinished)

	started := NewOperation(NewID(), NewID(), OpPublication, "publication", NewID(), now)
	_, err := started.Start(now)
	require.NoError(t, err)
	require.ErrorIs(t, started.Cancel(now), ErrTaskStarted)
}

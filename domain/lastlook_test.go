package domain_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
)

func TestLastLookRequestedIsItsRequestWithTheHeldFailure(t *testing.T) {
	req := domain.PublicationRequested{PublicationID: uuid.New(), OperationID: uuid.New(), ProductRevision: 3}
	e := domain.LastLookRequested{Request: req, Code: "DELIVERY_EXHAUSTED", Message: "m"}
	require.Equal(t, req.EventType(), e.EventType())
	require.Equal(t, req.AggregateType(), e.AggregateType())
	require.Equal(t, req.AggregateID(), e.AggregateID())
	raw, err := json.Marshal(e)
	require.NoError(t, err)
	var back domain.PublicationRequested
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, req, back, "a worker reads it as its request")
	var look struct {
		L domain.LastLook `json:"last_look"`
	}
	require.NoError(t, json.Unmarshal(raw, &look))
	require.Equal(t, domain.LastLook{Code: "DELIVERY_EXHAUSTED", Message: "m"}, look.L)
}

// A task's last look holds the first failure asked for; a look that completed finding the
// work not done lets it be recorded; while none completed, the look is asked again until the
// task is too old, and never then without a completed look.
func TestTaskLookDecidesOnlyAfterACompletedLook(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	task := domain.NewTask(uuid.New(), uuid.New(), uuid.New(), now)
	require.NoError(t, task.Start(now))
	require.False(t, task.Look.Asked())
	require.NoError(t, task.AskLook("JOB_STALLED", "m", now))
	require.NoError(t, task.AskLook("DELIVERY_EXHAUSTED", "n", now))
	require.Equal(t, "JOB_STALLED", task.Look.Code, "the first failure asked for is held")
	require.True(t, task.Look.Pending())

	d, err := task.ReconcileLook(time.Hour, time.Time{}, now.Add(30*time.Minute))
	require.NoError(t, err)
	require.Equal(t, domain.LookAgain, d)
	require.Equal(t, 1, task.Redeliveries, "a look asked again backs off like a free delivery")

	d, err = task.ReconcileLook(time.Hour, time.Time{}, now.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, domain.LookTooOld, d)

	require.NoError(t, task.Looked(domain.LookNotDone, now.Add(time.Hour)))
	require.False(t, task.Look.Pending())
	d, err = task.ReconcileLook(time.Hour, time.Time{}, now.Add(2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, domain.LookFail, d, "a completed look decides, however old the task")

	require.NoError(t, task.Looked(domain.LookDone, now.Add(2*time.Hour)))
	d, err = task.ReconcileLook(time.Hour, time.Time{}, now.Add(3*time.Hour))
	require.NoError(t, err)
	require.Equal(t, domain.LookAgain, d, "a look that found the work done records it when asked again")

	require.NoError(t, task.Fail("X", "m", now))
	_, err = task.ReconcileLook(time.Hour, time.Time{}, now)
	require.ErrorIs(t, err, domain.ErrTaskFinished)
	require.ErrorIs(t, task.AskLook("X", "m", now), domain.ErrTaskFinished)
}

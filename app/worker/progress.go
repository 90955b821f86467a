package worker

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/domain"
)

// errNoProgress: the operation keeps its last progress (reported less than
// domain.ProgressInterval ago, or not running); nothing is written.
var errNoProgress = errors.New("worker: progress not reported")

// ReportProgress records p as the progress of a running operation and publishes
// operation.progressed, in ctx's transaction, unless the operation reported less than
// domain.ProgressInterval ago (then nothing is written). A long flow calls it from the
// transactions that record its steps, no more often than it wants to pay a row lock and an
// update of the operation: ProgressGate decides that without a read.
func (d Deps) ReportProgress(ctx context.Context, operationID uuid.UUID, p domain.Progress) error {
	now := d.Now()
	op, err := d.Operations.Update(ctx, operationID, func(o *domain.Operation) error {
		if !o.ReportProgress(p, now) {
			return errNoProgress
		}
		return nil
	})
	if errors.Is(err, errNoProgress) {
		return nil
	}
	if err != nil {
		return err
	}
	return d.Events.Publish(ctx, op.Progressed())
}

// ProgressGate paces one delivery's progress reports: Due reports whether
// domain.ProgressInterval has passed since the last report it allowed. Not safe for
// concurrent use (one per delivery).
type ProgressGate struct {
	last time.Time
}

// Due reports whether a report is due at now, and if so counts it as made.
func (g *ProgressGate) Due(now time.Time) bool {
	if !g.last.IsZero() && now.Sub(g.last) < domain.ProgressInterval {
		return false
	}
	g.last = now
	return true
}

package worker

import (
	"context"
	"errors"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// StoreBudget keeps each store's requests to its marketplace within the store's budget:
// its own limit (domain.Store.RateLimit), else its platform's (Platforms, STORE_RATE_LIMITS),
// else none. The buckets are shared by every worker process (port.RateBuckets over Redis).
// A flow takes a job's tokens before its task starts (Wait, in Flow.Begin): a job over
// budget waits, delayed by the transport, spending neither an attempt nor a snooze. An
// upstream 429 lowers the store's budget for Lowered (Limited, port.RateBuckets.Lower). Safe
// for concurrent use; a nil or zero StoreBudget (no Buckets) limits nothing.
type StoreBudget struct {
	Buckets port.RateBuckets
	// Platforms are the budgets by platform.
	Platforms map[string]domain.RateLimit
	// Lowered is how long an upstream 429 halves a store's budget. Default one minute.
	Lowered time.Duration
	// Waited, when set, is told of every take that must wait (by the store's platform), with
	// the job's context; it must not block for long (the job waits for it).
	Waited func(ctx context.Context, platform string)
}

// Limit is store's budget: its own, else its platform's; the zero RateLimit is none.
func (b *StoreBudget) Limit(store domain.Store) domain.RateLimit {
	if !store.RateLimit.IsZero() {
		return store.RateLimit
	}
	if b == nil {
		return domain.RateLimit{}
	}
	return b.Platforms[store.Platform]
}

// Wait takes n tokens (n requests) of store's budget, for Flow.Begin before it writes
// anything: nil when they were taken; over budget, an error that makes the job wait (see
// Flow.Begin). A begin step that runs again (group commit) takes them again.
func (b *StoreBudget) Wait(ctx context.Context, store domain.Store, n int) error {
	limit := b.Limit(store)
	if b == nil || b.Buckets == nil || limit.IsZero() {
		return nil
	}
	wait, err := b.Buckets.Take(ctx, storeBucket(store), limit, n)
	switch {
	case err != nil:
		return err
	case wait > 0:
		if b.Waited != nil {
			b.Waited(ctx, store.Platform)
		}
		return budgetWait{wait}
	}
	return nil
}

// Limited lowers store's budget when err, of a call to its marketplace, is its 429
// (port.ErrPlatformRateLimited); a budget that cannot be lowered changes nothing else.
func (b *StoreBudget) Limited(ctx context.Context, store domain.Store, err error) {
	limit := b.Limit(store)
	if b == nil || b.Buckets == nil || limit.IsZero() || !errors.Is(err, port.ErrPlatformRateLimited) {
		return
	}
	d := b.Lowered
	if d <= 0 {
		d = time.Minute
	}
	_ = b.Buckets.Lower(ctx, storeBucket(store), limit, d)
}

func storeBucket(s domain.Store) string { return "store:" + s.ID.String() }

// budgetWait is a job over its store's budget (Wait): its task was not started; the job
// waits delay (decide turns it into a SnoozeError with Wait set).
type budgetWait struct{ delay time.Duration }

func (e budgetWait) Error() string {
	return "over the store's rate limit: waiting " + e.delay.String()
}

func isBudgetWait(err error) bool {
	var w budgetWait
	return errors.As(err, &w)
}

package auth

import (
	"context"
	"errors"
	"runtime"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/listingkit/listing/domain"
)

// HashSlots bounds how many password hashes a process computes at once. Each argon2id hash
// holds its Params.Memory (64 MiB with DefaultHashParams) while it runs, so n slots bound
// that memory to n × 64 MiB whatever the traffic; requests beyond the bound wait a little,
// then are refused. It is safe for concurrent use; a process shares one.
type HashSlots struct {
	sem  *semaphore.Weighted
	wait time.Duration
}

// DefaultHashWait is how long Acquire waits for a slot when NewHashSlots is given none.
const DefaultHashWait = 2 * time.Second

// NewHashSlots returns n slots (n <= 0: runtime.NumCPU()) for which Acquire waits up to
// wait (wait <= 0: DefaultHashWait).
func NewHashSlots(n int, wait time.Duration) *HashSlots {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	if wait <= 0 {
		wait = DefaultHashWait
	}
	return &HashSlots{sem: semaphore.NewWeighted(int64(n)), wait: wait}
}

// Acquire takes a slot, waiting up to the configured wait for one. When none frees up in
// time it returns domain.ErrServiceBusy with a RetryAfter of one second; when ctx ends
// first, ctx's error. On success the caller calls release exactly once, after its hash.
func (s *HashSlots) Acquire(ctx context.Context) (release func(), err error) {
	release = func() { s.sem.Release(1) }
	// A free slot is taken at once, however late this goroutine runs after the wait began.
	if s.sem.TryAcquire(1) {
		return release, nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.wait)
	defer cancel()
	if err := s.sem.Acquire(wctx, 1); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, domain.ErrServiceBusy.WithMessage("too many password checks are running; retry later").
				WithRetryAfter(time.Second)
		}
		return nil, err
	}
	return release, nil
}

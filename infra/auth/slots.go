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
// then are refused. A quarter of the slots (rounded up; none when n is 1) is reserved for
// Acquire: AcquireShared, which strangers' requests use (register, a login from a client
// the account does not know), never takes them, so those requests cannot turn a known
// client's login into SERVICE_BUSY. It is safe for concurrent use; a process shares one.
type HashSlots struct {
	shared, reserved *semaphore.Weighted
	wait             time.Duration
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
	reserved := 0
	if n > 1 {
		reserved = (n + 3) / 4
	}
	return &HashSlots{shared: semaphore.NewWeighted(int64(n - reserved)), reserved: semaphore.NewWeighted(int64(reserved)), wait: wait}
}

// errBusy is the refusal of a request that found no slot in time.
var errBusy = domain.ErrServiceBusy.WithMessage("too many password checks are running; retry later").
	WithRetryAfter(time.Second)

// Acquire takes any slot, the reserved ones included, waiting up to the configured wait for
// one. When none frees up in time it returns domain.ErrServiceBusy with a RetryAfter of one
// second; when ctx ends first, ctx's error. On success the caller calls release exactly
// once, after its hash.
func (s *HashSlots) Acquire(ctx context.Context) (release func(), err error) {
	deadline := time.Now().Add(s.wait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.shared.TryAcquire(1) {
			return func() { s.shared.Release(1) }, nil
		}
		if s.reserved.TryAcquire(1) {
			return func() { s.reserved.Release(1) }, nil
		}
		if !time.Now().Before(deadline) {
			return nil, errBusy
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// AcquireShared is Acquire without the reserved slots.
func (s *HashSlots) AcquireShared(ctx context.Context) (release func(), err error) {
	release = func() { s.shared.Release(1) }
	// A free slot is taken at once, however late this goroutine runs after the wait began.
	if s.shared.TryAcquire(1) {
		return release, nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.wait)
	defer cancel()
	if err := s.shared.Acquire(wctx, 1); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, errBusy
		}
		return nil, err
	}
	return release, nil
}

package config

import (
	"fmt"
	"time"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/jobs"
)

// LockedCall is an external call a worker makes while it holds a job: the setting that
// bounds one such call and its value.
type LockedCall struct {
	Setting string
	Timeout time.Duration
}

// LockedCalls lists the time-outs of every external call a worker makes while holding a job:
// the marketplace gateway (PLATFORM_TIMEOUT), the AI provider (AI_TIMEOUT) and a material
// download (FETCH_TIMEOUT).
//
// The BullMQ job lock (JOB_LOCK_DURATION) does not bound them: the call fence does
// (worker.Flow.CallTimeout, model/README.md property 4). A flow whose call changes something
// upstream records on its task, as it starts it, the instant by which the call ends, and
// runs it under that deadline; a delivery that finds the task running before that instant
// waits until it passed, spending no attempt. A worker that dies with a call in flight thus
// lets the stalled check hand its job to another worker as soon as its lock ran out (the
// lock is renewed at half of it while the worker lives), and that worker runs the job only
// once the dead worker's call can no longer land: it then finds the call's effect (a
// created product, by the deduplication key or its last look) or none, never a call beside
// its own. The lock can be short, whatever the calls' time-outs.
func (c Config) LockedCalls() []LockedCall {
	return []LockedCall{
		{Setting: "PLATFORM_TIMEOUT", Timeout: c.PlatformTimeout},
		{Setting: "AI_TIMEOUT", Timeout: c.AITimeout},
		{Setting: "FETCH_TIMEOUT", Timeout: c.FetchTimeout},
	}
}

// StopWithinBound checks the stop bound: a worker that stops lets its calls in flight end
// and records them before it gives anything back, so WORKER_STOP_TIMEOUT must be at least
// the longest call's time-out plus the record step's bound (worker.RecordRetryBudget: the
// record step, its retries included, gives up once it is spent, whatever the database does).
// A shorter bound would cut a call short at shutdown: its job is then left to its lock (not
// handed back), so nothing runs twice, but the work is lost and done again later.
func StopWithinBound(stop time.Duration, calls []LockedCall) error {
	longest := longestCall(calls)
	if least := longest.Timeout + worker.RecordRetryBudget; stop < least {
		return fmt.Errorf("WORKER_STOP_TIMEOUT (%s) must be at least %s: the longest call's time-out (%s, %s) plus the "+
			"record step's bound, retries included (%s), so that a stopping worker finishes and records the calls in flight",
			stop, least, longest.Setting, longest.Timeout, worker.RecordRetryBudget)
	}
	return nil
}

// MemoryLease is the memory transport's lease: a job taken holds its outbox event for it,
// and its handler runs within four fifths of it (jobs.HandlerTimeout), which covers the
// longest call's time-out plus the record step's retries, so that no other claim delivers
// the event while the handler lives. It is JOB_LOCK_DURATION, or the least lease (in whole
// seconds) that covers them when JOB_LOCK_DURATION is shorter (the lock of BullMQ is renewed;
// the lease is not).
func (c Config) MemoryLease() time.Duration {
	need := longestCall(c.LockedCalls()).Timeout + worker.RecordRetryBudget
	if jobs.HandlerTimeout(c.JobLockDuration) >= need {
		return c.JobLockDuration
	}
	// The least lease whose four fifths cover need, in whole seconds rounded up.
	return ((need*5+3)/4 + time.Second - 1).Truncate(time.Second)
}

// longestCall returns the call of calls with the longest time-out.
func longestCall(calls []LockedCall) LockedCall {
	var longest LockedCall
	for _, call := range calls {
		if call.Timeout > longest.Timeout {
			longest = call
		}
	}
	return longest
}

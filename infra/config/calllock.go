package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/jobs"
)

// LockedCall is an external call a worker makes while it holds a BullMQ job's lock: the
// setting that bounds one such call and its value.
type LockedCall struct {
	Setting string
	Timeout time.Duration
}

// LockedCalls lists the time-outs of every external call a worker makes while holding a job's
// lock: the marketplace gateway (PLATFORM_TIMEOUT), the AI provider (AI_TIMEOUT) and a
// material download (FETCH_TIMEOUT).
func (c Config) LockedCalls() []LockedCall {
	return []LockedCall{
		{Setting: "PLATFORM_TIMEOUT", Timeout: c.PlatformTimeout},
		{Setting: "AI_TIMEOUT", Timeout: c.AITimeout},
		{Setting: "FETCH_TIMEOUT", Timeout: c.FetchTimeout},
	}
}

// CallWithinLock checks the rule of model/README.md (property 4) for each call: its time-out
// is at most half the job lock, 2 × timeout <= lock. A worker renews its job's lock every
// lock/2, so one that dies leaves the lock running for at least lock/2; its call in flight
// lands within its time-out or never. Only once the lock ran out may the stalled check hand
// the job to another worker, which then finds the first call's effect (or none) and cannot
// run beside it. A longer time-out lets the dead worker's call land after the second worker
// looked for it: a gateway that ignores Idempotency-Key then creates a second product, an AI
// provider bills a second run. The error names every setting that breaks the rule.
func CallWithinLock(lock time.Duration, calls []LockedCall) error {
	var errs []error
	for _, call := range calls {
		if call.Timeout > lock/2 {
			errs = append(errs, fmt.Errorf("%s (%s) must be at most half of JOB_LOCK_DURATION (%s): a worker that dies "+
				"with that call in flight leaves its job locked for only JOB_LOCK_DURATION/2, after which the job may run "+
				"again while the call can still land; lower %s or raise JOB_LOCK_DURATION to at least %s",
				call.Setting, call.Timeout, lock, call.Setting, 2*call.Timeout))
		}
	}
	return errors.Join(errs...)
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

// CallWithinLease checks the memory transport's rule: a job taken holds its outbox event
// for JOB_LOCK_DURATION (the lease), and its handler runs within four fifths of it
// (jobs.HandlerTimeout), which must cover the longest call's time-out plus the record
// step's retries; every call then ends while the lease holds, even when the process dies,
// and no other claim delivers the event beside it.
func CallWithinLease(lease time.Duration, calls []LockedCall) error {
	longest := longestCall(calls)
	need := longest.Timeout + worker.RecordRetryBudget
	if handler := jobs.HandlerTimeout(lease); handler < need {
		// The least lease whose four fifths cover need, in whole seconds rounded up.
		least := ((need*5+3)/4 + time.Second - 1).Truncate(time.Second)
		return fmt.Errorf("with QUEUE_TRANSPORT=memory, JOB_LOCK_DURATION (%s) is the lease a job holds its outbox event "+
			"for, and its handler runs within four fifths of it (%s), which must cover the longest call's time-out "+
			"(%s, %s) plus the record step's retries (%s); raise JOB_LOCK_DURATION to at least %s",
			lease, handler, longest.Setting, longest.Timeout, worker.RecordRetryBudget, least)
	}
	return nil
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

package config

import (
	"fmt"
	"time"
)

// PlatformCallTimeout is the marketplace gateway adapter's time-out per call (the default of
// infra/platform.Config.Timeout, which cmd/app does not change).
const PlatformCallTimeout = 15 * time.Second

// CallWithinLock checks the rule that keeps a second platform product from appearing when the
// gateway ignores Idempotency-Key (model/README.md, property 4): a worker that dies with a call
// in flight leaves its job locked for at least lock/2 (the lock is renewed every lock/2), and the
// call is over within its time-out; the job may be delivered again only after the lock ran out,
// so every call must end first: timeout <= lock/2. calls names each time-out it checks.
//
// Validate does not call it yet: the AI provider's time-out (120s) exceeds the default lock's
// half (15s), and tests/liveness runs with a 2s lock against the 15s platform time-out; wiring
// it needs a PLATFORM_TIMEOUT / AI_TIMEOUT setting or a per-queue lock (model/README.md).
func CallWithinLock(lock time.Duration, calls map[string]time.Duration) error {
	for name, timeout := range calls {
		if timeout > lock/2 {
			return fmt.Errorf("JOB_LOCK_DURATION (%s) must be at least twice %s (%s): a job whose worker died could run again while that call is in flight",
				lock, name, timeout)
		}
	}
	return nil
}

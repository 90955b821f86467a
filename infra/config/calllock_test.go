package config

import (
	"strings"
	"testing"
	"time"
)

func TestCallWithinLock(t *testing.T) {
	calls := map[string]time.Duration{"the marketplace call time-out": PlatformCallTimeout}
	if err := CallWithinLock(30*time.Second, calls); err != nil {
		t.Fatalf("30s lock, 15s call: %v", err)
	}
	err := CallWithinLock(20*time.Second, calls)
	if err == nil || !strings.Contains(err.Error(), "JOB_LOCK_DURATION") {
		t.Fatalf("20s lock, 15s call: want a refusal, got %v", err)
	}
}

// Package testwait bounds what a test waits on, so that a test whose other side never
// answers fails in seconds with a message instead of hanging until the suite's timeout.
//
// The other side of the wait must not outlive the test either: a goroutine the test starts
// waits on t.Context() (cancelled when the test ends, before its clean-ups) besides whatever
// channel the test would close.
package testwait

import (
	"testing"
	"time"
)

// Timeout bounds Recv.
const Timeout = 30 * time.Second

// Recv receives from ch and returns the value; when nothing arrives within Timeout, or the
// test's context ends first, it fails t at once naming what it waited for.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("testwait: %s: nothing after %s", what, Timeout)
	case <-t.Context().Done():
		t.Fatalf("testwait: %s: the test ended first", what)
	}
	panic("unreachable")
}

package httpapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type fakeClock struct {
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.slept = append(c.slept, d)
	return nil
}

func newTestGuard() (*loginGuard, *fakeClock) {
	c := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return newLoginGuard(LoginLimits{Now: c.Now, Sleep: c.Sleep}), c
}

// try runs one login through g and reports whether it reached the password check.
func try(t *testing.T, g *loginGuard, email, addr string, fails bool) (checked bool, retryAfter time.Duration) {
	t.Helper()
	done, retry, err := g.admit(context.Background(), email, addr)
	require.NoError(t, err)
	if done == nil {
		require.Positive(t, retry)
		return false, retry
	}
	done(fails)
	return true, 0
}

func TestLoginGuardHoldsOneAddressToItsBudget(t *testing.T) {
	g, c := newTestGuard()
	checked := 0
	for range 50 {
		if ok, _ := try(t, g, "Victim@example.com", "192.0.2.1", true); ok {
			checked++
		}
		c.now = c.now.Add(time.Second)
	}
	require.Equal(t, 5, checked, "password checks of one address for one account in the window")
	_, retry := try(t, g, "victim@example.com ", "192.0.2.1", false)
	require.InDelta(t, (15*time.Minute - 50*time.Second).Seconds(), retry.Seconds(), 1, "Retry-After: the oldest failure leaves the window")
	// another account from the same address is not held back
	ok, _ := try(t, g, "other@example.com", "192.0.2.1", true)
	require.True(t, ok)
	// the owner from an address that has not failed: checked at once (5 failures: no delay yet)
	ok, _ = try(t, g, "victim@example.com", "198.51.100.9", false)
	require.True(t, ok)
	require.Empty(t, c.slept)
	// once the window passed, the address may try again
	c.now = c.now.Add(15 * time.Minute)
	ok, _ = try(t, g, "victim@example.com", "192.0.2.1", true)
	require.True(t, ok)
}

func TestLoginGuardSlowsAnAccountDownButNeverRefusesAFreshAddress(t *testing.T) {
	g, c := newTestGuard()
	checked := 0
	// 200 addresses, 10 tries each, one round after another, a second apart
	for range 10 {
		for i := range 200 {
			if ok, _ := try(t, g, "victim@example.com", fmt.Sprintf("10.0.0.%d", i), true); ok {
				checked++
			}
			c.now = c.now.Add(time.Second / 10)
		}
	}
	// Budget: each address's first try (200), then addresses that failed take turns at most
	// one per MaxDelay once the account is slowed down: 200 s of rounds / 4 s ≤ 50 more, and
	// never more than 5 per address.
	require.LessOrEqual(t, checked, 200+50+g.cfg.DelayAfter)
	t.Logf("%d of 2000 tries reached the password check", checked)
	before := len(c.slept)
	ok, _ := try(t, g, "victim@example.com", "203.0.113.7", false)
	require.True(t, ok, "the owner's login from an address that has not failed is never refused")
	require.Len(t, c.slept, before+1)
	require.Equal(t, 4*time.Second, c.slept[len(c.slept)-1], "it waits MaxDelay at most")

	// the delay grows from Delay, doubling
	require.Equal(t, time.Duration(0), g.delay(10))
	require.Equal(t, 250*time.Millisecond, g.delay(11))
	require.Equal(t, 500*time.Millisecond, g.delay(12))
	require.Equal(t, 4*time.Second, g.delay(50))
}

func TestLoginGuardCountsConcurrentLoginsAndForgetsSuccesses(t *testing.T) {
	g, _ := newTestGuard()
	var dones []func(bool)
	for range 20 { // admitted before any of them ended
		done, _, _ := g.admit(context.Background(), "a@example.com", "192.0.2.1")
		if done != nil {
			dones = append(dones, done)
		}
	}
	require.Len(t, dones, 5, "in-flight logins count against the budget")
	for _, d := range dones {
		d(false) // all succeeded
	}
	for range 5 {
		ok, _ := try(t, g, "a@example.com", "192.0.2.1", false)
		require.True(t, ok, "a successful login spends nothing")
	}
}

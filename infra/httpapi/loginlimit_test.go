package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// fakeClock is a clock whose sleeps are recorded, not slept. Safe for concurrent use.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	return nil
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newTestGuards returns n guards (n API processes) sharing one store in a database of the
// test's own, and their clock.
func newTestGuards(t *testing.T, n int) ([]*loginGuard, *fakeClock) {
	db := pgtest.New(t)
	c := &fakeClock{now: time.Now().UTC().Truncate(time.Second)}
	var gs []*loginGuard
	for range n {
		gs = append(gs, newLoginGuard(LoginLimits{Now: c.Now, Sleep: c.Sleep}, postgres.LoginLimits{Pool: db.App}, slog.Default()))
	}
	return gs, c
}

// try runs one login through g and reports whether it reached the password check; ok
// records it as successful (its client becomes known).
func try(t *testing.T, g *loginGuard, email, addr string, ok bool) (checked bool, retryAfter time.Duration) {
	t.Helper()
	a, retry, err := g.admit(context.Background(), email, addr, nil)
	require.NoError(t, err)
	if a == nil {
		require.Positive(t, retry)
		return false, retry
	}
	a.done(context.Background(), !ok)
	if ok {
		_, err := a.succeeded(context.Background(), "")
		require.NoError(t, err)
	}
	return true, 0
}

func TestLoginGuardHoldsOneAddressToItsBudget(t *testing.T) {
	t.Parallel()
	gs, c := newTestGuards(t, 1)
	g := gs[0]
	checked := 0
	for range 50 {
		if ok, _ := try(t, g, "victim@example.com", "192.0.2.1", false); ok {
			checked++
		}
		c.advance(time.Second)
	}
	require.Equal(t, 5, checked, "password checks of one address for one account in the window")
	_, retry := try(t, g, "victim@example.com", "192.0.2.1", true)
	require.InDelta(t, (15*time.Minute - 50*time.Second).Seconds(), retry.Seconds(), 1, "Retry-After: the oldest failure leaves the window")
	// another account from the same address is not held back
	ok, _ := try(t, g, "other@example.com", "192.0.2.1", false)
	require.True(t, ok)
	// the owner from an address that has not failed: checked at once (5 failures: no delay yet)
	ok, _ = try(t, g, "victim@example.com", "198.51.100.9", true)
	require.True(t, ok)
	require.Empty(t, c.slept)
	// once the window passed, the address may try again
	c.advance(15 * time.Minute)
	ok, _ = try(t, g, "victim@example.com", "192.0.2.1", false)
	require.True(t, ok)
}

// TestLoginGuardBoundsGuessesFromAnyNumberOfAddresses: 60 guesses from 60 addresses at the
// same moment reach 15 password checks (10 free failures, then turns at 0, 0.25, 0.75, 1.75
// and 3.75 s), the rest are refused, not queued; a second burst gets none until the next
// turn, then one per MaxDelay. Two processes share the budget.
func TestLoginGuardBoundsGuessesFromAnyNumberOfAddresses(t *testing.T) {
	t.Parallel()
	gs, c := newTestGuards(t, 2)
	burst := func(round int) int {
		var mu sync.Mutex
		checked := 0
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Go(func() {
				if ok, _ := try(t, gs[i%2], "victim@example.com", fmt.Sprintf("10.%d.0.%d", round, i), false); ok {
					mu.Lock()
					checked++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return checked
	}
	require.Equal(t, 15, burst(1), "first burst")
	require.LessOrEqual(t, max(c.slept[0], c.slept[len(c.slept)-1]), 4*time.Second, "no check waits longer than MaxDelay")
	require.Zero(t, burst(2), "second burst at the same moment: the next turn is 7.75 s away")
	c.advance(4 * time.Second)
	require.Equal(t, 1, burst(3), "4 s later: the turn at 7.75 s is within MaxDelay")
	c.advance(4 * time.Second)
	require.Equal(t, 1, burst(4), "then one per MaxDelay")

	// the delay grows from Delay, doubling
	g := gs[0]
	require.Equal(t, time.Duration(0), g.delay(10))
	require.Equal(t, 250*time.Millisecond, g.delay(11))
	require.Equal(t, 500*time.Millisecond, g.delay(12))
	require.Equal(t, 4*time.Second, g.delay(50))
}

// TestLoginGuardNeverSlowsAKnownClient: once an address (or a device) logged in, strangers'
// failures neither slow it down nor refuse it; its own pair budget still holds.
func TestLoginGuardNeverSlowsAKnownClient(t *testing.T) {
	t.Parallel()
	gs, c := newTestGuards(t, 2)
	ok, _ := try(t, gs[0], "owner@example.com", "192.0.2.7", true)
	require.True(t, ok)
	// the device token of a login from elsewhere
	a, _, err := gs[1].admit(context.Background(), "owner@example.com", "198.51.100.1", nil)
	require.NoError(t, err)
	a.done(context.Background(), false)
	token, err := a.succeeded(context.Background(), "")
	require.NoError(t, err)
	device, err := parseDeviceToken(token)
	require.NoError(t, err)

	for i := range 100 { // the account's turns are now far ahead
		try(t, gs[i%2], "owner@example.com", fmt.Sprintf("10.9.0.%d", i), false)
	}
	_, retry := try(t, gs[0], "owner@example.com", "203.0.113.1", true)
	require.Positive(t, retry, "an unknown address is refused during the attack")

	before := len(c.slept)
	for i := range 8 {
		ok, _ := try(t, gs[i%2], "owner@example.com", "192.0.2.7", true)
		require.True(t, ok, "the known address, try %d", i)
		a, retry, err := gs[i%2].admit(context.Background(), "owner@example.com", "203.0.113.99", device)
		require.NoError(t, err)
		require.Zero(t, retry, "the known device from a new address, try %d", i)
		require.True(t, a.known)
		a.done(context.Background(), false)
		again, err := a.succeeded(context.Background(), token)
		require.NoError(t, err)
		require.Equal(t, token, again, "a known device keeps its token")
	}
	require.Len(t, c.slept, before, "known clients never wait")

	// the pair budget still holds for a known address
	for range 5 {
		try(t, gs[0], "owner@example.com", "192.0.2.7", false)
	}
	_, retry = try(t, gs[1], "owner@example.com", "192.0.2.7", true)
	require.Positive(t, retry)
}

func TestLoginGuardCountsConcurrentLoginsAndForgetsSuccesses(t *testing.T) {
	t.Parallel()
	gs, _ := newTestGuards(t, 2)
	var mu sync.Mutex
	var admitted []*loginAttempt
	var wg sync.WaitGroup
	for i := range 20 { // admitted before any of them ended, by two processes
		wg.Go(func() {
			a, _, err := gs[i%2].admit(context.Background(), "a@example.com", "192.0.2.1", nil)
			require.NoError(t, err)
			if a != nil {
				mu.Lock()
				admitted = append(admitted, a)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, admitted, 5, "in-flight logins count against the budget")
	for _, a := range admitted {
		a.done(context.Background(), false) // all succeeded
	}
	for range 5 {
		ok, _ := try(t, gs[0], "a@example.com", "192.0.2.1", true)
		require.True(t, ok, "a successful login spends nothing")
	}
}

func TestParseDeviceToken(t *testing.T) {
	t.Parallel()
	h, err := parseDeviceToken("")
	require.NoError(t, err)
	require.Nil(t, h)
	for _, bad := range []string{"x", "not a token at all, and too long to be one anyway", string(make([]byte, 43))} {
		_, err := parseDeviceToken(bad)
		require.Error(t, err, bad)
	}
}

// failingRemember is a store whose Remember always fails.
type failingRemember struct{ port.LoginLimitStore }

func (failingRemember) Remember(context.Context, []byte, string, []byte, time.Time) error {
	return errors.New("the database is gone")
}

// TestLoginGuardAnswersADeviceTokenWhenRememberFails: a successful login gets its device
// token even when the store could not remember it (the error is returned for the log).
func TestLoginGuardAnswersADeviceTokenWhenRememberFails(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	g := newLoginGuard(LoginLimits{}, failingRemember{postgres.LoginLimits{Pool: db.App}}, slog.Default())
	a, _, err := g.admit(context.Background(), "owner@example.com", "192.0.2.1", nil)
	require.NoError(t, err)
	a.done(context.Background(), false)
	token, err := a.succeeded(context.Background(), "")
	require.Error(t, err)
	require.Len(t, token, 43)
	_, err = parseDeviceToken(token)
	require.NoError(t, err)
}

package httpapi

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// LoginLimits configures how failed logins are held back (OWASP's authentication guidance:
// lock out an (account, client address) pair, only slow an account down). Zero fields take
// the defaults.
type LoginLimits struct {
	// Window is how long a failed login counts. Default 15m.
	Window time.Duration
	// PerAddress is how many failed logins one client address may make for one account
	// within Window; the next login of that pair is refused with 429 RATE_LIMITED (and
	// Retry-After) until the oldest failure leaves the window. Default 5.
	PerAddress int
	// DelayAfter is how many failed logins an account may collect within Window, from any
	// address, before its logins are slowed down. Default 10.
	DelayAfter int
	// Delay is the wait of a login to an account with DelayAfter+1 failures in the window;
	// it doubles with each further failure, up to MaxDelay. Defaults 250ms and 4s.
	Delay, MaxDelay time.Duration
	// Now and Sleep are the clock (tests). Defaults time.Now and a context-bounded sleep.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

func (c *LoginLimits) setDefaults() {
	if c.Window <= 0 {
		c.Window = 15 * time.Minute
	}
	if c.PerAddress <= 0 {
		c.PerAddress = 5
	}
	if c.DelayAfter <= 0 {
		c.DelayAfter = 10
	}
	if c.Delay <= 0 {
		c.Delay = 250 * time.Millisecond
	}
	if c.MaxDelay < c.Delay {
		c.MaxDelay = max(4*time.Second, c.Delay)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = sleepCtx
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loginGuard holds the failed logins of the last Window in memory (per process) and decides
// how each login waits:
//
//   - a pair (account, client address) with PerAddress failures in the window is refused;
//   - an account with more than DelayAfter failures in the window makes each of its logins
//     wait Delay·2^(failures-DelayAfter-1), at most MaxDelay. A login from an address that has
//     not failed for the account just waits; logins from addresses that have failed for it are
//     also spaced one such wait apart per account, and one that would wait longer than
//     MaxDelay for its turn is refused. So a stranger's failures slow the owner's correct
//     login by at most MaxDelay and never refuse it.
//
// Only failed logins count: a successful login, register (EMAIL_TAKEN included) and refresh
// spend nothing of an account's budget. A login counts as failed from the moment it is
// admitted until it ends otherwise, so concurrent logins cannot overrun the budget. Safe for
// concurrent use.
type loginGuard struct {
	cfg LoginLimits

	mu       sync.Mutex
	accounts map[string]*accountFailures
	swept    time.Time
}

type accountFailures struct {
	at     []time.Time            // the account's failures in the window, oldest first
	byAddr map[string][]time.Time // the same, per client address
	next   time.Time              // the turn of the next login from an address that failed
}

func newLoginGuard(cfg LoginLimits) *loginGuard {
	cfg.setDefaults()
	return &loginGuard{cfg: cfg, accounts: map[string]*accountFailures{}}
}

// clientAddress is the request's peer address (forwarded headers are not trusted).
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func accountKey(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

func prune(ts []time.Time, since time.Time) []time.Time {
	i := 0
	for i < len(ts) && !ts[i].After(since) {
		i++
	}
	return ts[i:]
}

// admit waits the login's turn and counts it as failed until done(false) says otherwise;
// done must be called once the login's outcome is known (done(true): it failed). It returns
// retryAfter > 0 when the login is refused (the pair's budget is spent, or its turn is too
// far), or ctx's error when the request ended while waiting; done is nil then.
func (g *loginGuard) admit(ctx context.Context, email, addr string) (done func(failed bool), retryAfter time.Duration, err error) {
	key := accountKey(email)
	now := g.cfg.Now()
	g.mu.Lock()
	g.sweep(now)
	a := g.accounts[key]
	if a == nil {
		a = &accountFailures{byAddr: map[string][]time.Time{}}
		g.accounts[key] = a
	}
	since := now.Add(-g.cfg.Window)
	a.at = prune(a.at, since)
	mine := prune(a.byAddr[addr], since)
	a.byAddr[addr] = mine
	if len(mine) >= g.cfg.PerAddress {
		g.mu.Unlock()
		return nil, mine[0].Add(g.cfg.Window).Sub(now), nil
	}
	wait := g.delay(len(a.at))
	if wait > 0 && len(mine) > 0 {
		turn := now
		if a.next.After(now) {
			turn = a.next
		}
		if turn.Sub(now) > g.cfg.MaxDelay {
			g.mu.Unlock()
			return nil, turn.Sub(now), nil
		}
		a.next = turn.Add(wait)
		wait = turn.Sub(now) + wait
	}
	a.at = append(a.at, now)
	a.byAddr[addr] = append(mine, now)
	g.mu.Unlock()
	done = func(failed bool) {
		if !failed {
			g.forget(key, addr, now)
		}
	}
	if wait > 0 {
		if err := g.cfg.Sleep(ctx, wait); err != nil {
			done(false)
			return nil, 0, err
		}
	}
	return done, 0, nil
}

// forget takes back the failure counted at t for a login that did not fail.
func (g *loginGuard) forget(key, addr string, t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.accounts[key]
	if a == nil {
		return
	}
	a.at = without(a.at, t)
	a.byAddr[addr] = without(a.byAddr[addr], t)
}

func without(ts []time.Time, t time.Time) []time.Time {
	for i := range ts {
		if ts[i].Equal(t) {
			return append(ts[:i:i], ts[i+1:]...)
		}
	}
	return ts
}

// delay is the wait of a login to an account with n failures in the window.
func (g *loginGuard) delay(n int) time.Duration {
	over := n - g.cfg.DelayAfter
	if over <= 0 {
		return 0
	}
	d := g.cfg.Delay
	for i := 1; i < over && d < g.cfg.MaxDelay; i++ {
		d *= 2
	}
	return min(d, g.cfg.MaxDelay)
}

// sweep forgets, at most once a Window, the accounts and pairs without a failure in the
// window, so memory follows the failures of the last two windows. Called with mu held.
func (g *loginGuard) sweep(now time.Time) {
	if now.Sub(g.swept) < g.cfg.Window {
		return
	}
	g.swept = now
	since := now.Add(-g.cfg.Window)
	for key, a := range g.accounts {
		for addr, ts := range a.byAddr {
			if len(prune(ts, since)) == 0 {
				delete(a.byAddr, addr)
			}
		}
		if len(prune(a.at, since)) == 0 && len(a.byAddr) == 0 {
			delete(g.accounts, key)
		}
	}
}

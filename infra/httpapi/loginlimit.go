package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// LoginLimits configures how failed logins are held back (OWASP's authentication guidance:
// lock out an (account, client) pair, only slow an account down, and never let strangers'
// failures slow down a client the account logged in from before). Zero fields take the
// defaults.
type LoginLimits struct {
	// Window is how long a failed login counts. Default 15m.
	Window time.Duration
	// PerAddress is how many failed logins one client (an address, an IPv6 /64, or a known
	// device) may make for one account within Window; the next login of that pair is
	// refused with 429 RATE_LIMITED (and Retry-After) until the oldest failure leaves the
	// window. Default 5.
	PerAddress int
	// DelayAfter is how many failed logins an account may collect within Window, from any
	// client, before password checks from unknown clients are spaced out. Default 10.
	DelayAfter int
	// Delay is the spacing between two password checks from unknown clients of an account
	// with DelayAfter failures in the window; it doubles with each further failure, up to
	// MaxDelay. A check whose turn is more than MaxDelay away is refused with 429 and
	// Retry-After, never queued. Defaults 250ms and 4s.
	Delay, MaxDelay time.Duration
	// KnownFor is how long a client or device stays known after a successful login.
	// Default 30 days.
	KnownFor time.Duration
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
	if c.KnownFor <= 0 {
		c.KnownFor = 30 * 24 * time.Hour
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

// deviceTokenBytes is the length of a device token's random bytes (the token is their
// unpadded base64url: 43 characters).
const deviceTokenBytes = 32

// loginGuard decides how each login waits, with the limits' state in a port.LoginLimitStore
// (PostgreSQL: shared by every API process; the process itself keeps nothing per account or
// client, so its memory does not grow with the traffic). A login names its account (the
// SHA-256 of the normalized email: validated and fixed-size before anything is kept) and its
// client: the device, when it sent a device token a successful login to the account
// returned; otherwise its address key (clientkey: an IPv6 client as its /64).
//
//   - A pair (account, client) with PerAddress failures in the window is refused.
//   - A known client (one that logged in to the account successfully within KnownFor: its
//     address, or its device) is never slowed down or queued by others' failures, and takes
//     its password-hashing slot from the whole set (see HashSlots): only the pair limit
//     applies to it.
//   - Unknown clients share the account's budget: the first DelayAfter failures in the
//     window are checked at once; beyond them the account's password checks from unknown
//     clients take turns spaced Delay·2^(failures-DelayAfter), at most MaxDelay, across
//     every process; a check whose turn is more than MaxDelay away is refused (429 with
//     Retry-After), so nothing queues longer than MaxDelay and a stranger cannot fill a
//     queue. A burst from any number of addresses thus reaches at most DelayAfter +
//     log2(MaxDelay/Delay) + 1 password checks (15 with the defaults: 10 at once, then turns
//     0, 0.25, 0.75, 1.75 and 3.75 s later), then one per MaxDelay; an owner on a new address during such an attack competes with the guesses
//     for those turns (each try waits at most MaxDelay or is refused with Retry-After).
//
// Only failed logins count: a login counts as failed from the moment it is admitted until
// it ends otherwise, so concurrent logins cannot overrun a budget (every process's
// admissions of one account are serialized by the store). Safe for concurrent use.
type loginGuard struct {
	cfg   LoginLimits
	store port.LoginLimitStore // nil: no limits
	log   *slog.Logger
	swept atomic.Int64 // unix nanoseconds of the last sweep
}

func newLoginGuard(cfg LoginLimits, store port.LoginLimitStore, log *slog.Logger) *loginGuard {
	cfg.setDefaults()
	return &loginGuard{cfg: cfg, store: store, log: log}
}

// loginAttempt is one login admitted by loginGuard.admit.
type loginAttempt struct {
	g         *loginGuard
	account   []byte
	address   string // the client's address key
	device    []byte // SHA-256 of the device token the login sent and that was known; nil otherwise
	known     bool   // its address or device logged in to the account before
	failureID int64
}

// accountKey is the SHA-256 of a normalized email.
func accountKey(email string) []byte {
	h := sha256.Sum256([]byte(email))
	return h[:]
}

// parseDeviceToken returns the SHA-256 of a well-formed device token, nil for "" and
// VALIDATION_FAILED naming device_token for anything else.
func parseDeviceToken(token string) ([]byte, error) {
	if token == "" {
		return nil, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if len(token) != base64.RawURLEncoding.EncodedLen(deviceTokenBytes) || err != nil || len(raw) != deviceTokenBytes {
		return nil, domain.Invalid("device_token", "not a device token (send the one a successful login returned)")
	}
	h := sha256.Sum256([]byte(token))
	return h[:], nil
}

// admit decides a login of email (normalized) from address (its client key) with the
// device token's hash (nil: none). It returns the admitted attempt, or retryAfter > 0 when
// the login is refused, or an error (the store's, or ctx's when the request ended while
// waiting its turn). An admitted attempt must be ended with done.
func (g *loginGuard) admit(ctx context.Context, email, address string, device []byte) (a *loginAttempt, retryAfter time.Duration, err error) {
	a = &loginAttempt{g: g, account: accountKey(email), address: address}
	if g.store == nil {
		return a, 0, nil
	}
	now := g.cfg.Now()
	g.sweep(ctx, now)
	clientKnown, deviceKnown, err := g.store.Known(ctx, a.account, address, device, now.Add(-g.cfg.KnownFor))
	if err != nil {
		return nil, 0, err
	}
	client := address
	if deviceKnown {
		a.device = device
		client = "device:" + hex.EncodeToString(device[:16])
	}
	a.known = clientKnown || deviceKnown
	var wait time.Duration
	a.failureID, err = g.store.Admit(ctx, a.account, client, a.known, now, now.Add(-g.cfg.Window), func(c port.LoginCounts) port.LoginDecision {
		wait, retryAfter = 0, 0
		if c.Pair >= g.cfg.PerAddress {
			retryAfter = max(c.PairOldest.Add(g.cfg.Window).Sub(now), time.Second)
			return port.LoginDecision{}
		}
		spacing := g.delay(c.Account + 1)
		if a.known || spacing == 0 {
			return port.LoginDecision{Admit: true}
		}
		turn := now
		if c.NextTurn.After(now) {
			turn = c.NextTurn
		}
		if ahead := turn.Sub(now); ahead > g.cfg.MaxDelay {
			retryAfter = max(ahead-g.cfg.MaxDelay, time.Second)
			return port.LoginDecision{}
		}
		wait = turn.Sub(now)
		return port.LoginDecision{Admit: true, NextTurn: turn.Add(spacing)}
	})
	if err != nil || retryAfter > 0 {
		return nil, retryAfter, err
	}
	if wait > 0 {
		if err := g.cfg.Sleep(ctx, wait); err != nil {
			a.done(ctx, false)
			return nil, 0, err
		}
	}
	return a, 0, nil
}

// done ends an admitted attempt: a login that did not fail (succeeded, or ended otherwise)
// is uncounted.
func (a *loginAttempt) done(ctx context.Context, failed bool) {
	if failed || a.failureID == 0 {
		return
	}
	if err := a.g.store.Uncount(ctx, a.account, a.failureID); err != nil {
		a.g.log.Warn("login limits: uncount a login that did not fail", "err", err)
	}
}

// succeeded records the client and the device of a successful login and returns the device
// token to answer: the one the login sent when it was known, a new one otherwise. The token
// is returned with the store's error too: a token that was not remembered only makes a
// later login from it one from an unknown device.
func (a *loginAttempt) succeeded(ctx context.Context, sent string) (string, error) {
	token := sent
	device := a.device
	if device == nil {
		b := make([]byte, deviceTokenBytes)
		_, _ = rand.Read(b)
		token = base64.RawURLEncoding.EncodeToString(b)
		h := sha256.Sum256([]byte(token))
		device = h[:]
	}
	if a.g.store == nil {
		return token, nil
	}
	return token, a.g.store.Remember(context.WithoutCancel(ctx), a.account, a.address, device, a.g.cfg.Now())
}

// delay is the spacing of password checks from unknown clients of an account with n
// failures in the window (0 up to DelayAfter).
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

// sweepEvery is how often a process deletes, in bounded batches, the limits' rows that no
// longer count; sweepBatch is the most rows of each kind one sweep deletes.
const (
	sweepEvery = time.Minute
	sweepBatch = 1000
)

// sweep deletes old rows at most once a sweepEvery per process; a failure is logged (the
// rows are deleted by a later sweep).
func (g *loginGuard) sweep(ctx context.Context, now time.Time) {
	last := g.swept.Load()
	if now.UnixNano()-last < int64(sweepEvery) || !g.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	if err := g.store.Sweep(ctx, g.cfg.Window, g.cfg.KnownFor, sweepBatch); err != nil {
		g.log.Warn("login limits: sweep", "err", err)
	}
}

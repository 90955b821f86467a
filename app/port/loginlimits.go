package port

import (
	"context"
	"time"
)

// LoginCounts is what a LoginLimitStore counted for one login, under the account's lock:
// the failures recorded before this login within the window.
type LoginCounts struct {
	// Pair is the failures of (account, client); PairOldest is the oldest of them (zero when
	// Pair is 0).
	Pair       int
	PairOldest time.Time
	// Account is the account's failures, from every client.
	Account int
	// NextTurn is when the account's next password check from an unknown client may start
	// (zero: no turn set).
	NextTurn time.Time
}

// LoginDecision is what the limiter decided of a login from its LoginCounts.
type LoginDecision struct {
	// Admit counts the login as failed (until LoginLimitStore.Uncount) and lets it through.
	Admit bool
	// NextTurn, when not zero, becomes the account's next turn.
	NextTurn time.Time
}

// LoginLimitStore keeps the state of the login limits where every API process sees it. An
// account is the SHA-256 of its normalized email (32 bytes), a client the key of the address
// or device a login came from (at most 100 bytes), a device the SHA-256 of its token. Safe
// for concurrent use; no method needs a transaction of the caller's, and each touches the
// rows of its account only (Sweep excepted).
type LoginLimitStore interface {
	// Admit counts the failures of account and (account, client) at or after since (later
	// ones too: a concurrent login may have taken its time before this one and its lock
	// after), and calls decide with them while holding the pair's lock and, unless known
	// (a client the account knows, whose admission does not depend on the account's counts),
	// the account's: every process's admissions of one pair, and of one account's unknown
	// clients, are serialized. When decide admits, it records a failure of (account, client)
	// at now and returns its id (0 otherwise). decide must be quick and may be called again
	// if the transaction is retried.
	Admit(ctx context.Context, account []byte, client string, known bool, now, since time.Time,
		decide func(LoginCounts) LoginDecision) (failureID int64, err error)
	// Uncount deletes a failure Admit recorded for account, for a login that did not fail.
	Uncount(ctx context.Context, account []byte, failureID int64) error
	// Known reports whether client, and whether the device, logged in to account
	// successfully at or after since (device nil: not asked).
	Known(ctx context.Context, account []byte, client string, device []byte, since time.Time) (clientKnown, deviceKnown bool, err error)
	// Remember records a successful login to account from client with the device (nil:
	// none) at now.
	Remember(ctx context.Context, account []byte, client string, device []byte, now time.Time) error
	// Sweep deletes, across accounts, up to limit rows of each kind that no longer count:
	// failures and turns older than window, clients and devices last successful longer ago
	// than knownFor (the store may keep rows longer, never shorter).
	Sweep(ctx context.Context, window, knownFor time.Duration, limit int) error
}

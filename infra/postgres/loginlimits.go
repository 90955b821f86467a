package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/app/port"
)

// LoginLimits implements port.LoginLimitStore on the tables of sql/038_login_limits.sql, as
// app_user: each method runs one transaction that names its account in app.login_account,
// and RLS shows it that account's rows only. Every API process sharing the database shares
// the limits.
type LoginLimits struct {
	Pool *pgxpool.Pool
}

var _ port.LoginLimitStore = LoginLimits{}

// loginLockClass is the first key of the account locks (pg_advisory_xact_lock(int4, int4)),
// a key space of its own beside the idempotency scopes' int8 locks.
const loginLockClass = 0x4c4f47 // "LOG"

// inAccount runs fn in a transaction; fn's first batch must start with scoped, which names
// the account to RLS (one round trip with fn's first statements).
func (l LoginLimits) inAccount(ctx context.Context, op string, account []byte, fn func(tx pgx.Tx) error) error {
	if len(account) != 32 {
		return fmt.Errorf("postgres.LoginLimits.%s: account must be a SHA-256", op)
	}
	if err := pgx.BeginFunc(ctx, l.Pool, fn); err != nil {
		return fmt.Errorf("postgres.LoginLimits.%s: %w", op, TranslateError(err))
	}
	return nil
}

// scoped returns a batch whose first statement names account in app.login_account for the
// rest of the transaction.
func scoped(account []byte) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('app.login_account', $1, true)`, hex.EncodeToString(account))
	return b
}

// Admit implements port.LoginLimitStore: one transaction that takes the account's advisory
// lock (known: the pair's only), counts, lets decide judge, and records the failure and the
// turn, in four round trips.
func (l LoginLimits) Admit(ctx context.Context, account []byte, client string, known bool, now, since time.Time,
	decide func(port.LoginCounts) port.LoginDecision) (int64, error) {
	var id int64
	err := l.inAccount(ctx, "Admit", account, func(tx pgx.Tx) error {
		id = 0
		var (
			c          port.LoginCounts
			pairOldest *time.Time
			nextTurn   *time.Time
		)
		b := scoped(account)
		if !known {
			b.Queue(`SELECT pg_advisory_xact_lock($1, $2)`, int32(loginLockClass), int32(binary.BigEndian.Uint32(account[:4])))
		}
		pair := sha256.Sum256(append(append([]byte{}, account...), client...))
		b.Queue(`SELECT pg_advisory_xact_lock($1, $2)`, int32(loginLockClass+1), int32(binary.BigEndian.Uint32(pair[:4])))
		b.Queue(`
			SELECT count(*) FILTER (WHERE client = $2), min(failed_at) FILTER (WHERE client = $2), count(*),
			       (SELECT next_at FROM login_turns WHERE account = $1)
			FROM login_failures WHERE account = $1 AND failed_at >= $3`,
			account, client, since).QueryRow(func(row pgx.Row) error {
			return row.Scan(&c.Pair, &pairOldest, &c.Account, &nextTurn)
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if pairOldest != nil {
			c.PairOldest = *pairOldest
		}
		if nextTurn != nil {
			c.NextTurn = *nextTurn
		}
		d := decide(c)
		if !d.Admit {
			return nil
		}
		b = &pgx.Batch{}
		b.Queue(`INSERT INTO login_failures (account, client, failed_at) VALUES ($1, $2, $3) RETURNING id`,
			account, client, now).QueryRow(func(row pgx.Row) error { return row.Scan(&id) })
		if !d.NextTurn.IsZero() {
			b.Queue(`INSERT INTO login_turns (account, next_at) VALUES ($1, $2)
				ON CONFLICT (account) DO UPDATE SET next_at = excluded.next_at`, account, d.NextTurn)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return 0, err
	}
	return id, nil
}

// Uncount implements port.LoginLimitStore. It runs even when ctx has ended (the request
// that was counted may be gone): a failure that did not happen must not stay counted.
// A transient failure is retried (retryTransient).
func (l LoginLimits) Uncount(ctx context.Context, account []byte, failureID int64) error {
	ctx = context.WithoutCancel(ctx)
	return retryTransient(ctx, func() error {
		return l.inAccount(ctx, "Uncount", account, func(tx pgx.Tx) error {
			b := scoped(account)
			b.Queue(`DELETE FROM login_failures WHERE id = $1`, failureID)
			return tx.SendBatch(ctx, b).Close()
		})
	})
}

// Known implements port.LoginLimitStore.
func (l LoginLimits) Known(ctx context.Context, account []byte, client string, device []byte, since time.Time) (bool, bool, error) {
	var clientKnown, deviceKnown bool
	err := l.inAccount(ctx, "Known", account, func(tx pgx.Tx) error {
		b := scoped(account)
		b.Queue(`
			SELECT EXISTS (SELECT 1 FROM login_known_clients WHERE account = $1 AND client = $2 AND last_success_at >= $4),
			       $3::bytea IS NOT NULL AND EXISTS (SELECT 1 FROM login_devices WHERE token_hash = $3 AND account = $1 AND last_success_at >= $4)`,
			account, client, device, since).QueryRow(func(row pgx.Row) error { return row.Scan(&clientKnown, &deviceKnown) })
		return tx.SendBatch(ctx, b).Close()
	})
	return clientKnown, deviceKnown, err
}

// Remember implements port.LoginLimitStore. Its upserts may run twice: a transient failure
// (see retryTransient) is retried.
func (l LoginLimits) Remember(ctx context.Context, account []byte, client string, device []byte, now time.Time) error {
	return retryTransient(ctx, func() error { return l.remember(ctx, account, client, device, now) })
}

// loginRetryWaits are the pauses before retrying a transient failure of a write that must
// land after the login was answered (Remember, Uncount): three tries within about 0.3 s.
var loginRetryWaits = []time.Duration{50 * time.Millisecond, 250 * time.Millisecond}

// retryTransient runs fn, and again after each of loginRetryWaits while it fails with what
// another try may not meet: a serialization failure or deadlock, a connection that could not
// be opened (too many clients, the server starting or shutting down) or was lost before
// anything was sent. fn must be idempotent. ctx bounds the waits.
func retryTransient(ctx context.Context, fn func() error) error {
	err := fn()
	for _, wait := range loginRetryWaits {
		if err == nil || !transient(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		err = fn()
	}
	return err
}

// transient reports whether err is worth another try of the same idempotent transaction.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case CodeSerializationFailure, CodeDeadlockDetected, codeTooManyConnections, codeCannotConnectNow, codeAdminShutdown:
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr) || pgconn.SafeToRetry(err)
}

// Connection-level SQLSTATEs that another connection may not meet.
const (
	codeTooManyConnections = "53300"
	codeCannotConnectNow   = "57P03"
	codeAdminShutdown      = "57P01"
)

func (l LoginLimits) remember(ctx context.Context, account []byte, client string, device []byte, now time.Time) error {
	return l.inAccount(ctx, "Remember", account, func(tx pgx.Tx) error {
		b := scoped(account)
		b.Queue(`
			WITH c AS (
			  INSERT INTO login_known_clients (account, client, last_success_at) VALUES ($1, $2, $4)
			  ON CONFLICT (account, client) DO UPDATE SET last_success_at = excluded.last_success_at
			)
			INSERT INTO login_devices (token_hash, account, last_success_at)
			SELECT $3, $1, $4 WHERE $3::bytea IS NOT NULL
			ON CONFLICT (token_hash) DO UPDATE SET last_success_at = excluded.last_success_at`,
			account, client, device, now)
		return tx.SendBatch(ctx, b).Close()
	})
}

// Sweep implements port.LoginLimitStore with login_limits_sweep (which keeps failures and
// turns at least 15 minutes, clients and devices at least a day).
func (l LoginLimits) Sweep(ctx context.Context, window, knownFor time.Duration, limit int) error {
	if _, err := l.Pool.Exec(ctx, `SELECT login_limits_sweep($1, $2, $3)`, window, knownFor, limit); err != nil {
		return fmt.Errorf("postgres.LoginLimits.Sweep: %w", TranslateError(err))
	}
	return nil
}

package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/infra/clientkey"
)

// MaxClientKeyLength bounds the client key a failed sign-in is counted against
// (console_signin_failures.client): clientkey.MaxLength.
const MaxClientKeyLength = clientkey.MaxLength

// sessionIDBytes is the length of a session's random id (the cookie holds it base64url).
const sessionIDBytes = 32

// sessionStore keeps the console's sessions in console_sessions (sql/028) as
// listing_operator: every console process sees the same sessions, and a restart keeps them.
// The table holds the SHA-256 of each id, never the id.
type sessionStore struct{ s *Server }

func idHash(id []byte) []byte {
	sum := sha256.Sum256(id)
	return sum[:]
}

// secretCheck binds a session to its operator's current secret (digest from secretDigest).
func secretCheck(id, digest []byte) []byte {
	h := sha256.New()
	h.Write([]byte("console-session\x00"))
	h.Write(id)
	h.Write([]byte{0})
	h.Write(digest)
	return h.Sum(nil)
}

// create records a new session of operator, expiring at expires, and deletes a batch of
// sessions that expired.
func (st sessionStore) create(ctx context.Context, ss session, digest []byte) error {
	now := st.s.now()
	if _, err := st.s.cfg.Pool.Exec(ctx, `INSERT INTO console_sessions (id_hash, operator, secret_check, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5)`, idHash(ss.ID), ss.Operator, secretCheck(ss.ID, digest), now, ss.Expires); err != nil {
		return fmt.Errorf("console: record session: %w", err)
	}
	if _, err := st.s.cfg.Pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash IN
		(SELECT id_hash FROM console_sessions WHERE expires_at < $1 LIMIT 100)`, now); err != nil {
		st.s.log.Warn("console: delete expired sessions", "err", err)
	}
	return nil
}

// find returns the session of id when it exists, is not revoked, has not expired and its
// operator still has the secret it was created with.
func (st sessionStore) find(ctx context.Context, id []byte) (session, bool, error) {
	var (
		ss      session
		check   []byte
		revoked *time.Time
	)
	err := st.s.cfg.Pool.QueryRow(ctx, `SELECT operator, secret_check, expires_at, revoked_at FROM console_sessions WHERE id_hash = $1`,
		idHash(id)).Scan(&ss.Operator, &check, &ss.Expires, &revoked)
	if errors.Is(err, pgx.ErrNoRows) {
		return session{}, false, nil
	}
	if err != nil {
		return session{}, false, fmt.Errorf("console: read session: %w", err)
	}
	if revoked != nil || !st.s.now().Before(ss.Expires) {
		return session{}, false, nil
	}
	digest, ok := st.s.secretDigest(ss.Operator)
	if !ok || !hmac.Equal(check, secretCheck(id, digest)) {
		return session{}, false, nil
	}
	ss.ID = id
	return ss, true, nil
}

// revoke ends the session of id for every console process.
func (st sessionStore) revoke(ctx context.Context, id []byte) error {
	if _, err := st.s.cfg.Pool.Exec(ctx, `UPDATE console_sessions SET revoked_at = $2 WHERE id_hash = $1 AND revoked_at IS NULL`,
		idHash(id), st.s.now()); err != nil {
		return fmt.Errorf("console: revoke session: %w", err)
	}
	return nil
}

// signinLimiter holds each client address to SigninFailures refused sign-ins (form or
// Bearer) within SigninWindow, in console_signin_failures (shared by every console process).
// An attempt is counted as a failure from the moment it is admitted until it turns out
// right, so concurrent attempts cannot overrun the budget. Only the address that failed is
// held back: an operator elsewhere signs in whatever strangers do, and an address's
// failures stop counting SigninWindow after they happened.
type signinLimiter struct{ s *Server }

// admit counts an attempt of client as failed and returns its id, or retryAfter > 0 when
// the client's budget is spent (the attempt is then not counted).
func (l signinLimiter) admit(ctx context.Context, client string) (id int64, retryAfter time.Duration, err error) {
	now := l.s.now()
	pool := l.s.cfg.Pool
	if err := pool.QueryRow(ctx, `INSERT INTO console_signin_failures (client, failed_at) VALUES ($1, $2) RETURNING id`,
		client, now).Scan(&id); err != nil {
		return 0, 0, fmt.Errorf("console: count sign-in: %w", err)
	}
	var (
		n      int
		oldest *time.Time
	)
	since := now.Add(-l.s.cfg.SigninWindow)
	if err := pool.QueryRow(ctx, `SELECT count(*), min(failed_at) FROM console_signin_failures
		WHERE client = $1 AND failed_at > $2 AND id < $3`, client, since, id).Scan(&n, &oldest); err != nil {
		return 0, 0, fmt.Errorf("console: count sign-in: %w", err)
	}
	if n < l.s.cfg.SigninFailures {
		if _, err := pool.Exec(ctx, `DELETE FROM console_signin_failures WHERE id IN
			(SELECT id FROM console_signin_failures WHERE failed_at <= $1 LIMIT 100)`, since); err != nil {
			l.s.log.Warn("console: delete old sign-in failures", "err", err)
		}
		return id, 0, nil
	}
	l.forget(ctx, id)
	retryAfter = time.Second
	if oldest != nil {
		retryAfter = max(oldest.Add(l.s.cfg.SigninWindow).Sub(now), time.Second)
	}
	return 0, retryAfter, nil
}

// forget uncounts an admitted attempt that turned out right.
func (l signinLimiter) forget(ctx context.Context, id int64) {
	if _, err := l.s.cfg.Pool.Exec(context.WithoutCancel(ctx), `DELETE FROM console_signin_failures WHERE id = $1`, id); err != nil {
		l.s.log.Warn("console: uncount sign-in", "err", err)
	}
}

package idem

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/infra/postgres"
)

// Record statuses (the CHECK of idempotency_requests.status). A record is written once,
// completed, at its request's commit; executing is what earlier releases wrote at the claim,
// never visible outside the transaction that wrote it, and is read as in progress.
const (
	StatusExecuting = "executing"
	StatusCompleted = "completed"
)

// Scope identifies one idempotent request: workspace, user, HTTP method,
// normalized actual path and key. Method and Path are normalized by the Store.
type Scope struct {
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	Method      string
	Path        string
	Key         uuid.UUID
}

func (s Scope) normalized() Scope {
	s.Method = NormalizeMethod(s.Method)
	s.Path = NormalizePath(s.Path)
	return s
}

func (s Scope) validate() error {
	switch {
	case s.WorkspaceID == uuid.Nil:
		return errors.New("idempotency needs a workspace scope")
	case s.UserID == uuid.Nil:
		return errors.New("idempotency needs a user")
	case s.Key == uuid.Nil:
		return errors.New("idempotency key is the nil UUID")
	case s.Method == "":
		return errors.New("idempotency needs the HTTP method")
	}
	return nil
}

// LockID is the 64-bit advisory lock key of a scope: the first 8 bytes of SHA-256 over a
// domain tag and the length-prefixed scope.
func (s Scope) LockID() int64 {
	s = s.normalized()
	h := sha256.New()
	h.Write([]byte("listingkit/idempotency-lock/v1\x00"))
	h.Write(s.WorkspaceID[:])
	h.Write(s.UserID[:])
	var n [binary.MaxVarintLen64]byte
	for _, part := range []string{s.Method, s.Path} {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		h.Write([]byte(part))
	}
	h.Write(s.Key[:])
	return int64(binary.BigEndian.Uint64(h.Sum(nil)[:8]))
}

// Record is a stored idempotency record as the middleware needs it.
type Record struct {
	ID          uuid.UUID
	Status      string
	Fingerprint Fingerprint
	// Response is set on completed records.
	Response *bus.Response
	// Expired reports expires_at <= now() at the time of reading: the record counts as absent.
	Expired bool
}

// Look is what Store.Look found of a scope.
type Look struct {
	// Locked reports whether this transaction now holds the scope's advisory lock.
	Locked bool
	// Existing is the scope's record, read by a statement that began after the lock was
	// asked for: any record whose writer held the lock has committed before it (or is
	// still open, and then Locked is false). Nil when there is none.
	Existing *Record
}

// Store reads and writes idempotency_requests in the transaction carried by the context
// (postgres.TxFromContext); it refuses to run without one and never uses a pool itself, so
// every statement is subject to the transaction's RLS scope. It holds no state and is safe
// for concurrent use.
type Store struct{}

// NewStore returns a Store.
func NewStore() *Store { return &Store{} }

func txFrom(ctx context.Context, op string) (pgx.Tx, postgres.Scope, error) {
	tx, sc, err := postgres.TxFromContext(ctx)
	if err != nil {
		return nil, postgres.Scope{}, fmt.Errorf("idem.Store.%s: %w", op, err)
	}
	return tx, sc, nil
}

const recordColumns = `r.id, r.status, r.request_fingerprint, r.fingerprint_key_id,
	r.response_status, r.response_headers, r.response_body, r.expires_at <= now()`

// lockSQL takes the scope's transaction-level advisory lock if it is free, never waiting.
const lockSQL = `SELECT pg_try_advisory_xact_lock($1)`

// getSQL reads the record of a scope ($1..$5).
const getSQL = `SELECT ` + recordColumns + ` FROM idempotency_requests r
	WHERE r.workspace_id = $1 AND r.user_id = $2 AND r.method = $3 AND r.path = $4 AND r.idempotency_key = $5`

func scopeArgs(scope Scope) []any {
	return []any{scope.WorkspaceID, scope.UserID, scope.Method, scope.Path, scope.Key}
}

func readLocked(rows pgx.Rows) (any, error) {
	var locked bool
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("no row")
	}
	if err := rows.Scan(&locked); err != nil {
		return nil, err
	}
	rows.Close()
	return locked, rows.Err()
}

func readRecord(rows pgx.Rows) (any, error) {
	var (
		rid           uuid.UUID
		status, keyID string
		mac, body     []byte
		respStatus    *int32
		headers       map[string]string
		expired       bool
	)
	if !rows.Next() {
		return (*Record)(nil), rows.Err()
	}
	if err := rows.Scan(&rid, &status, &mac, &keyID, &respStatus, &headers, &body, &expired); err != nil {
		return nil, err
	}
	rows.Close()
	return buildRecord(rid, status, mac, keyID, respStatus, headers, body, expired), rows.Err()
}

// Look takes the scope's advisory lock if it is free (never waiting), then reads the scope's
// record with a statement of its own, both in one round trip: the read's snapshot is taken
// after the lock was asked for, so a record written under the lock by another transaction
// is visible once that transaction has committed. Nothing is written. Run it inside the RLS
// transaction of the scope's workspace.
func (s *Store) Look(ctx context.Context, scope Scope) (Look, error) {
	tx, _, err := txFrom(ctx, "Look")
	if err != nil {
		return Look{}, err
	}
	scope = scope.normalized()
	b := &pgx.Batch{}
	b.Queue(lockSQL, scope.LockID())
	b.Queue(getSQL, scopeArgs(scope)...)
	br := tx.SendBatch(ctx, b)
	var look Look
	err = func() error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		locked, err := readLocked(rows)
		rows.Close()
		if err != nil {
			return err
		}
		if rows, err = br.Query(); err != nil {
			return err
		}
		rec, err := readRecord(rows)
		rows.Close()
		if err != nil {
			return err
		}
		look = Look{Locked: locked.(bool), Existing: rec.(*Record)}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Look{}, fmt.Errorf("idem.Store.Look: %w", postgres.TranslateError(err))
	}
	return look, nil
}

// LookOpenings is Look as two Openings of the transaction it runs in (sent with its BEGIN,
// see postgres.Opening): lockKey's Read returns whether the lock was taken (a bool),
// recordKey's the scope's record (a *Record, nil when there is none).
func (s *Store) LookOpenings(lockKey, recordKey any, scope Scope) []*postgres.Opening {
	scope = scope.normalized()
	onErr := func(err error) error { return fmt.Errorf("idem.Store.Look: %w", err) }
	return []*postgres.Opening{
		{Key: lockKey, SQL: lockSQL, Args: []any{scope.LockID()}, Read: readLocked, OnErr: onErr},
		{Key: recordKey, SQL: getSQL, Args: scopeArgs(scope), Read: readRecord, OnErr: onErr},
	}
}

func buildRecord(id uuid.UUID, status string, mac []byte, keyID string, respStatus *int32,
	headers map[string]string, body []byte, expired bool) *Record {
	r := &Record{ID: id, Status: status, Fingerprint: Fingerprint{KeyID: keyID, MAC: mac}, Expired: expired}
	if status == StatusCompleted && respStatus != nil {
		if headers == nil {
			headers = map[string]string{}
		}
		if body == nil {
			body = []byte{}
		}
		r.Response = &bus.Response{Status: int(*respStatus), Header: headers, Body: body}
	}
	return r
}

// saveSQL writes the completed record of scope ($1..$5) with id $6, fingerprint ($7, $8),
// response ($9..$11) and retention ($12, microseconds) in place of an expired record of
// the scope, if any; it fails (division by zero, 22012) when a live record of the scope
// exists, so that the commit it travels with does not happen. A record of the scope written
// by a transaction still open is waited for at the unique constraint.
const saveSQL = `
WITH w AS (
  INSERT INTO idempotency_requests AS r (id, workspace_id, user_id, method, path, idempotency_key,
    request_fingerprint, fingerprint_key_id, status, response_status, response_headers, response_body,
    completed_at, expires_at)
  VALUES ($6, $1, $2, $3, $4, $5, $7, $8, 'completed', $9, $10, $11, now(),
    now() + $12::bigint * interval '1 microsecond')
  ON CONFLICT ON CONSTRAINT idempotency_requests_scope DO UPDATE
  SET id = excluded.id, request_fingerprint = excluded.request_fingerprint,
    fingerprint_key_id = excluded.fingerprint_key_id, status = excluded.status,
    response_status = excluded.response_status, response_headers = excluded.response_headers,
    response_body = excluded.response_body, created_at = now(), completed_at = now(),
    expires_at = excluded.expires_at
  WHERE r.expires_at <= now()
  RETURNING 1
)
SELECT 1 / count(*)::int FROM w`

// SaveAtCommit writes the completed record of scope (id, fp, the response to replay, kept
// for retention) at the commit of the transaction of ctx: the write travels in the commit's
// round trip (postgres.BeforeCommit), the record's only write. It replaces an expired record
// of the scope. When a live record of the scope was committed by another transaction after
// this one looked, the commit fails with postgres.ErrRunAgain (wrapped): the invocation runs
// again and finds that record.
func (s *Store) SaveAtCommit(ctx context.Context, scope Scope, id uuid.UUID, fp Fingerprint, retention time.Duration, resp bus.Response) error {
	headers := resp.Header
	if headers == nil {
		headers = map[string]string{}
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	onErr := func(err error) error {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "22012" {
			return fmt.Errorf("idem.Store.Save: another transaction committed a record of the scope: %w", postgres.ErrRunAgain)
		}
		return fmt.Errorf("idem.Store.Save: %w", err)
	}
	scope = scope.normalized()
	if err := postgres.BeforeCommit(ctx, onErr, saveSQL, scope.WorkspaceID, scope.UserID, scope.Method, scope.Path,
		scope.Key, id, fp.MAC, fp.KeyID, resp.Status, headers, body, retention.Microseconds()); err != nil {
		return fmt.Errorf("idem.Store.SaveAtCommit: %w", err)
	}
	return nil
}

// DeleteExpired deletes up to limit expired records of the transaction's workspace and returns
// how many it deleted. Rows locked by another transaction are skipped, never waited for.
// Without a workspace in the transaction's scope it deletes nothing (RLS) and says so.
func (s *Store) DeleteExpired(ctx context.Context, limit int) (int64, error) {
	tx, sc, err := txFrom(ctx, "DeleteExpired")
	if err != nil {
		return 0, err
	}
	if sc.WorkspaceID == uuid.Nil {
		return 0, errors.New("idem.Store.DeleteExpired: the transaction has no workspace scope")
	}
	// The batch is a materialized CTE: as an IN (subquery) the planner may rescan the LIMIT
	// per outer row (a nested-loop semi join) and delete more than limit rows.
	tag, err := tx.Exec(ctx, `WITH batch AS MATERIALIZED (
		SELECT user_id, method, path, idempotency_key FROM idempotency_requests
		WHERE workspace_id = $1 AND expires_at <= now()
		ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		DELETE FROM idempotency_requests r USING batch
		WHERE r.workspace_id = $1 AND r.user_id = batch.user_id AND r.method = batch.method
		  AND r.path = batch.path AND r.idempotency_key = batch.idempotency_key`, sc.WorkspaceID, limit)
	if err != nil {
		return 0, fmt.Errorf("idem.Store.DeleteExpired: %w", postgres.TranslateError(err))
	}
	return tag.RowsAffected(), nil
}

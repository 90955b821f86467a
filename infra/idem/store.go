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

// Record statuses (the CHECK of idempotency_requests.status).
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

// ClaimResult is what Store.Claim found or did.
type ClaimResult struct {
	// Locked reports whether this transaction now holds the scope's advisory lock.
	Locked bool
	// Inserted reports that an executing record with the given id was inserted: this
	// transaction owns the key and runs the handler.
	Inserted bool
	// Existing is the record visible when the statement started, if any. When Locked is true,
	// Inserted false and Existing nil, the insert met a record committed after the statement's
	// snapshot: read it again with Get.
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

// insertSQL is the claim of a fresh key, the common case: it inserts an executing record
// when it gets the scope's advisory lock (without waiting) and no record of the scope exists,
// and returns its id; otherwise nothing (Claim then tells why). An uncommitted record of the
// scope inserted by another transaction is waited for at the unique constraint.
const insertSQL = `
INSERT INTO idempotency_requests (id, workspace_id, user_id, method, path, idempotency_key,
  request_fingerprint, fingerprint_key_id, status, expires_at)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, 'executing', now() + $9::bigint * interval '1 microsecond'
WHERE pg_try_advisory_xact_lock($10)
ON CONFLICT ON CONSTRAINT idempotency_requests_scope DO NOTHING
RETURNING id`

func insertArgs(scope Scope, id uuid.UUID, fp Fingerprint, retention time.Duration) []any {
	scope = scope.normalized()
	return []any{id, scope.WorkspaceID, scope.UserID, scope.Method, scope.Path, scope.Key, fp.MAC, fp.KeyID,
		retention.Microseconds(), scope.LockID()}
}

// readInserted reads insertSQL's result: whether it inserted the record.
func readInserted(rows pgx.Rows) (bool, error) {
	inserted := rows.Next()
	rows.Close()
	return inserted, rows.Err()
}

// TryInsert is the claim of a fresh key in one statement: it takes the scope's advisory lock
// if it is free (never waiting) and, holding it, inserts an executing record with id and fp
// when the scope has none; true when it did. false says nothing more: Claim tells what
// stopped it. Run it inside the RLS transaction of the scope's workspace.
func (s *Store) TryInsert(ctx context.Context, scope Scope, id uuid.UUID, fp Fingerprint, retention time.Duration) (bool, error) {
	tx, _, err := txFrom(ctx, "TryInsert")
	if err != nil {
		return false, err
	}
	rows, err := tx.Query(ctx, insertSQL, insertArgs(scope, id, fp, retention)...)
	if err == nil {
		var inserted bool
		if inserted, err = readInserted(rows); err == nil {
			return inserted, nil
		}
	}
	return false, fmt.Errorf("idem.Store.TryInsert: %w", postgres.TranslateError(err))
}

// TryInsertOpening is TryInsert as the Opening of the transaction it runs in (sent with the
// BEGIN, see postgres.Opening): its Read returns the bool.
func (s *Store) TryInsertOpening(key any, scope Scope, id uuid.UUID, fp Fingerprint, retention time.Duration) *postgres.Opening {
	return &postgres.Opening{Key: key, SQL: insertSQL, Args: insertArgs(scope, id, fp, retention),
		Read:  func(rows pgx.Rows) (any, error) { return readInserted(rows) },
		OnErr: func(err error) error { return fmt.Errorf("idem.Store.TryInsert: %w", err) }}
}

// claimSQL takes the scope's advisory lock without waiting, reads the record of the scope and,
// when the lock was obtained and no record is visible, inserts an executing record. All in one
// round trip. The read uses the statement's snapshot, taken before the lock: a record committed
// in between is caught by the unique constraint (ON CONFLICT DO NOTHING) and re-read by the
// caller with a fresh statement.
const claimSQL = `
WITH lk AS MATERIALIZED (
  SELECT pg_try_advisory_xact_lock($1) AS locked
), cur AS MATERIALIZED (
  SELECT ` + recordColumns + `
  FROM idempotency_requests r
  WHERE r.workspace_id = $2 AND r.user_id = $3 AND r.method = $4 AND r.path = $5 AND r.idempotency_key = $6
), ins AS (
  INSERT INTO idempotency_requests (id, workspace_id, user_id, method, path, idempotency_key,
    request_fingerprint, fingerprint_key_id, status, expires_at)
  SELECT $7, $2, $3, $4, $5, $6, $8, $9, 'executing', now() + $10::bigint * interval '1 microsecond'
  FROM lk WHERE lk.locked AND NOT EXISTS (SELECT 1 FROM cur)
  ON CONFLICT ON CONSTRAINT idempotency_requests_scope DO NOTHING
  RETURNING id
)
SELECT lk.locked, EXISTS (SELECT 1 FROM ins), cur.*
FROM lk LEFT JOIN cur ON true`

// Claim takes the scope's transaction-level advisory lock if it is free (never waiting), reads
// the scope's record, and inserts an executing record with id and fp when it holds the lock
// and saw none; expires_at is now() + retention. See ClaimResult. Run it inside the RLS
// transaction of the scope's workspace.
func (s *Store) Claim(ctx context.Context, scope Scope, id uuid.UUID, fp Fingerprint, retention time.Duration) (ClaimResult, error) {
	tx, _, err := txFrom(ctx, "Claim")
	if err != nil {
		return ClaimResult{}, err
	}
	scope = scope.normalized()
	var (
		res           ClaimResult
		rid           *uuid.UUID
		status, keyID *string
		mac, body     []byte
		respStatus    *int32
		headers       map[string]string
		expired       *bool
	)
	err = tx.QueryRow(ctx, claimSQL, scope.LockID(), scope.WorkspaceID, scope.UserID, scope.Method,
		scope.Path, scope.Key, id, fp.MAC, fp.KeyID, retention.Microseconds()).
		Scan(&res.Locked, &res.Inserted, &rid, &status, &mac, &keyID, &respStatus, &headers, &body, &expired)
	if err != nil {
		return ClaimResult{}, fmt.Errorf("idem.Store.Claim: %w", postgres.TranslateError(err))
	}
	if rid != nil {
		res.Existing = buildRecord(*rid, *status, mac, *keyID, respStatus, headers, body, *expired)
	}
	return res, nil
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

// Get reads the scope's record with a fresh statement; nil when there is none.
func (s *Store) Get(ctx context.Context, scope Scope) (*Record, error) {
	tx, _, err := txFrom(ctx, "Get")
	if err != nil {
		return nil, err
	}
	scope = scope.normalized()
	var (
		rid           uuid.UUID
		status, keyID string
		mac, body     []byte
		respStatus    *int32
		headers       map[string]string
		expired       bool
	)
	err = tx.QueryRow(ctx, `SELECT `+recordColumns+` FROM idempotency_requests r
		WHERE r.workspace_id = $1 AND r.user_id = $2 AND r.method = $3 AND r.path = $4 AND r.idempotency_key = $5`,
		scope.WorkspaceID, scope.UserID, scope.Method, scope.Path, scope.Key).
		Scan(&rid, &status, &mac, &keyID, &respStatus, &headers, &body, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("idem.Store.Get: %w", postgres.TranslateError(err))
	}
	return buildRecord(rid, status, mac, keyID, respStatus, headers, body, expired), nil
}

// Insert inserts an executing record; false when a record of the scope exists already (a
// unique-constraint conflict, waited for if the other transaction is still open).
func (s *Store) Insert(ctx context.Context, scope Scope, id uuid.UUID, fp Fingerprint, retention time.Duration) (bool, error) {
	tx, _, err := txFrom(ctx, "Insert")
	if err != nil {
		return false, err
	}
	scope = scope.normalized()
	tag, err := tx.Exec(ctx, `INSERT INTO idempotency_requests (id, workspace_id, user_id, method, path,
		idempotency_key, request_fingerprint, fingerprint_key_id, status, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'executing', now() + $9::bigint * interval '1 microsecond')
		ON CONFLICT ON CONSTRAINT idempotency_requests_scope DO NOTHING`,
		id, scope.WorkspaceID, scope.UserID, scope.Method, scope.Path, scope.Key, fp.MAC, fp.KeyID, retention.Microseconds())
	if err != nil {
		return false, fmt.Errorf("idem.Store.Insert: %w", postgres.TranslateError(err))
	}
	return tag.RowsAffected() == 1, nil
}

// DeleteExpiredRecord deletes the record of scope with id if it has expired.
func (s *Store) DeleteExpiredRecord(ctx context.Context, scope Scope, id uuid.UUID) error {
	tx, _, err := txFrom(ctx, "DeleteExpiredRecord")
	if err != nil {
		return err
	}
	scope = scope.normalized()
	if _, err := tx.Exec(ctx, `DELETE FROM idempotency_requests
		WHERE workspace_id = $1 AND user_id = $2 AND method = $3 AND path = $4 AND idempotency_key = $5
		  AND id = $6 AND expires_at <= now()`,
		scope.WorkspaceID, scope.UserID, scope.Method, scope.Path, scope.Key, id); err != nil {
		return fmt.Errorf("idem.Store.DeleteExpiredRecord: %w", postgres.TranslateError(err))
	}
	return nil
}

// completeAtCommitSQL completes the executing record of scope ($1..$5) with id $6 with the
// response; it fails (division by zero, 22012) unless exactly that one executing record was
// updated, so that the commit it travels with does not happen.
const completeAtCommitSQL = `
WITH u AS (
  UPDATE idempotency_requests
  SET status = 'completed', response_status = $7, response_headers = $8, response_body = $9, completed_at = now()
  WHERE workspace_id = $1 AND user_id = $2 AND method = $3 AND path = $4 AND idempotency_key = $5
    AND id = $6 AND status = 'executing'
  RETURNING 1
)
SELECT 1 / count(*)::int FROM u`

// CompleteAtCommit completes the executing record of scope with id, with the response to
// replay, at the commit of the transaction of ctx: the update travels in the commit's round
// trip (postgres.BeforeCommit). When that record is not executing in this transaction, the
// transaction rolls back and the commit fails with an error naming idem.Store.Complete.
func (s *Store) CompleteAtCommit(ctx context.Context, scope Scope, id uuid.UUID, resp bus.Response) error {
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
			return fmt.Errorf("idem.Store.Complete: record %s is not executing in this transaction", id)
		}
		return fmt.Errorf("idem.Store.Complete: %w", err)
	}
	scope = scope.normalized()
	if err := postgres.BeforeCommit(ctx, onErr, completeAtCommitSQL, scope.WorkspaceID, scope.UserID, scope.Method, scope.Path,
		scope.Key, id, resp.Status, headers, body); err != nil {
		return fmt.Errorf("idem.Store.CompleteAtCommit: %w", err)
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

package idem

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

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
	var buf [256]byte // on the stack for the usual method and path
	msg := append(buf[:0], "listingkit/idempotency-lock/v1\x00"...)
	msg = append(msg, s.WorkspaceID[:]...)
	msg = append(msg, s.UserID[:]...)
	for _, part := range []string{s.Method, s.Path} {
		msg = appendFrame(msg, part)
	}
	msg = append(msg, s.Key[:]...)
	sum := sha256.Sum256(msg)
	return int64(binary.BigEndian.Uint64(sum[:8]))
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
	// Existing is the scope's record as of the statement's snapshot, nil when there was
	// none. A record committed after that snapshot by a transaction that held the lock may
	// be missed (Locked is then true, the lock having been released); the record's write at
	// the commit then meets it at the unique constraint (SaveAtCommit).
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

// lookSQL asks for the scope's transaction-level advisory lock ($6) without waiting and
// reads the scope's record ($1..$5), in one statement: one row, whose id is NULL when the
// scope has no record.
const lookSQL = `SELECT pg_try_advisory_xact_lock($6), ` + recordColumns + `
	FROM (VALUES (1)) AS one (x) LEFT JOIN idempotency_requests r
	ON r.workspace_id = $1 AND r.user_id = $2 AND r.method = $3 AND r.path = $4 AND r.idempotency_key = $5`

func lookArgs(scope Scope) []any {
	return []any{scope.WorkspaceID, scope.UserID, scope.Method, scope.Path, scope.Key, scope.LockID()}
}

// readLook reads lookSQL's row.
func readLook(rows pgx.Rows) (Look, error) {
	var (
		locked        bool
		rid           *uuid.UUID
		status, keyID *string
		mac, body     []byte
		respStatus    *int32
		headers       map[string]string
		expired       *bool
	)
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Look{}, err
		}
		return Look{}, errors.New("no row")
	}
	// A fresh key's row (no record: r.id is NULL) is read from its raw values: the lock's
	// answer alone, without planning the scan of eight NULL columns.
	if raw := rows.RawValues(); len(raw) == 9 && raw[1] == nil && len(raw[0]) == 1 {
		locked := raw[0][0] == 1 // binary
		if rows.FieldDescriptions()[0].Format == pgx.TextFormatCode {
			locked = raw[0][0] == 't'
		}
		rows.Close()
		return Look{Locked: locked}, rows.Err()
	}
	if err := rows.Scan(&locked, &rid, &status, &mac, &keyID, &respStatus, &headers, &body, &expired); err != nil {
		return Look{}, err
	}
	rows.Close()
	look := Look{Locked: locked}
	if rid != nil && status != nil && keyID != nil && expired != nil {
		look.Existing = buildRecord(*rid, *status, mac, *keyID, respStatus, headers, body, *expired)
	}
	return look, rows.Err()
}

// Look asks for the scope's advisory lock without waiting and reads the scope's record, in
// one statement (lookSQL). Nothing is written. Run it inside the RLS transaction of the
// scope's workspace.
func (s *Store) Look(ctx context.Context, scope Scope) (Look, error) {
	tx, _, err := txFrom(ctx, "Look")
	if err != nil {
		return Look{}, err
	}
	rows, err := tx.Query(ctx, lookSQL, lookArgs(scope.normalized())...)
	if err != nil {
		return Look{}, fmt.Errorf("idem.Store.Look: %w", postgres.TranslateError(err))
	}
	defer rows.Close()
	look, err := readLook(rows)
	if err != nil {
		return Look{}, fmt.Errorf("idem.Store.Look: %w", postgres.TranslateError(err))
	}
	return look, nil
}

// LookOpening is Look as an Opening of the transaction it runs in (sent with its BEGIN, see
// postgres.Opening) under key: its Read returns a Look.
func (s *Store) LookOpening(key any, scope Scope) *postgres.Opening {
	return &postgres.Opening{
		Key: key, SQL: lookSQL, Args: lookArgs(scope.normalized()),
		Read:  func(rows pgx.Rows) (any, error) { return readLook(rows) },
		OnErr: func(err error) error { return fmt.Errorf("idem.Store.Look: %w", err) },
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

// insertSQL writes the completed record of scope ($1..$5) with id $6, fingerprint ($7, $8),
// response ($9..$11) and retention ($12, microseconds; never less than MinRetention: the
// table has no CHECK constraints, sql/087, so the statement holds the status and the
// bound itself). It fails at the unique constraint
// (23505) when a record of the scope exists: one committed after the request looked, or, once
// it has committed, one written by a transaction still open, which it waits for. A plain
// INSERT, so that the commit may send it merged with the transaction's other writes
// (postgres.BeforeCommitWrite).
const insertSQL = `INSERT INTO idempotency_requests (id, workspace_id, user_id, method, path, idempotency_key,
    request_fingerprint, fingerprint_key_id, status, response_status, response_headers, response_body,
    completed_at, expires_at)
  VALUES ($6, $1, $2, $3, $4, $5, $7, $8, 'completed', $9, $10, $11, now(),
    now() + greatest($12::bigint, 86400000000) * interval '1 microsecond')`

// The bound in insertSQL is MinRetention in microseconds (this fails to compile otherwise).
var _ = [1]int{}[int64(MinRetention/time.Microsecond)-86400000000]

// replaceSQL is insertSQL in place of an expired record of the scope, which the request saw;
// it fails (division by zero, 22012) when the scope's record is live by then, so that the
// commit it travels with does not happen.
const replaceSQL = `
WITH w AS (` + insertSQL + `
  ON CONFLICT ON CONSTRAINT idempotency_requests_scope DO UPDATE
  SET id = excluded.id, request_fingerprint = excluded.request_fingerprint,
    fingerprint_key_id = excluded.fingerprint_key_id, status = excluded.status,
    response_status = excluded.response_status, response_headers = excluded.response_headers,
    response_body = excluded.response_body, created_at = now(), completed_at = now(),
    expires_at = excluded.expires_at
  WHERE idempotency_requests.expires_at <= now()
  RETURNING 1
)
SELECT 1 / count(*)::int FROM w`

// SaveAtCommit writes the completed record of scope (id, fp, the response to replay, kept
// for retention) at the commit of the transaction of ctx: the write travels in the commit's
// round trip, merged with the transaction's other writes queued for it
// (postgres.BeforeCommitWrite), the record's only write. replacing says that the request saw
// an expired record of the scope, which the record then replaces. When a live record of the
// scope was committed by another transaction after this one looked, the commit fails with
// postgres.ErrRunAgain (wrapped): the invocation runs again and finds that record.
func (s *Store) SaveAtCommit(ctx context.Context, scope Scope, id uuid.UUID, fp Fingerprint, retention time.Duration, resp bus.Response, replacing bool) error {
	headers := headersJSON(resp.Header)
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	onErr := func(err error) error {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "22012" ||
			pgErr.Code == "23505" && pgErr.ConstraintName == "idempotency_requests_scope") {
			return fmt.Errorf("idem.Store.Save: another transaction committed a record of the scope: %w", postgres.ErrRunAgain)
		}
		return fmt.Errorf("idem.Store.Save: %w", err)
	}
	scope = scope.normalized()
	args := []any{scope.WorkspaceID, scope.UserID, scope.Method, scope.Path,
		scope.Key, id, fp.MAC, fp.KeyID, resp.Status, headers, body, retention.Microseconds()}
	var err error
	if replacing {
		err = postgres.BeforeCommit(ctx, onErr, replaceSQL, args...)
	} else {
		err = postgres.BeforeCommitWrite(ctx, "idempotency_requests", onErr, insertSQL, args...)
	}
	if err != nil {
		return fmt.Errorf("idem.Store.SaveAtCommit: %w", err)
	}
	return nil
}

// headersJSON encodes stored headers as the JSON object response_headers holds (jsonb: the
// order of the members does not matter), without encoding/json's reflection and sorting.
func headersJSON(h map[string]string) []byte {
	n := 2
	for k, v := range h {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			b, _ := json.Marshal(h) // invalid UTF-8 becomes U+FFFD, as before
			return b
		}
		n += len(k) + len(v) + 6
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for k, v := range h {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, v)
	}
	return append(b, '}')
}

// appendJSONString appends s, valid UTF-8, as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
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

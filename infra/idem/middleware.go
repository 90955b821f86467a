package idem

import (
	"context"
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
)

// Guard is the idempotency middleware with its configuration. It is safe for concurrent use.
type Guard struct {
	store  *Store
	cfg    Config
	fp     *Fingerprinter
	stored map[string]bool
}

// New validates cfg (after defaults) and returns a Guard over store.
func New(store *Store, cfg Config) (*Guard, error) {
	if store == nil {
		return nil, errors.New("idem.New: nil store")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("idem.New: %w", err)
	}
	fp, err := NewFingerprinter(cfg.Keys)
	if err != nil {
		return nil, fmt.Errorf("idem.New: %w", err)
	}
	g := &Guard{store: store, cfg: cfg, fp: fp, stored: map[string]bool{}}
	for _, h := range cfg.StoredHeaders {
		g.stored[textproto.CanonicalMIMEHeaderKey(h)] = true
	}
	return g, nil
}

// Middleware is New(store, cfg).Middleware().
func Middleware(store *Store, cfg Config) (bus.Middleware, error) {
	g, err := New(store, cfg)
	if err != nil {
		return nil, err
	}
	return g.Middleware(), nil
}

// Retention is how long records are kept.
func (g *Guard) Retention() time.Duration { return g.cfg.Retention }

// RetentionHeader is the value of the Idempotency-Retention header: the retention in whole
// seconds.
func (g *Guard) RetentionHeader() string {
	return strconv.FormatInt(int64(g.cfg.Retention/time.Second), 10)
}

// Fingerprinter is the guard's fingerprinter.
func (g *Guard) Fingerprinter() *Fingerprinter { return g.fp }

// Middleware returns the bus middleware. It must come after postgres.TxMiddleware in the chain
// (inside the RLS transaction); it fails when the context carries no transaction.
//
// An invocation without Idempotency goes straight to next. Otherwise, in the transaction:
//   - the scope's advisory lock is taken without waiting; when another transaction holds it,
//     a completed record already committed is still replayed (or refused as reused), and
//     anything else is answered at once with ErrRequestInProgress carrying RetryAfter;
//   - a completed record with the same fingerprint is replayed: Outcome{Replayed: true,
//     Response: stored}, next is not called;
//   - a completed record with another fingerprint is ErrKeyReused;
//   - an expired record counts as absent: it is deleted and the request executes;
//   - otherwise an executing record is inserted, next runs, the result is rendered with
//     Idempotency.Render, the record completes with that response, and Outcome.Response is
//     exactly the stored response (status, stored headers, body). An error from next, from
//     Render, or ErrResponseTooLarge is returned and the transaction rolls back with the record.
func (g *Guard) Middleware() bus.Middleware {
	return func(ctx context.Context, inv bus.Invocation, next bus.Next) (bus.Outcome, error) {
		if inv.Idempotency == nil {
			return next(ctx)
		}
		return g.run(ctx, inv, next)
	}
}

// request is what the guard derives from an idempotent invocation before it runs: the
// scope, the request's fingerprint and the id of the record it would insert.
type request struct {
	scope Scope
	fp    Fingerprint
	id    uuid.UUID
}

func (g *Guard) request(inv bus.Invocation) (request, error) {
	req := inv.Idempotency
	if req.Render == nil {
		return request{}, fmt.Errorf("idem.Middleware %s: Idempotency.Render is nil", inv.Name)
	}
	scope := Scope{
		WorkspaceID: inv.Actor.WorkspaceID, UserID: inv.Actor.UserID,
		Method: req.Method, Path: req.Path, Key: req.Key,
	}.normalized()
	if err := scope.validate(); err != nil {
		return request{}, fmt.Errorf("idem.Middleware %s: %w", inv.Name, err)
	}
	return request{scope: scope, fp: g.fp.Fingerprint(scope.Method, scope.Path, req.Fingerprint), id: newRecordID()}, nil
}

// openingKey names the guard's Opening (postgres.Opened).
type openingKey struct{}

// openedClaim is what the guard's Opening found: the request and whether its record was
// inserted.
type openedClaim struct {
	request
	inserted bool
}

// Opening is the guard's postgres.Opener: the claim of a fresh key (Store.TryInsert) of an
// idempotent invocation travels with its transaction's BEGIN, one round trip fewer. Pass it
// to the postgres.TxMiddleware of the chain the guard's Middleware runs in; without it the
// Middleware sends the claim itself.
func (g *Guard) Opening(_ context.Context, inv bus.Invocation) *postgres.Opening {
	if inv.Idempotency == nil {
		return nil
	}
	r, err := g.request(inv)
	if err != nil {
		return nil // the Middleware reports it, before anything runs
	}
	op := g.store.TryInsertOpening(openingKey{}, r.scope, r.id, r.fp, g.cfg.Retention)
	read := op.Read
	op.Read = func(rows pgx.Rows) (any, error) {
		inserted, err := read(rows)
		if err != nil {
			return nil, err
		}
		return openedClaim{request: r, inserted: inserted.(bool)}, nil
	}
	return op
}

func (g *Guard) run(ctx context.Context, inv bus.Invocation, next bus.Next) (bus.Outcome, error) {
	req := inv.Idempotency
	_, txScope, err := postgres.TxFromContext(ctx)
	if err != nil {
		return bus.Outcome{}, fmt.Errorf("idem.Middleware %s: must run inside the RLS transaction: %w", inv.Name, err)
	}
	if txScope.WorkspaceID != inv.Actor.WorkspaceID || txScope.UserID != inv.Actor.UserID {
		return bus.Outcome{}, fmt.Errorf("idem.Middleware %s: the transaction's scope is not the actor's", inv.Name)
	}
	// The claim of a fresh key: sent with the BEGIN (Opening), or now.
	var r request
	var inserted bool
	if v, ok := postgres.Opened(ctx, openingKey{}); ok {
		oc := v.(openedClaim)
		r, inserted = oc.request, oc.inserted
	} else {
		if r, err = g.request(inv); err != nil {
			return bus.Outcome{}, err
		}
		if inserted, err = g.store.TryInsert(ctx, r.scope, r.id, r.fp, g.cfg.Retention); err != nil {
			return bus.Outcome{}, err
		}
	}
	if !inserted {
		if out, done, err := g.claim(ctx, inv, r); done || err != nil {
			return out, err
		}
	}

	g.cfg.Metrics.execution(inv.Name)
	out, err := next(ctx)
	if err != nil {
		return bus.Outcome{}, err
	}
	resp, err := req.Render(out.Result)
	if err != nil {
		return bus.Outcome{}, fmt.Errorf("idem.Middleware %s: render: %w", inv.Name, err)
	}
	resp, err = g.storable(resp)
	if err != nil {
		return bus.Outcome{}, err
	}
	// The record completes in the commit's round trip: one round trip fewer per request.
	if err := g.store.CompleteAtCommit(ctx, r.scope, r.id, resp); err != nil {
		return bus.Outcome{}, err
	}
	out.Response = &resp
	out.Replayed = false
	return out, nil
}

// claim is the claim of a key that TryInsert did not insert: the scope's lock is held
// elsewhere, or a record of the scope exists. done reports that it answered (a replay, or an
// error such as ErrRequestInProgress or ErrKeyReused); otherwise it has inserted r's
// executing record and the request executes.
func (g *Guard) claim(ctx context.Context, inv bus.Invocation, r request) (out bus.Outcome, done bool, err error) {
	claim, err := g.store.Claim(ctx, r.scope, r.id, r.fp, g.cfg.Retention)
	if err != nil {
		return bus.Outcome{}, true, err
	}
	if !claim.Locked {
		// Another transaction holds the scope. Only a completed, live record is final.
		if rec := claim.Existing; rec != nil && rec.Status == StatusCompleted && !rec.Expired {
			out, err = g.answer(inv, r.scope, rec)
			return out, true, err
		}
		g.cfg.Metrics.inProgress(inv.Name)
		return bus.Outcome{}, true, ErrRequestInProgress.WithRetryAfter(g.cfg.RetryAfter)
	}
	if claim.Inserted {
		return bus.Outcome{}, false, nil
	}
	// We hold the lock: nobody else can insert or complete this scope until we end. A record
	// committed between the claim's snapshot and the lock is re-read with a fresh statement; an
	// expired one is deleted and replaced. Only the cleanup can still remove a record under
	// us, so the loop ends within a few turns.
	existing := claim.Existing
	for range 3 {
		if existing == nil {
			if existing, err = g.store.Get(ctx, r.scope); err != nil {
				return bus.Outcome{}, true, err
			}
		}
		if existing != nil && !existing.Expired {
			out, err = g.answer(inv, r.scope, existing)
			return out, true, err
		}
		if existing != nil {
			if err := g.store.DeleteExpiredRecord(ctx, r.scope, existing.ID); err != nil {
				return bus.Outcome{}, true, err
			}
		}
		inserted, err := g.store.Insert(ctx, r.scope, r.id, r.fp, g.cfg.Retention)
		if err != nil {
			return bus.Outcome{}, true, err
		}
		if inserted {
			return bus.Outcome{}, false, nil
		}
		existing = nil
	}
	g.cfg.Metrics.inProgress(inv.Name)
	return bus.Outcome{}, true, ErrRequestInProgress.WithRetryAfter(g.cfg.RetryAfter)
}

// answer turns a visible record into a replay, ErrKeyReused or ErrRequestInProgress.
func (g *Guard) answer(inv bus.Invocation, scope Scope, r *Record) (bus.Outcome, error) {
	if r.Status != StatusCompleted || r.Response == nil {
		g.cfg.Metrics.inProgress(inv.Name)
		return bus.Outcome{}, ErrRequestInProgress.WithRetryAfter(g.cfg.RetryAfter)
	}
	same, err := g.fp.Verify(scope.Method, scope.Path, inv.Idempotency.Fingerprint, r.Fingerprint)
	if err != nil {
		return bus.Outcome{}, domain.ErrInternal.WithMessage("the stored idempotency record cannot be verified").WithCause(err)
	}
	if !same {
		g.cfg.Metrics.conflict(inv.Name)
		return bus.Outcome{}, ErrKeyReused
	}
	g.cfg.Metrics.replay(inv.Name)
	resp := *r.Response
	return bus.Outcome{Replayed: true, Response: &resp}, nil
}

// storable keeps the stored headers only, and refuses a response larger than the bound.
func (g *Guard) storable(resp bus.Response) (bus.Response, error) {
	if resp.Status < 100 || resp.Status > 599 {
		return bus.Response{}, fmt.Errorf("idem.Middleware: rendered status %d is not an HTTP status", resp.Status)
	}
	out := bus.Response{Status: resp.Status, Header: make(map[string]string, len(resp.Header)), Body: resp.Body}
	size := len(resp.Body)
	for name, v := range resp.Header {
		name = textproto.CanonicalMIMEHeaderKey(name)
		if !g.stored[name] {
			continue
		}
		out.Header[name] = v
		size += len(name) + len(v)
	}
	if out.Body == nil {
		out.Body = []byte{}
	}
	if size > g.cfg.MaxResponseBytes {
		return bus.Response{}, ErrResponseTooLarge.WithCause(
			fmt.Errorf("rendered response of %d bytes exceeds the %d-byte bound", size, g.cfg.MaxResponseBytes))
	}
	return out, nil
}

// newRecordID returns a time-ordered id (domain.NewID) for index locality.
func newRecordID() uuid.UUID { return domain.NewID() }

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
// An invocation without Idempotency goes straight to next. Otherwise, in the transaction, the
// scope's advisory lock is asked for without waiting and the scope's record read, by one
// statement sent with the BEGIN (Opening):
//   - a live completed record with the same fingerprint is replayed: Outcome{Replayed: true,
//     Response: stored}, next is not called; one with another fingerprint is ErrKeyReused;
//   - otherwise, when another transaction holds the lock, the request is answered at once
//     with ErrRequestInProgress carrying RetryAfter;
//   - otherwise (no record, or an expired one, which counts as absent) next runs, the result
//     is rendered with Idempotency.Render, and the completed record is written at the commit,
//     the record's one write, merged with the transaction's other writes queued for the
//     commit; Outcome.Response is exactly the stored response (status, stored headers,
//     body). An error from next, from Render, or ErrResponseTooLarge is returned and the
//     transaction rolls back: no record remains.
//
// A record committed after this transaction's read (by a transaction that took no lock, or
// by the lock's holder between the read's snapshot and the lock) fails the commit at the
// unique constraint with postgres.ErrRunAgain: postgres.TxMiddleware runs the chain again,
// and the second run answers from that record.
func (g *Guard) Middleware() bus.Middleware {
	return func(ctx context.Context, inv bus.Invocation, next bus.Next) (bus.Outcome, error) {
		if inv.Idempotency == nil {
			return next(ctx)
		}
		return g.run(ctx, inv, next)
	}
}

// request is what the guard derives from an idempotent invocation before it runs: the
// scope, the request's fingerprint and the id of the record it would write.
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

// lookKey names the guard's Opening (postgres.Opened).
type lookKey struct{}

// opened is what the guard's Opening found: the request and the Look of its scope.
type opened struct {
	request
	look Look
}

// Opening is the guard's postgres.Opener: the lock and the read of an idempotent
// invocation's scope (Store.Look) travel with its transaction's BEGIN, one round trip fewer.
// Pass it to the postgres.TxMiddleware of the chain the guard's Middleware runs in; without
// it the Middleware sends them itself.
func (g *Guard) Opening(_ context.Context, inv bus.Invocation) []*postgres.Opening {
	if inv.Idempotency == nil {
		return nil
	}
	r, err := g.request(inv)
	if err != nil {
		return nil // the Middleware reports it, before anything runs
	}
	op := g.store.LookOpening(lookKey{}, r.scope)
	read := op.Read
	op.Read = func(rows pgx.Rows) (any, error) {
		look, err := read(rows)
		if err != nil {
			return nil, err
		}
		return opened{request: r, look: look.(Look)}, nil
	}
	return []*postgres.Opening{op}
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
	// The lock and the read: sent with the BEGIN (Opening), or now.
	var r request
	var look Look
	if v, ok := postgres.Opened(ctx, lookKey{}); ok {
		o := v.(opened)
		r, look = o.request, o.look
	} else {
		if r, err = g.request(inv); err != nil {
			return bus.Outcome{}, err
		}
		if look, err = g.store.Look(ctx, r.scope); err != nil {
			return bus.Outcome{}, err
		}
	}
	if rec := look.Existing; rec != nil && !rec.Expired {
		return g.answer(inv, r.scope, rec)
	}
	if !look.Locked {
		g.cfg.Metrics.inProgress(inv.Name)
		return bus.Outcome{}, ErrRequestInProgress.WithRetryAfter(g.cfg.RetryAfter)
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
	if err := g.store.SaveAtCommit(ctx, r.scope, r.id, r.fp, g.cfg.Retention, resp, look.Existing != nil); err != nil {
		return bus.Outcome{}, err
	}
	out.Response = &resp
	out.Replayed = false
	return out, nil
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

// Package bus is the in-process, typed, synchronous command bus.
//
// A command is a plain struct; its handler implements Handler[C, R]. Execute runs the handler
// through the bus's middleware chain, outermost first. The chain the service assembles is
// logging/metrics → RLS transaction → idempotency → handler, so that everything a handler
// writes, the outbox rows it publishes and the idempotency record commit together or not at all.
//
// Errors keep their type across the bus: a *domain.Error returned by a handler reaches the
// caller unchanged (possibly wrapped), so transports can map it with errors.As.
package bus

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// Command is implemented by every command type. CommandName is a stable identifier used in
// logs, metrics and idempotency scopes; it never changes once released.
type Command interface {
	CommandName() string
}

// Handler handles one command type and returns its result. It runs inside the transaction
// opened by the middleware: it must not commit, roll back or start its own transaction, and
// must not call external systems (those belong to workers).
type Handler[C Command, R any] interface {
	Handle(ctx context.Context, cmd C) (R, error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc[C Command, R any] func(ctx context.Context, cmd C) (R, error)

// Handle calls f.
func (f HandlerFunc[C, R]) Handle(ctx context.Context, cmd C) (R, error) { return f(ctx, cmd) }

// Actor is who runs a command and in which workspace. WorkspaceID scopes the RLS transaction;
// uuid.Nil means no workspace context (only commands that touch no workspace data).
type Actor struct {
	UserID      uuid.UUID
	WorkspaceID uuid.UUID
}

// Response is a transport response rendered inside the transaction, so that the idempotency
// middleware can store exactly what the client receives. Header holds only headers that are
// part of the response's meaning (Content-Type, Location, ETag), never credentials.
type Response struct {
	Status int
	Header map[string]string
	Body   []byte
}

// RenderFunc renders a handler's result as the transport response. It must be deterministic
// and must not include secrets: its output may be stored and replayed.
type RenderFunc func(result any) (Response, error)

// Idempotency describes an idempotent request (docs/http-api.md). Key, Method and Path form
// the scope together with the Actor; Fingerprint is what the stored record is compared with.
type Idempotency struct {
	Key    uuid.UUID
	Method string
	// Path is the normalized actual request path (e.g. /v1/workspaces/<id>/stores).
	Path string
	// Fingerprint is the semantic content of the request: the normalized body and the headers
	// that change its meaning. The store keys it with a server secret; it is never stored raw.
	Fingerprint FingerprintInput
	Render      RenderFunc
}

// FingerprintInput is what a request fingerprint is computed over.
type FingerprintInput struct {
	// Body is the request body as received; the fingerprinter normalizes it by meaning.
	Body []byte
	// Headers are the semantic headers by canonical name (Content-Type, If-Match, ...).
	Headers map[string]string
}

// Invocation is what middleware sees of one Execute call.
type Invocation struct {
	Name        string
	Command     Command
	Actor       Actor
	Idempotency *Idempotency // nil when the request is not idempotent
}

// Outcome is what a middleware chain produces. Result holds the handler's result unless the
// request was answered from a stored response (Replayed), in which case only Response is set.
type Outcome struct {
	Result   any
	Response *Response
	Replayed bool
}

// Next continues the chain.
type Next func(ctx context.Context) (Outcome, error)

// Middleware wraps every command the bus executes. It may stop the chain (not calling next),
// but must then return an error or a replayed Outcome.
type Middleware func(ctx context.Context, inv Invocation, next Next) (Outcome, error)

// Bus runs commands through a fixed middleware chain. It is safe for concurrent use.
type Bus struct {
	chain []Middleware
}

// New returns a bus with the given middleware, outermost first.
func New(middleware ...Middleware) *Bus {
	return &Bus{chain: append([]Middleware(nil), middleware...)}
}

// Request is one command execution.
type Request[C Command] struct {
	Command     C
	Actor       Actor
	Idempotency *Idempotency
}

// Reply is the result of Execute. When Replayed is true, Result is the zero value and
// Response holds the stored response to send as is.
type Reply[R any] struct {
	Result   R
	Response *Response
	Replayed bool
}

// Execute runs h for req through b's middleware.
func Execute[C Command, R any](ctx context.Context, b *Bus, h Handler[C, R], req Request[C]) (Reply[R], error) {
	inv := Invocation{
		Name:        req.Command.CommandName(),
		Command:     req.Command,
		Actor:       req.Actor,
		Idempotency: req.Idempotency,
	}
	final := func(ctx context.Context) (Outcome, error) {
		r, err := h.Handle(ctx, req.Command)
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{Result: r}, nil
	}
	out, err := b.run(ctx, inv, 0, final)
	if err != nil {
		return Reply[R]{}, err
	}
	reply := Reply[R]{Response: out.Response, Replayed: out.Replayed}
	if out.Replayed {
		return reply, nil
	}
	r, ok := out.Result.(R)
	if !ok && out.Result != nil {
		return Reply[R]{}, fmt.Errorf("bus.Execute %s: middleware changed the result type to %T", inv.Name, out.Result)
	}
	reply.Result = r
	return reply, nil
}

func (b *Bus) run(ctx context.Context, inv Invocation, i int, final Next) (Outcome, error) {
	if i == len(b.chain) {
		return final(ctx)
	}
	return b.chain[i](ctx, inv, func(ctx context.Context) (Outcome, error) {
		return b.run(ctx, inv, i+1, final)
	})
}

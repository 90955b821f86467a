package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/outbox"
)

// This file is the message transport of the command catalogue (catalogue.go): a command that
// arrives as a message (infra/commandstream) runs from the catalogue as its HTTP endpoint's
// request would, never through the HTTP router: the same strict decoding and validation, the
// same command bus (RLS transaction, idempotency, outbox) and the same rendering, so that a
// message's reply holds exactly what the endpoint would answer. Only the idempotency scope
// differs: method MSG, the command's type as the path, the key the transport derives from the
// message.

// MessageMethod is the idempotency method of commands that arrive as messages.
const MessageMethod = "MSG"

// Error codes of the message transport.
var (
	// ErrCommandTypeUnknown: the message's type names no command.
	ErrCommandTypeUnknown = domain.NewError(domain.KindInvalid, "COMMAND_TYPE_UNKNOWN", "the command type is not one this service accepts")
	// ErrCommandDataInvalid: the message's data is not a JSON object with the path's ids.
	ErrCommandDataInvalid = domain.NewError(domain.KindInvalid, "COMMAND_DATA_INVALID", "the command's data is not valid")
)

// MessageCommandTypes lists the command types the flows declare (worker.Spec.Messages), which
// ExecuteMessage accepts, sorted.
func MessageCommandTypes() []string {
	var out []string
	for _, f := range flows.All() {
		for _, m := range f.Messages {
			out = append(out, m.Type)
		}
		if f.Start != nil {
			out = append(out, f.Start.Type)
		}
	}
	slices.Sort(out)
	return out
}

// MessageCommand is one command that arrived as a message, from an authenticated sender.
type MessageCommand struct {
	// Type is the command's type (listing.publish).
	Type string
	// WorkspaceID and UserID are the principal's workspace and user: the command runs as
	// that user, in that workspace.
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	// Key is the idempotency key; with method MSG and Type as the path it scopes the record.
	Key uuid.UUID
	// Data is the command's data: the endpoint's JSON body plus the path's ids by name.
	Data []byte
	// CorrelationID names the message in logs, problem bodies (request_id) and the outbox
	// events the command publishes.
	CorrelationID string
	// Traceparent is the sender's W3C trace context, continued by the command's events; optional.
	Traceparent string
}

// MessageResult is what the endpoint answered.
type MessageResult struct {
	// Status is the HTTP status the endpoint answered.
	Status int
	// Body is the response body: {"<resource>": …, "operation": …} when accepted, an RFC 9457
	// problem otherwise.
	Body []byte
	// Replayed reports an answer from the idempotency store (a message delivered again).
	Replayed bool
	// Retryable is set when the refusal is transient (Retry-After, 5xx, 429): nothing was
	// done and the same message may succeed later.
	Retryable bool
}

// Accepted reports whether the command was executed (or replayed): a 2xx status.
func (r MessageResult) Accepted() bool { return r.Status >= 200 && r.Status < 300 }

// ExecuteMessage runs m from the command catalogue and returns what its endpoint would
// answer: the one place where a message enters the command bus. An unknown type is
// COMMAND_TYPE_UNKNOWN; data that is not a JSON object, or whose ids (Command.Params) are
// missing or not UUIDs, is COMMAND_DATA_INVALID; the rest is the command's own answer. It
// never returns a secret: the bodies are those the endpoint would send.
func (s *Server) ExecuteMessage(ctx context.Context, m MessageCommand) MessageResult {
	cmd, ok := s.commands.Lookup(m.Type)
	if !ok {
		return s.messageError(ctx, m, ErrCommandTypeUnknown.WithMessage("unknown command type; see docs/integrations.md"))
	}
	var fields map[string]json.RawMessage
	if err := decodeJSON(m.Data, &fields); err != nil || fields == nil {
		var unknown *domain.Error
		if errors.As(err, &unknown) && unknown.Code == errUnknownField.Code {
			return s.messageError(ctx, m, unknown) // a name given twice
		}
		return s.messageError(ctx, m, ErrCommandDataInvalid.WithMessage("data must be a JSON object"))
	}
	// A problem names the endpoint's path as its instance, as the endpoint's would.
	instance := "/" + m.Type
	if cmd.Path != "" {
		instance = "/v1/workspaces/" + m.WorkspaceID.String() + cmd.Path
	}
	ids := make(map[string]uuid.UUID, len(cmd.Params))
	for _, p := range cmd.Params {
		var v string
		raw, present := fields[p.Name]
		if !present || json.Unmarshal(raw, &v) != nil {
			return s.messageError(ctx, m, ErrCommandDataInvalid.WithField(p.Name, "required: a UUID"))
		}
		id, err := uuid.Parse(v)
		if err != nil {
			return s.messageError(ctx, m, ErrCommandDataInvalid.WithField(p.Name, "must be a UUID"))
		}
		delete(fields, p.Name)
		ids[p.Name] = id
		instance = strings.Replace(instance, "{"+p.Name+"}", id.String(), 1)
	}
	body, err := json.Marshal(fields)
	if err != nil {
		return s.messageError(ctx, m, ErrCommandDataInvalid.WithMessage("data must be a JSON object"))
	}
	ctx = s.messageContext(ctx, m)
	// The limits readBody applies to an HTTP body.
	switch {
	case int64(len(body)) > s.cfg.MaxBodyBytes:
		return s.problemAt(ctx, instance, errBodyTooLarge)
	case !utf8.Valid(body):
		return s.problemAt(ctx, instance, errMalformed.WithMessage("the body is not valid UTF-8"))
	}
	if err := s.takeWorkspaceBudget(ctx, m.WorkspaceID); err != nil {
		return s.problemAt(ctx, instance, err)
	}
	ans, err := cmd.Run(ctx, Call{Actor: bus.Actor{WorkspaceID: m.WorkspaceID, UserID: m.UserID}, IDs: ids, Body: body,
		Idempotency: func(render bus.RenderFunc) (*bus.Idempotency, error) { return messageIdempotency(m, render), nil }})
	if err != nil {
		return s.problemAt(ctx, instance, err)
	}
	resp := ans.Response
	return MessageResult{Status: resp.Status, Body: bytes.Clone(resp.Body), Replayed: ans.Replayed,
		Retryable: resp.Header["Retry-After"] != "" || resp.Status >= 500 || resp.Status == http.StatusTooManyRequests}
}

// messageContext is what the HTTP middleware would put in a request's context: the request
// id (the message's correlation id), the logger, the actor, and the outbox's correlation and
// trace context.
func (s *Server) messageContext(ctx context.Context, m MessageCommand) context.Context {
	ctx = context.WithValue(ctx, keyRequestID, m.CorrelationID)
	ctx = context.WithValue(ctx, keyLogger, s.log)
	ctx = context.WithValue(ctx, keyUser, m.UserID)
	ctx = context.WithValue(ctx, keyWorkspace, m.WorkspaceID)
	ctx = outbox.WithCorrelationID(ctx, m.CorrelationID)
	if m.Traceparent != "" {
		ctx = outbox.WithTraceContext(ctx, m.Traceparent, "")
	}
	return ctx
}

// MessageProblem renders err as the problem an endpoint would answer for m (a *domain.Error
// with its code and message, anything else as INTERNAL without detail): for refusals the
// message transport decides before ExecuteMessage (a bad envelope, an unknown sender).
func (s *Server) MessageProblem(ctx context.Context, m MessageCommand, err error) MessageResult {
	return s.messageError(ctx, m, err)
}

// messageError renders err as the problem of a message refused before its command runs.
func (s *Server) messageError(ctx context.Context, m MessageCommand, err error) MessageResult {
	return s.problemAt(s.messageContext(ctx, m), "/"+m.Type, err)
}

// problemAt renders err as the problem an endpoint at instance would answer (writeError), in
// a message's context (messageContext).
func (s *Server) problemAt(ctx context.Context, instance string, err error) MessageResult {
	r, _ := http.NewRequestWithContext(ctx, MessageMethod, (&url.URL{Path: instance}).String(), nil)
	w := newBufferWriter()
	writeError(w, r, err)
	return w.result()
}

// messageIdempotency is the idempotency of a message's command: method MSG, its type as the
// path, its data (as sent) fingerprinted as a JSON body.
func messageIdempotency(m MessageCommand, render bus.RenderFunc) *bus.Idempotency {
	return &bus.Idempotency{
		Key:         m.Key,
		Method:      MessageMethod,
		Path:        m.Type,
		Fingerprint: bus.FingerprintInput{Body: m.Data, Headers: map[string]string{"Content-Type": "application/json"}},
		Render:      render,
	}
}

// bufferWriter is an http.ResponseWriter that keeps the response in memory.
type bufferWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newBufferWriter() *bufferWriter { return &bufferWriter{header: http.Header{}} }

func (b *bufferWriter) Header() http.Header { return b.header }

func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferWriter) result() MessageResult {
	status := b.status
	if status == 0 {
		status = http.StatusOK
	}
	return MessageResult{
		Status:    status,
		Body:      bytes.Clone(b.body.Bytes()),
		Replayed:  b.header.Get("Idempotent-Replayed") == "true",
		Retryable: b.header.Get("Retry-After") != "" || status >= 500 || status == http.StatusTooManyRequests,
	}
}

package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/outbox"
)

// This file runs commands that arrive as messages (infra/commandstream) through the very
// handlers of their HTTP endpoints: the same strict decoding and validation, the same command
// bus (RLS transaction, idempotency, outbox) and the same rendering, so that a message's
// reply holds exactly what the endpoint would answer. Only the idempotency scope differs:
// method MSG, the command's type as the path, the key the transport derives from the message.

// MessageMethod is the idempotency method of commands that arrive as messages.
const MessageMethod = "MSG"

// Error codes of the message transport.
var (
	// ErrCommandTypeUnknown: the message's type names no command.
	ErrCommandTypeUnknown = domain.NewError(domain.KindInvalid, "COMMAND_TYPE_UNKNOWN", "the command type is not one this service accepts")
	// ErrCommandDataInvalid: the message's data is not a JSON object with the path's ids.
	ErrCommandDataInvalid = domain.NewError(domain.KindInvalid, "COMMAND_DATA_INVALID", "the command's data is not valid")
)

// messageRoute is the HTTP endpoint a command type runs through: its method, its path under
// the workspace (with {param}s that the message's data names).
type messageRoute struct {
	method string
	path   string
	params []string
}

// messageRoutes maps every command type the flows declare (worker.Spec.Messages) to its
// endpoint. A command's data is the endpoint's body plus the path's ids by name.
var messageRoutes = flowMessageRoutes(flows.All())

func flowMessageRoutes(specs []worker.Spec) map[string]messageRoute {
	out := map[string]messageRoute{}
	for _, f := range specs {
		for _, m := range f.Messages {
			var params []string
			for _, part := range strings.Split(m.Path, "/") {
				if strings.HasPrefix(part, "{") && strings.HasSuffix(part, "}") {
					params = append(params, strings.Trim(part, "{}"))
				}
			}
			out[m.Type] = messageRoute{method: m.Method, path: m.Path, params: params}
		}
	}
	return out
}

// messageHandlers finds, among router's routes, the handler of every command type's
// endpoint, and fails naming a command type whose endpoint router does not serve.
func messageHandlers(router chi.Routes) (map[string]http.Handler, error) {
	served := map[string]http.Handler{}
	err := chi.Walk(router, func(method, route string, h http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+strings.ReplaceAll(strings.TrimSuffix(route, "/"), "/*/", "/")] = h
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := map[string]http.Handler{}
	for typ, route := range messageRoutes {
		h, ok := served[route.method+" /v1/workspaces/{workspace_id}"+route.path]
		if !ok {
			return nil, fmt.Errorf("httpapi: command type %s: no route %s %s", typ, route.method, route.path)
		}
		out[typ] = h
	}
	return out, nil
}

// MessageCommandTypes lists the command types ExecuteMessage accepts, sorted.
func MessageCommandTypes() []string {
	out := make([]string, 0, len(messageRoutes))
	for t := range messageRoutes {
		out = append(out, t)
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

type messageCtxKey struct{}

// ExecuteMessage runs m through its endpoint's handler and returns what it answered. An
// unknown type is COMMAND_TYPE_UNKNOWN; data that is not a JSON object, or whose path ids are
// missing or not UUIDs, is COMMAND_DATA_INVALID; the rest is the endpoint's own answer. It
// never returns a secret: the bodies are those the endpoint would send.
func (s *Server) ExecuteMessage(ctx context.Context, m MessageCommand) MessageResult {
	route, ok := messageRoutes[m.Type]
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
	rctx := chi.NewRouteContext()
	path := "/v1/workspaces/" + m.WorkspaceID.String() + route.path
	rctx.URLParams.Add("workspace_id", m.WorkspaceID.String())
	for _, name := range route.params {
		var v string
		raw, present := fields[name]
		if !present || json.Unmarshal(raw, &v) != nil {
			return s.messageError(ctx, m, ErrCommandDataInvalid.WithField(name, "required: a UUID"))
		}
		id, err := uuid.Parse(v)
		if err != nil {
			return s.messageError(ctx, m, ErrCommandDataInvalid.WithField(name, "must be a UUID"))
		}
		delete(fields, name)
		rctx.URLParams.Add(name, id.String())
		path = strings.Replace(path, "{"+name+"}", id.String(), 1)
	}
	body, err := json.Marshal(fields)
	if err != nil {
		return s.messageError(ctx, m, ErrCommandDataInvalid.WithMessage("data must be a JSON object"))
	}

	r, err := http.NewRequestWithContext(s.messageContext(ctx, m), route.method, path, bytes.NewReader(body))
	if err != nil {
		return s.messageError(ctx, m, err)
	}
	r.Header.Set("Content-Type", "application/json")
	r = r.WithContext(context.WithValue(context.WithValue(r.Context(), chi.RouteCtxKey, rctx), messageCtxKey{}, &m))
	w := newBufferWriter()
	s.messages[m.Type].ServeHTTP(w, r)
	return w.result()
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

// messageError renders err as the problem the endpoint would answer.
func (s *Server) messageError(ctx context.Context, m MessageCommand, err error) MessageResult {
	r, _ := http.NewRequestWithContext(s.messageContext(ctx, m), MessageMethod, (&url.URL{Path: "/" + m.Type}).String(), nil)
	w := newBufferWriter()
	writeError(w, r, err)
	return w.result()
}

// messageIdempotency is the idempotency of a message's command, or nil for an HTTP request.
func messageIdempotency(r *http.Request, render bus.RenderFunc) *bus.Idempotency {
	m, ok := r.Context().Value(messageCtxKey{}).(*MessageCommand)
	if !ok {
		return nil
	}
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

package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/query"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// This file is the command catalogue: the commands that start work, by type (listing.publish),
// each with how its input becomes the bus command, its bus handler and how its answer is
// rendered. The HTTP API and the command stream are two transports over it: each finds the
// command's ids and JSON body its own way (the path and the request body; the message's
// data, messages.go) and hands them over as a Call; the catalogue decodes, builds and runs
// the command through the command bus (RLS transaction, idempotency, outbox) and answers the
// status and body both transports send.

// Call is one command as a transport hands it to the catalogue.
type Call struct {
	// Actor is who runs the command, and in which workspace.
	Actor bus.Actor
	// IDs are the command's ids besides its body (Command.Params), by name.
	IDs map[string]uuid.UUID
	// Body is the command's JSON body; the command decodes it strictly (decodeJSON's rules).
	Body []byte
	// Idempotency returns the call's idempotency for render: the scope and fingerprint of the
	// transport (an HTTP request's Idempotency-Key, a message's MSG scope). Its error refuses
	// the command.
	Idempotency func(render bus.RenderFunc) (*bus.Idempotency, error)
}

// Answer is a command's response: rendered inside its transaction, or replayed from its
// idempotency record.
type Answer struct {
	Response bus.Response
	Replayed bool
}

// Param is an id a command takes besides its body.
type Param struct {
	Name string
	// NotFound answers a malformed id over HTTP, where it is a segment of the path.
	NotFound *domain.Error
}

// Command is one entry of the catalogue.
type Command struct {
	// Type is the command type, listing.<command>, as messages name it.
	Type string
	// Method and Path are the command's HTTP endpoint under /v1/workspaces/{workspace_id};
	// its {params} are Params. The flows declare them (worker.Spec.Messages). Empty: the
	// command has no endpoint and runs from messages only.
	Method, Path string
	// Params are the ids the command takes besides its body, in the order of Path.
	Params []Param
	// Run decodes c.Body, builds the command and runs it through the bus with c's idempotency.
	// An error is the refusal both transports render as a problem.
	Run func(ctx context.Context, c Call) (Answer, error)
}

// Runs is the Run of a command whose body decodes into In: build makes the bus command of the
// body and the call (it may read through the queries; it runs before the command's
// transaction), h runs it on b, and render makes the answer of h's result.
func Runs[In any, C bus.Command, R any](b *bus.Bus, h bus.Handler[C, R], build func(ctx context.Context, c Call, in In) (C, error),
	render bus.RenderFunc) func(context.Context, Call) (Answer, error) {
	return func(ctx context.Context, c Call) (Answer, error) {
		var in In
		if err := decodeStrict(c.Body, &in); err != nil {
			return Answer{}, err
		}
		cmd, err := build(ctx, c, in)
		if err != nil {
			return Answer{}, err
		}
		idem, err := c.Idempotency(render)
		if err != nil {
			return Answer{}, err
		}
		reply, err := bus.Execute(ctx, b, h, bus.Request[C]{Command: cmd, Actor: c.Actor, Idempotency: idem})
		if err != nil {
			return Answer{}, err
		}
		if reply.Response != nil {
			return Answer{Response: *reply.Response, Replayed: reply.Replayed}, nil
		}
		resp, err := render(reply.Result)
		return Answer{Response: resp}, err
	}
}

// Catalogue holds the commands by type. Add every command before the transports run: it is
// not safe for an Add concurrent with their use.
type Catalogue struct{ byType map[string]Command }

// Add adds c, refusing a type outside listing.*, a type added twice, no Run, or an endpoint
// whose path parameters are not c's Params.
func (cat *Catalogue) Add(c Command) error {
	switch _, dup := cat.byType[c.Type]; {
	case !strings.HasPrefix(c.Type, "listing.") || len(c.Type) == len("listing."):
		return fmt.Errorf("httpapi: command type %q: not listing.<command>", c.Type)
	case dup:
		return fmt.Errorf("httpapi: command type %s: declared twice", c.Type)
	case c.Run == nil:
		return fmt.Errorf("httpapi: command type %s: no Run", c.Type)
	case (c.Method == "") != (c.Path == ""):
		return fmt.Errorf("httpapi: command type %s: an endpoint needs a method and a path", c.Type)
	}
	if c.Path != "" {
		var names []string
		for _, p := range c.Params {
			names = append(names, p.Name)
		}
		if got := pathParams(c.Path); !slices.Equal(got, names) {
			return fmt.Errorf("httpapi: command type %s: the path %s names %v, the command takes %v", c.Type, c.Path, got, names)
		}
	}
	if cat.byType == nil {
		cat.byType = map[string]Command{}
	}
	cat.byType[c.Type] = c
	return nil
}

// Lookup returns the command of type typ.
func (cat *Catalogue) Lookup(typ string) (Command, bool) {
	c, ok := cat.byType[typ]
	return c, ok
}

// Types lists the command types, sorted.
func (cat *Catalogue) Types() []string {
	out := make([]string, 0, len(cat.byType))
	for t := range cat.byType {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// endpoints lists the commands with an HTTP endpoint, by type.
func (cat *Catalogue) endpoints() []Command {
	var out []Command
	for _, t := range cat.Types() {
		if c := cat.byType[t]; c.Path != "" {
			out = append(out, c)
		}
	}
	return out
}

// pathParams are the {names} of path, in order.
func pathParams(path string) []string {
	var out []string
	for _, part := range strings.Split(path, "/") {
		if strings.HasPrefix(part, "{") && strings.HasSuffix(part, "}") {
			out = append(out, strings.Trim(part, "{}"))
		}
	}
	return out
}

// catalogueCommands are the service's commands; catalogue places them at their endpoints.
func (s *Server) catalogueCommands() []Command {
	return []Command{s.publishCommand(), s.unpublishCommand(), s.createStoreCommand(), s.replaceStoreAuthorizationCommand(),
		s.verifyStoreCommand(), s.syncStoreCommand(), s.completeMediaCommand(), s.createTransferCommand(), s.createAITaskCommand()}
}

// scopeOf is the query scope of a.
func scopeOf(a bus.Actor) query.Scope {
	return query.Scope{WorkspaceID: a.WorkspaceID, UserID: a.UserID}
}

// catalogue builds the service's catalogue: every command of catalogueCommands, at the endpoint its flow
// declares (worker.Spec.Messages), and the entry points the engine derives (worker.Spec.Start,
// startCommand). A command type a flow declares and the catalogue lacks, or
// the reverse, is an error: the server does not start.
func (s *Server) catalogue(specs []worker.Spec) (*Catalogue, error) {
	byType := map[string]Command{}
	for _, c := range s.catalogueCommands() {
		byType[c.Type] = c
	}
	cat := &Catalogue{}
	for _, f := range specs {
		for _, m := range f.Messages {
			c, ok := byType[m.Type]
			if !ok {
				return nil, fmt.Errorf("httpapi: command type %s (flow %s): not in the catalogue", m.Type, f.Name)
			}
			delete(byType, m.Type)
			c.Method, c.Path = m.Method, m.Path
			if err := cat.Add(c); err != nil {
				return nil, err
			}
		}
	}
	for t := range byType {
		return nil, fmt.Errorf("httpapi: command type %s: no flow declares it (worker.Spec.Messages)", t)
	}
	for _, f := range specs {
		if f.Start != nil {
			if err := cat.Add(s.startCommand(f)); err != nil {
				return nil, err
			}
		}
	}
	return cat, nil
}

// serve is the HTTP transport of c: the path's ids, the body, the Idempotency-Key header.
func (s *Server) serve(c Command) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ids := make(map[string]uuid.UUID, len(c.Params))
		for _, p := range c.Params {
			id, err := pathID(r, p.Name, p.NotFound)
			if err != nil {
				writeError(w, r, err)
				return
			}
			ids[p.Name] = id
		}
		var body []byte
		if r.Method != http.MethodDelete || r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
			// A DELETE may come without a body (and then without a Content-Type): {}.
			var err error
			if body, err = readBody(w, r, s.cfg.MaxBodyBytes); err != nil {
				writeError(w, r, err)
				return
			}
		}
		ans, err := c.Run(r.Context(), Call{Actor: s.actor(r), IDs: ids, Body: body,
			Idempotency: func(render bus.RenderFunc) (*bus.Idempotency, error) { return s.idempotency(r, body, true, render) }})
		if err != nil {
			writeError(w, r, err)
			return
		}
		s.respond(w, r, &ans.Response, ans.Replayed, true, nil, nil)
	}
}

// startCommand is the derived entry point of flow f (worker.Spec.Start): its path's ids, an
// empty or {} body, the engine's StartCommand run through the bus (app.Commands.Start: the
// flow's Accept, then the task, its operation and their events), and 202 with the task under
// its Resource's key and its operation.
func (s *Server) startCommand(f worker.Spec) Command {
	st, res := *f.Start, *f.Resource
	var params []Param
	for i, name := range pathParams(st.Path) {
		params = append(params, Param{name, st.NotFound[i]})
	}
	build := func(_ context.Context, c Call, _ struct{}) (worker.StartCommand, error) {
		return worker.StartCommand{Flow: f.Name, Queue: f.Queue, Operation: f.Operation, ResourceType: f.Request.AggregateType(),
			WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID, IDs: c.IDs}, nil
	}
	render := func(result any) (bus.Response, error) {
		r := result.(worker.Started)
		return jsonResponse(http.StatusAccepted, map[string]any{res.Key: res.Body(r.Task), "operation": operationBody(r.Operation)}, nil)
	}
	run := Runs(s.app.Bus, s.app.Commands.Start, build, render)
	return Command{Type: st.Type, Method: st.Method, Path: st.Path, Params: params, Run: func(ctx context.Context, c Call) (Answer, error) {
		if len(bytes.TrimSpace(c.Body)) == 0 {
			c.Body = []byte("{}")
		}
		return run(ctx, c)
	}}
}

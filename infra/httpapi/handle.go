package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/query"
	"github.com/listingkit/listing/domain"
)

// This file holds what the resource files share: reading path ids and bodies, running a
// command through the bus as an idempotent request, and serving GET of one or a list.

// decode reads and strictly decodes the JSON body into dst, returning the raw bytes for the
// fingerprint.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, dst any) ([]byte, bool) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err == nil {
		err = decodeStrict(body, dst)
	}
	if err != nil {
		writeError(w, r, err)
		return nil, false
	}
	return body, true
}

func pathID(r *http.Request, name string, nf *domain.Error) (uuid.UUID, error) {
	id, err := uuid.Parse(chi.URLParam(r, name))
	if err != nil {
		return uuid.Nil, nf
	}
	return id, nil
}

// notFoundAs turns the repositories' generic domain.ErrNotFound into the resource's own
// not-found error nf; other errors pass unchanged.
func notFoundAs(err error, nf *domain.Error) error {
	if err != nil && errors.Is(err, domain.ErrNotFound) {
		return nf
	}
	return err
}

func (s *Server) scope(r *http.Request) query.Scope {
	return query.Scope{WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context())}
}

func (s *Server) actor(r *http.Request) bus.Actor {
	return bus.Actor{WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context())}
}

// execute decodes nothing: it runs an already-built command through the bus as an
// idempotent request (Idempotency-Key required) and writes the stored or rendered response.
func execute[C bus.Command, R any](s *Server, w http.ResponseWriter, r *http.Request, body []byte, h bus.Handler[C, R], cmd C, render bus.RenderFunc) {
	idem, err := s.idempotency(r, body, true, render)
	if err != nil {
		writeError(w, r, err)
		return
	}
	reply, err := bus.Execute(r.Context(), s.app.Bus, h, bus.Request[C]{Command: cmd, Actor: s.actor(r), Idempotency: idem})
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.respond(w, r, reply.Response, reply.Replayed, true, reply.Result, render)
}

// startRender renders a Started result as {"<name>": body, "operation": …} with status.
func startRender[T any](status int, name string, body func(T) any) bus.RenderFunc {
	return func(result any) (bus.Response, error) {
		s := result.(commands.Started[T])
		return jsonResponse(status, map[string]any{name: body(s.Resource), "operation": operationBody(s.Operation)}, nil)
	}
}

// getOne serves GET of one aggregate.
func getOne[T any](s *Server, w http.ResponseWriter, r *http.Request, param string, nf *domain.Error, repo port.Repository[T], name string, body func(T) any) {
	id, err := pathID(r, param, nf)
	if err != nil {
		writeError(w, r, err)
		return
	}
	v, err := query.Get(r.Context(), s.app.Queries.Tx, s.scope(r), repo, id)
	if err != nil {
		writeError(w, r, notFoundAs(err, nf))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{name: body(v)})
}

// getList serves GET of a list, newest first.
func getList[T any](s *Server, w http.ResponseWriter, r *http.Request, repo port.Repository[T], body func(T) any) {
	page, err := pageOf(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items, next, err := query.List(r.Context(), s.app.Queries.Tx, s.scope(r), repo, page)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]any, 0, len(items))
	for _, v := range items {
		out = append(out, body(v))
	}
	writeJSON(w, http.StatusOK, listBody(out, next))
}

// listBody is the list envelope: {"items": [...], "next_cursor": "…" | null}.
func listBody[T any](items []T, next string) map[string]any {
	var cursor any
	if next != "" {
		cursor = next
	}
	return map[string]any{"items": items, "next_cursor": cursor}
}

func pageOf(r *http.Request) (port.Page, error) {
	q := r.URL.Query()
	p := port.Page{Cursor: q.Get("cursor")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return p, domain.Invalid("limit", "must be an integer from 1 to 100")
		}
		p.Limit = n
	}
	return p, nil
}

// listUnder serves GET of a parent's children, newest first: the {param} of the path names
// the parent (nf when it is malformed or the workspace has no such parent), and list reads
// one page of its children.
func listUnder[T any](s *Server, w http.ResponseWriter, r *http.Request, param string, nf *domain.Error,
	list func(context.Context, query.Scope, uuid.UUID, port.Page) ([]T, string, error), body func(T) any) {
	parent, err := pathID(r, param, nf)
	if err != nil {
		writeError(w, r, err)
		return
	}
	page, err := pageOf(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items, next, err := list(r.Context(), s.scope(r), parent, page)
	if err != nil {
		writeError(w, r, notFoundAs(err, nf))
		return
	}
	out := make([]any, 0, len(items))
	for _, v := range items {
		out = append(out, body(v))
	}
	writeJSON(w, http.StatusOK, listBody(out, next))
}

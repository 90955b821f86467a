package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/query"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/flows"
)

// This file serves the flows' task resources (worker.Resource), derived from the registry:
// GET …<Parent>/<Path> lists a parent's tasks, newest first, and GET …<Parent>/<Path>/{id}
// reads one.

// taskRoutes mounts the GET routes of every flow's task resource on r (the workspace's
// router).
func (s *Server) taskRoutes(r chi.Router) {
	for _, f := range flows.All() {
		if f.Resource == nil {
			continue
		}
		f, res := f, *f.Resource
		base := res.Parent + "/" + res.Path
		r.Get(base, func(w http.ResponseWriter, r *http.Request) { s.listTasks(w, r, f, res) })
		r.Get(base+"/{"+res.IDParam+"}", func(w http.ResponseWriter, r *http.Request) { s.getTask(w, r, f, res) })
	}
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request, f worker.Spec, res worker.Resource) {
	listUnder(s, w, r, res.ParentParam(), res.ParentNotFound,
		func(ctx context.Context, sc query.Scope, parent uuid.UUID, page port.Page) ([]any, string, error) {
			return s.app.Queries.TaskList(ctx, sc, f.Table, res.ParentTable, res.ParentParam(), parent, page)
		}, res.Body)
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request, f worker.Spec, res worker.Resource) {
	parent, err := pathID(r, res.ParentParam(), res.ParentNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	id, err := pathID(r, res.IDParam, f.NotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	v, err := s.app.Queries.Task(r.Context(), s.scope(r), f.Table, res.ParentParam(), parent, id)
	if err != nil {
		writeError(w, r, notFoundAs(err, f.NotFound))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{res.Key: res.Body(v)})
}

// withTaskEndpoints returns endpoints with those of the task resources, each flow's two
// after the last endpoint under its parent (or at the end), preceded by its derived entry
// point (worker.Spec.Start) if any.
func withTaskEndpoints(endpoints []Endpoint) []Endpoint {
	for _, f := range flows.All() {
		res := f.Resource
		if res == nil {
			continue
		}
		base := ws + res.Parent + "/" + res.Path
		var derived []Endpoint
		if st := f.Start; st != nil {
			derived = append(derived, Endpoint{st.Method, ws + st.Path, st.OperationID, errs(errsMember, errsBody, errsKey, st.NotFound, st.Errors)})
		}
		derived = append(derived,
			Endpoint{"GET", base, res.ListOperation, errs(errsMember, errsPage, one(res.ParentNotFound))},
			Endpoint{"GET", base + "/{" + res.IDParam + "}", res.GetOperation, errs(errsMember, one(res.ParentNotFound, f.NotFound))},
		)
		at := len(endpoints)
		for i, e := range endpoints {
			if strings.HasPrefix(e.Path, ws+res.Parent+"/") || e.Path == ws+res.Parent {
				at = i + 1
			}
		}
		endpoints = slices.Insert(endpoints, at, derived...)
	}
	return endpoints
}

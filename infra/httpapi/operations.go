package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

type operationJSON struct {
	ID        string            `json:"id"`
	Type      string            `json:"type"`
	Status    string            `json:"status"`
	Resource  map[string]string `json:"resource"`
	Result    json.RawMessage   `json:"result"`
	Error     *worker.ErrorJSON `json:"error"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
	// Progress is absent until the operation's flow reports one.
	Progress *domain.Progress `json:"progress,omitempty"`
}

func operationBody(o domain.Operation) operationJSON {
	out := operationJSON{ID: o.ID.String(), Type: o.Type, Status: string(o.Status),
		Resource: map[string]string{"type": o.ResourceType, "id": o.ResourceID.String()},
		Result:   o.Result, CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC(), Progress: o.Progress}
	if len(out.Result) == 0 {
		out.Result = json.RawMessage("null")
	}
	if o.Status == domain.OperationFailed {
		out.Error = &worker.ErrorJSON{Code: o.ErrorCode, Message: o.ErrorMessage}
	}
	return out
}

func (s *Server) listOperations(w http.ResponseWriter, r *http.Request) {
	getList(s, w, r, s.app.Queries.Operations, func(o domain.Operation) any { return operationBody(o) })
}

func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "operation_id", domain.ErrOperationNotFound, s.app.Queries.Operations, "operation",
		func(o domain.Operation) any { return operationBody(o) })
}

// cancelOperation: POST /v1/workspaces/{ws}/operations/{id}/cancel, no body (or the JSON
// {}), idempotent when a key is sent. 202 with the operation as cancelled; 409 OPERATION_RUNNING when its
// task has started (it is not stopped and finishes as it would), OPERATION_FINISHED when it
// has finished.
func (s *Server) cancelOperation(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "operation_id", domain.ErrOperationNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var body []byte
	if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
		var ok bool
		if body, ok = s.decode(w, r, &struct{}{}); !ok {
			return
		}
	}
	render := func(result any) (bus.Response, error) {
		return jsonResponse(http.StatusAccepted, map[string]any{"operation": operationBody(result.(domain.Operation))}, nil)
	}
	idem, err := s.idempotency(r, body, false, render)
	if err != nil {
		writeError(w, r, err)
		return
	}
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.CancelOperation, bus.Request[commands.CancelOperation]{
		Command: commands.CancelOperation{OperationID: id, WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context())},
		Actor:   s.actor(r), Idempotency: idem})
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.respond(w, r, reply.Response, reply.Replayed, idem != nil, reply.Result, render)
}

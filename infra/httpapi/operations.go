package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

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

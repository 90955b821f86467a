package httpapi

import (
	"net/http"
	"time"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/domain"
)

// Integration principals (owners only). Creation takes no Idempotency-Key: its response holds
// the secret, which no record may store; a client that lost the response revokes that
// integration and creates another.

type integrationJSON struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	UserID    string     `json:"user_id"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

func integrationBody(i domain.Integration) integrationJSON {
	var revoked *time.Time
	if i.RevokedAt != nil {
		t := i.RevokedAt.UTC()
		revoked = &t
	}
	return integrationJSON{ID: i.ID.String(), Name: i.Name, UserID: i.UserID.String(), CreatedAt: i.CreatedAt.UTC(), RevokedAt: revoked}
}

func (s *Server) createIntegration(w http.ResponseWriter, r *http.Request) {
	if len(r.Header.Values("Idempotency-Key")) > 0 {
		writeError(w, r, domain.Invalid("Idempotency-Key", "not accepted here: the response holds a secret that is shown once and never stored"))
		return
	}
	var in struct {
		Name string `json:"name"`
	}
	if _, ok := s.decode(w, r, &in); !ok {
		return
	}
	cmd := commands.CreateIntegration{IntegrationID: domain.NewID(), WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()), Name: in.Name}
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.CreateIntegration, bus.Request[commands.CreateIntegration]{Command: cmd, Actor: s.actor(r)})
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, map[string]any{"integration": integrationBody(reply.Result.Integration), "secret": reply.Result.Secret})
}

func (s *Server) listIntegrations(w http.ResponseWriter, r *http.Request) {
	page, err := pageOf(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items, next, err := s.app.Queries.Integrations(r.Context(), s.scope(r), page)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]any, 0, len(items))
	for _, v := range items {
		out = append(out, integrationBody(v))
	}
	writeJSON(w, http.StatusOK, listBody(out, next))
}

func (s *Server) revokeIntegration(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "integration_id", domain.ErrIntegrationNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	cmd := commands.RevokeIntegration{IntegrationID: id, WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context())}
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.RevokeIntegration, bus.Request[commands.RevokeIntegration]{Command: cmd, Actor: s.actor(r)})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"integration": integrationBody(reply.Result)})
}

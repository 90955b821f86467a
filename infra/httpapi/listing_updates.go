package httpapi

import (
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/domain"
)

type listingUpdateJSON struct {
	ID              string `json:"id"`
	PublicationID   string `json:"publication_id"`
	ProductID       string `json:"product_id"`
	ProductRevision int    `json:"product_revision"`
	Status          string `json:"status"`
	// Outcome is "pushed" or "superseded" once succeeded, else omitted.
	Outcome   string     `json:"outcome,omitempty"`
	Error     *errorJSON `json:"error"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

func listingUpdateBody(u domain.ListingUpdate) listingUpdateJSON {
	return listingUpdateJSON{ID: u.ID.String(), PublicationID: u.PublicationID.String(), ProductID: u.ProductID.String(),
		ProductRevision: u.ProductRevision, Status: string(u.Status), Outcome: u.Outcome, Error: taskError(u.Task),
		CreatedAt: u.CreatedAt.UTC(), UpdatedAt: u.UpdatedAt.UTC()}
}

func (s *Server) updateListing(w http.ResponseWriter, r *http.Request) {
	pid, err := pathID(r, "publication_id", domain.ErrPublicationNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	body, ok := s.decode(w, r, &struct{}{})
	if !ok {
		return
	}
	cmd := commands.UpdateListing{UpdateID: uuid.New(), WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()), PublicationID: pid}
	execute(s, w, r, body, s.app.Commands.UpdateListing, cmd,
		startRender(http.StatusAccepted, "update", func(v domain.ListingUpdate) any { return listingUpdateBody(v) }))
}

func (s *Server) listListingUpdates(w http.ResponseWriter, r *http.Request) {
	listUnder(s, w, r, "publication_id", domain.ErrPublicationNotFound, s.app.Queries.ListingUpdates,
		func(v domain.ListingUpdate) any { return listingUpdateBody(v) })
}

func (s *Server) getListingUpdate(w http.ResponseWriter, r *http.Request) {
	pid, err := pathID(r, "publication_id", domain.ErrPublicationNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	id, err := pathID(r, "update_id", domain.ErrListingUpdateNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	u, err := s.app.Queries.ListingUpdate(r.Context(), s.scope(r), pid, id)
	if err != nil {
		writeError(w, r, notFoundAs(err, domain.ErrListingUpdateNotFound))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"update": listingUpdateBody(u)})
}

package httpapi

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/worker/listingupdate"
	"github.com/listingkit/listing/domain"
)

// The GET routes of listing updates are derived from the registry (tasks.go).

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
		startRender(http.StatusAccepted, "update", func(v domain.ListingUpdate) any { return listingupdate.Body(v) }))
}

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
	startUnderPublication(s, w, r, s.app.Commands.UpdateListing, func(ws, user, pid uuid.UUID) commands.UpdateListing {
		return commands.UpdateListing{UpdateID: domain.NewID(), WorkspaceID: ws, UserID: user, PublicationID: pid}
	}, "update", listingupdate.Body)
}

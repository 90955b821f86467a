package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

type transferJSON struct {
	ID        string            `json:"id"`
	SourceURL string            `json:"source_url"`
	Status    string            `json:"status"`
	MediaID   string            `json:"media_id"`
	Bytes     int64             `json:"bytes"`
	Error     *worker.ErrorJSON `json:"error"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// withoutQuery drops the query and fragment of a source URL before it is shown or stored
// in a response: a signed source URL carries its signature there.
func withoutQuery(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.RawQuery, u.Fragment, u.User = "", "", nil
	return u.String()
}

func transferBody(t domain.MaterialTransfer) transferJSON {
	return transferJSON{ID: t.ID.String(), SourceURL: withoutQuery(t.SourceURL), Status: string(t.Status), MediaID: t.MediaID.String(),
		Bytes: t.Bytes, Error: worker.TaskError(t.Task), CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC()}
}

// createTransferIn is listing.create_material_transfer's body.
type createTransferIn struct {
	SourceURL string `json:"source_url"`
}

// createTransferCommand is listing.create_material_transfer: a file fetched from a URL into
// the media.
func (s *Server) createTransferCommand() Command {
	return Command{Type: "listing.create_material_transfer",
		Run: Runs(s.app.Bus, s.app.Commands.CreateMaterialTransfer, func(ctx context.Context, c Call, in createTransferIn) (commands.CreateMaterialTransfer, error) {
			if err := s.app.Queries.CheckSourceURL(ctx, in.SourceURL); err != nil {
				return commands.CreateMaterialTransfer{}, err
			}
			return commands.CreateMaterialTransfer{TransferID: domain.NewID(), WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID,
				SourceURL: in.SourceURL}, nil
		}, startRender(http.StatusAccepted, "transfer", func(v domain.MaterialTransfer) any { return transferBody(v) }))}
}

func (s *Server) listTransfers(w http.ResponseWriter, r *http.Request) {
	getList(s, w, r, s.app.Queries.Transfers, func(v domain.MaterialTransfer) any { return transferBody(v) })
}

func (s *Server) getTransfer(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "transfer_id", domain.ErrTransferNotFound, s.app.Queries.Transfers, "transfer",
		func(v domain.MaterialTransfer) any { return transferBody(v) })
}

package httpapi

import (
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

func (s *Server) createTransfer(w http.ResponseWriter, r *http.Request) {
	var in struct {
		SourceURL string `json:"source_url"`
	}
	body, ok := s.decode(w, r, &in)
	if !ok {
		return
	}
	if err := s.app.Queries.CheckSourceURL(r.Context(), in.SourceURL); err != nil {
		writeError(w, r, err)
		return
	}
	cmd := commands.CreateMaterialTransfer{TransferID: domain.NewID(), WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()), SourceURL: in.SourceURL}
	execute(s, w, r, body, s.app.Commands.CreateMaterialTransfer, cmd,
		startRender(http.StatusAccepted, "transfer", func(v domain.MaterialTransfer) any { return transferBody(v) }))
}

func (s *Server) listTransfers(w http.ResponseWriter, r *http.Request) {
	getList(s, w, r, s.app.Queries.Transfers, func(v domain.MaterialTransfer) any { return transferBody(v) })
}

func (s *Server) getTransfer(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "transfer_id", domain.ErrTransferNotFound, s.app.Queries.Transfers, "transfer",
		func(v domain.MaterialTransfer) any { return transferBody(v) })
}

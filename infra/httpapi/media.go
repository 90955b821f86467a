package httpapi

import (
	"net/http"
	"time"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/domain"
)

type mediaJSON struct {
	ID           string                `json:"id"`
	Filename     string                `json:"filename"`
	ContentType  string                `json:"content_type"`
	Size         int64                 `json:"size"`
	Status       string                `json:"status"`
	Source       string                `json:"source"`
	SniffedType  string                `json:"sniffed_type,omitempty"`
	Width        int                   `json:"width,omitempty"`
	Height       int                   `json:"height,omitempty"`
	Variants     []domain.MediaVariant `json:"variants"`
	RejectReason string                `json:"reject_reason,omitempty"`
	CreatedAt    time.Time             `json:"created_at"`
	UpdatedAt    time.Time             `json:"updated_at"`
}

func mediaBody(m domain.Media) mediaJSON {
	v := m.Variants
	if v == nil {
		v = []domain.MediaVariant{}
	}
	return mediaJSON{ID: m.ID.String(), Filename: m.Filename, ContentType: m.ContentType, Size: m.Size, Status: string(m.Status),
		Source: m.Source, SniffedType: m.SniffedType, Width: m.Width, Height: m.Height, Variants: v, RejectReason: m.RejectReason,
		CreatedAt: m.CreatedAt.UTC(), UpdatedAt: m.UpdatedAt.UTC()}
}

// createMedia is not idempotent-stored: its answer holds an upload URL (a presigned URL on
// S3), which must never be kept in the idempotency store.
func (s *Server) createMedia(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Filename    string `json:"filename"`
		ContentType string `json:"content_type"`
		Size        int64  `json:"size"`
	}
	if _, ok := s.decode(w, r, &in); !ok {
		return
	}
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.CreateMedia, bus.Request[commands.CreateMedia]{
		Command: commands.CreateMedia{MediaID: domain.NewID(), WorkspaceID: workspaceID(r.Context()), Filename: in.Filename, ContentType: in.ContentType, Size: in.Size},
		Actor:   s.actor(r),
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	up := reply.Result.Upload
	writeJSON(w, http.StatusCreated, map[string]any{"media": mediaBody(reply.Result.Media),
		"upload": map[string]any{"method": up.Method, "url": up.URL, "headers": up.Headers, "expires_at": up.ExpiresAt.UTC()}})
}

func (s *Server) listMedia(w http.ResponseWriter, r *http.Request) {
	getList(s, w, r, s.app.Queries.Media, func(v domain.Media) any { return mediaBody(v) })
}

func (s *Server) getMedia(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "media_id", domain.ErrMediaNotFound, s.app.Queries.Media, "media", func(v domain.Media) any { return mediaBody(v) })
}

func (s *Server) completeMedia(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "media_id", domain.ErrMediaNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var in struct{}
	body, ok := s.decode(w, r, &in)
	if !ok {
		return
	}
	size, err := s.app.Queries.MediaObject(r.Context(), s.scope(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	cmd := commands.CompleteMediaUpload{MediaID: id, WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()), UploadedSize: size}
	execute(s, w, r, body, s.app.Commands.CompleteMediaUpload, cmd,
		startRender(http.StatusAccepted, "media", func(v domain.Media) any { return mediaBody(v) }))
}

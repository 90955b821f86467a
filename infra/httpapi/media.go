package httpapi

import (
	"context"
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

// completeMediaCommand is listing.complete_media: the upload done, the file processed.
func (s *Server) completeMediaCommand() Command {
	return Command{Type: "listing.complete_media", Params: []Param{{"media_id", domain.ErrMediaNotFound}},
		Run: Runs(s.app.Bus, s.app.Commands.CompleteMediaUpload, func(ctx context.Context, c Call, _ struct{}) (commands.CompleteMediaUpload, error) {
			id := c.IDs["media_id"]
			size, err := s.app.Queries.MediaObject(ctx, scopeOf(c.Actor), id)
			if err != nil {
				return commands.CompleteMediaUpload{}, err
			}
			return commands.CompleteMediaUpload{MediaID: id, WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID, UploadedSize: size}, nil
		}, startRender(http.StatusAccepted, "media", func(v domain.Media) any { return mediaBody(v) }))}
}

package commands

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// CreateMedia records a media the client is about to upload and returns where to send the
// bytes (docs/http-api.md). Making the upload target is local computation (a signed URL), not
// a call to an external system.
type CreateMedia struct {
	MediaID     uuid.UUID
	WorkspaceID uuid.UUID
	Filename    string
	ContentType string
	Size        int64
}

// CommandName implements bus.Command.
func (CreateMedia) CommandName() string { return "CreateMedia" }

// MediaUpload is a media and where its bytes go.
type MediaUpload struct {
	Media  domain.Media
	Upload port.UploadTarget
}

// CreateMediaHandler handles CreateMedia.
type CreateMediaHandler struct {
	media     port.Repository[domain.Media]
	storage   port.ObjectStorage
	now       port.Clock
	maxBytes  int64
	uploadTTL time.Duration
}

// NewCreateMediaHandler returns the handler. maxBytes bounds a media's size; uploadTTL is
// how long an upload target stays valid. It panics on a nil dependency.
func NewCreateMediaHandler(media port.Repository[domain.Media], storage port.ObjectStorage, now port.Clock,
	maxBytes int64, uploadTTL time.Duration) CreateMediaHandler {
	mustHave("CreateMediaHandler", media, storage, now)
	return CreateMediaHandler{media: media, storage: storage, now: now, maxBytes: maxBytes, uploadTTL: uploadTTL}
}

// Handle implements bus.Handler: it inserts the media, awaiting its upload, and returns the
// upload target. The target is a bearer capability: the caller must not store the result
// (the HTTP layer does not keep it as an idempotent response).
func (h CreateMediaHandler) Handle(ctx context.Context, cmd CreateMedia) (MediaUpload, error) {
	m, err := domain.NewMedia(cmd.MediaID, cmd.WorkspaceID, cmd.Filename, cmd.ContentType, cmd.Size, h.maxBytes, h.now())
	if err != nil {
		return MediaUpload{}, err
	}
	if err := h.media.Insert(ctx, m); err != nil {
		return MediaUpload{}, err
	}
	target, err := h.storage.UploadTarget(ctx, domain.MediaObjectKey(m.WorkspaceID, m.ID), m.ContentType, m.Size, h.uploadTTL)
	if err != nil {
		return MediaUpload{}, err
	}
	return MediaUpload{Media: m, Upload: target}, nil
}

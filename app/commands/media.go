package commands

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// CreateMedia records a media the client is about to upload and returns where to send the
// bytes (seed §5, row 2). Making the upload target is local computation (a signed URL), not
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

// CompleteMediaUpload starts validation and processing of an uploaded media. UploadedSize
// is what storage holds (read by the caller before the command, see query.MediaObject); a
// negative value means nothing was uploaded.
type CompleteMediaUpload struct {
	MediaID      uuid.UUID
	WorkspaceID  uuid.UUID
	UserID       uuid.UUID
	UploadedSize int64
}

// CommandName implements bus.Command.
func (CompleteMediaUpload) CommandName() string { return "CompleteMediaUpload" }

// CreateMaterialTransfer starts copying material from a source URL into our storage as a
// new media (seed §5, row 3). The caller has checked the URL (port.Fetcher.CheckURL).
type CreateMaterialTransfer struct {
	TransferID  uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	SourceURL   string
}

// CommandName implements bus.Command.
func (CreateMaterialTransfer) CommandName() string { return "CreateMaterialTransfer" }

// MediaHandlers handles the media commands.
type MediaHandlers struct {
	FlowDeps
	Media     port.Repository[domain.Media]
	Tasks     port.Repository[domain.MediaTask]
	Transfers port.Repository[domain.MaterialTransfer]
	Storage   port.ObjectStorage
	// MaxBytes bounds a media's size.
	MaxBytes int64
	// UploadTTL is how long an upload target stays valid.
	UploadTTL time.Duration
}

// Create handles CreateMedia.
func (h MediaHandlers) Create(ctx context.Context, cmd CreateMedia) (MediaUpload, error) {
	m, err := domain.NewMedia(cmd.MediaID, cmd.WorkspaceID, cmd.Filename, cmd.ContentType, cmd.Size, h.MaxBytes, h.now())
	if err != nil {
		return MediaUpload{}, err
	}
	if err := h.Media.Insert(ctx, m); err != nil {
		return MediaUpload{}, err
	}
	target, err := h.Storage.UploadTarget(ctx, domain.MediaObjectKey(m.WorkspaceID, m.ID), m.ContentType, m.Size, h.UploadTTL)
	if err != nil {
		return MediaUpload{}, err
	}
	return MediaUpload{Media: m, Upload: target}, nil
}

// Complete handles CompleteMediaUpload.
func (h MediaHandlers) Complete(ctx context.Context, cmd CompleteMediaUpload) (Started[domain.Media], error) {
	op := h.newOperation(cmd.WorkspaceID, cmd.UserID, OpMediaProcessing, "media", cmd.MediaID)
	task := domain.MediaTask{Task: domain.NewTask(uuid.New(), cmd.WorkspaceID, op.ID, h.now()), MediaID: cmd.MediaID}
	m, err := h.Media.Update(ctx, cmd.MediaID, func(m *domain.Media) error {
		switch {
		case m.Status != domain.MediaAwaitingUpload:
			return domain.ErrMediaAlreadyComplete
		case cmd.UploadedSize < 0:
			return domain.ErrMediaNotUploaded
		}
		m.Status, m.UpdatedAt = domain.MediaProcessing, h.now()
		return nil
	})
	if err != nil {
		return Started[domain.Media]{}, err
	}
	err = h.start(ctx, op, func() error { return h.Tasks.Insert(ctx, task) }, task.RequestEvent())
	if err != nil {
		return Started[domain.Media]{}, err
	}
	return Started[domain.Media]{Resource: m, Operation: op}, nil
}

// Transfer handles CreateMaterialTransfer.
func (h MediaHandlers) Transfer(ctx context.Context, cmd CreateMaterialTransfer) (Started[domain.MaterialTransfer], error) {
	if err := domain.ValidateSourceURL(cmd.SourceURL); err != nil {
		return Started[domain.MaterialTransfer]{}, err
	}
	op := h.newOperation(cmd.WorkspaceID, cmd.UserID, OpMaterialTransfer, "material_transfer", cmd.TransferID)
	t := domain.MaterialTransfer{Task: domain.NewTask(cmd.TransferID, cmd.WorkspaceID, op.ID, h.now()),
		SourceURL: cmd.SourceURL, MediaID: uuid.New()}
	err := h.start(ctx, op, func() error { return h.Transfers.Insert(ctx, t) }, t.RequestEvent())
	if err != nil {
		return Started[domain.MaterialTransfer]{}, err
	}
	return Started[domain.MaterialTransfer]{Resource: t, Operation: op}, nil
}

package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// CompleteMediaUpload starts validation and processing of an uploaded media. UploadedSize
// is what storage holds (read by the caller before the command, outside any transaction:
// see query.MediaObject); a negative value means nothing was uploaded.
type CompleteMediaUpload struct {
	MediaID      uuid.UUID
	WorkspaceID  uuid.UUID
	UserID       uuid.UUID
	UploadedSize int64
}

// CommandName implements bus.Command.
func (CompleteMediaUpload) CommandName() string { return "CompleteMediaUpload" }

// CompleteMediaUploadHandler handles CompleteMediaUpload.
type CompleteMediaUploadHandler struct {
	flow  FlowDeps
	media port.Repository[domain.Media]
	tasks port.Repository[domain.MediaTask]
}

// NewCompleteMediaUploadHandler returns the handler. It panics on a nil dependency.
func NewCompleteMediaUploadHandler(flow FlowDeps, media port.Repository[domain.Media],
	tasks port.Repository[domain.MediaTask]) CompleteMediaUploadHandler {
	mustHave("CompleteMediaUploadHandler", flow, media, tasks)
	return CompleteMediaUploadHandler{flow: flow, media: media, tasks: tasks}
}

// Handle implements bus.Handler: under the media's row lock it moves the media from
// awaiting upload to processing and starts the processing task. A media no longer awaiting
// its upload is MEDIA_ALREADY_COMPLETED; nothing uploaded is MEDIA_NOT_UPLOADED.
func (h CompleteMediaUploadHandler) Handle(ctx context.Context, cmd CompleteMediaUpload) (Started[domain.Media], error) {
	op := h.flow.newOperation(cmd.WorkspaceID, cmd.UserID, domain.OpMediaProcessing, "media", cmd.MediaID)
	task := domain.MediaTask{Task: domain.NewTask(domain.NewID(), cmd.WorkspaceID, op.ID, h.flow.Now()), MediaID: cmd.MediaID}
	m, err := h.media.Update(ctx, cmd.MediaID, func(m *domain.Media) error {
		switch {
		case m.Status != domain.MediaAwaitingUpload:
			return domain.ErrMediaAlreadyComplete
		case cmd.UploadedSize < 0:
			return domain.ErrMediaNotUploaded
		}
		m.Status, m.UpdatedAt = domain.MediaProcessing, h.flow.Now()
		return nil
	})
	if err != nil {
		return Started[domain.Media]{}, err
	}
	err = h.flow.start(ctx, op, func() error { return h.tasks.Insert(ctx, task) }, task.RequestEvent())
	if err != nil {
		return Started[domain.Media]{}, err
	}
	return Started[domain.Media]{Resource: m, Operation: op}, nil
}

package mediaproc

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Flow registers the media processings with the engine (app/worker/flows lists it): its declaration,
// and its task kind and handler built from the dependencies they need.
var Flow = worker.Register(worker.Spec{
	Name:            "media_processing",
	Queue:           worker.QueueMediaProcessing,
	Table:           "media_processings",
	Request:         domain.MediaUploadCompleted{},
	TaskIDField:     "processing_id",
	AggregateColumn: "media_id",
	NotFound:        domain.ErrMediaProcessingNotFound,
	Operation:       domain.OpMediaProcessing,
	StartedBy:       "completing a media upload, and a finished material transfer",
	Messages: []worker.Message{
		{Type: "listing.complete_media", Method: http.MethodPost, Path: "/media/{media_id}/complete"},
	},
	LastLook: worker.CannotAsk("no upstream: the variants are derived again from the stored original"),
}, tasks, handler)

// Tasks describes the media processings to the engine (worker.TaskKind): a job failed
// outside the handler, or a task lost with its job, still reaches the task. A final failure
// also rejects the media with the failure's code.
func Tasks(d worker.Deps, tasks port.Repository[domain.MediaTask], media port.Repository[domain.Media]) worker.Kind[domain.MediaTask] {
	return worker.Kind[domain.MediaTask]{QueueName: worker.QueueMediaProcessing, Deps: d, Tasks: tasks, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.MediaUploadCompleted) uuid.UUID { return e.ProcessingID }),
		OnFail: func(ctx context.Context, t domain.MediaTask, f worker.Failure) error {
			_, err := media.Update(ctx, t.MediaID, func(m *domain.Media) error {
				if m.Status == domain.MediaReady || m.Status == domain.MediaRejected {
					return nil
				}
				m.Status, m.RejectReason, m.UpdatedAt = domain.MediaRejected, f.Code, d.Now()
				return nil
			})
			return err
		}}
}

// kindNeeds are what the task kind is built from, in every process.
type kindNeeds struct {
	Deps  worker.Deps
	Tasks port.Repository[domain.MediaTask]
	Media port.Repository[domain.Media]
}

func tasks(n kindNeeds) (worker.TaskKind, error) { return Tasks(n.Deps, n.Tasks, n.Media), nil }

// handlerNeeds are what the handler is built from, in a process that consumes jobs.
type handlerNeeds struct {
	Deps        worker.Deps
	Tasks       port.Repository[domain.MediaTask]
	Media       port.Repository[domain.Media]
	Storage     port.ObjectStorage
	InspectFunc port.InspectImageFunc
	Settings    worker.Settings
}

func handler(n handlerNeeds) (worker.Handler, error) {
	return New(Config{Deps: n.Deps, Tasks: n.Tasks, Media: n.Media, Storage: n.Storage, InspectFunc: n.InspectFunc,
		MaxBytes: n.Settings.MediaMaxBytes, Decodes: n.Settings.MediaDecodes})
}

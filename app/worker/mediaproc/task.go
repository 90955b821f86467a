package mediaproc

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

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

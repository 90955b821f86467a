package commands

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Started is the result of a command that starts asynchronous work: the resource it created
// or changed, and the operation the client follows.
type Started[T any] struct {
	Resource  T
	Operation domain.Operation
}

// FlowDeps are what the commands that start asynchronous work share.
type FlowDeps struct {
	Operations port.Repository[domain.Operation]
	Events     port.EventPublisher
	Now        port.Clock
}

// start inserts a pending operation about a resource, then the task (insertTask, which
// references the operation), and publishes in the same transaction the operation's first
// status event and the job event that starts the work.
func (d FlowDeps) start(ctx context.Context, op domain.Operation, insertTask func() error, job domain.Event) error {
	if err := d.Operations.Insert(ctx, op); err != nil {
		return err
	}
	if err := insertTask(); err != nil {
		return err
	}
	return d.Events.Publish(ctx, op.StatusChanged(), job)
}

// newOperation returns a pending operation created now by user.
func (d FlowDeps) newOperation(ws, user uuid.UUID, typ, resourceType string, resourceID uuid.UUID) domain.Operation {
	return domain.NewOperation(ws, user, typ, resourceType, resourceID, d.Now())
}

func (d FlowDeps) now() time.Time { return d.Now() }

// Operation types (the operation's "type" field). Stable.
const (
	OpStoreVerification = "store.verification"
	OpMediaProcessing   = "media.processing"
	OpMaterialTransfer  = "material_transfer"
	OpPublication       = "publication"
	OpProductSync       = "product_sync"
	OpAITask            = "ai_task"
)

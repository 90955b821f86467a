package commands

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// UnpublishPublication starts an unpublish: the worker deletes the publication's platform
// product (see UnpublishPublicationHandler.Handle).
type UnpublishPublication struct {
	UnpublishID   uuid.UUID
	WorkspaceID   uuid.UUID
	UserID        uuid.UUID
	PublicationID uuid.UUID
}

// CommandName implements bus.Command.
func (UnpublishPublication) CommandName() string { return "UnpublishPublication" }

// UnpublishPublicationHandler handles UnpublishPublication.
type UnpublishPublicationHandler struct {
	flow         FlowDeps
	publications port.Repository[domain.Publication]
	unpublishes  port.Repository[domain.Unpublish]
}

// NewUnpublishPublicationHandler returns the handler. It panics on a nil dependency.
func NewUnpublishPublicationHandler(flow FlowDeps, publications port.Repository[domain.Publication], unpublishes port.Repository[domain.Unpublish]) UnpublishPublicationHandler {
	mustHave("UnpublishPublicationHandler", flow, publications, unpublishes)
	return UnpublishPublicationHandler{flow: flow, publications: publications, unpublishes: unpublishes}
}

// Handle implements bus.Handler. An unknown publication is PUBLICATION_NOT_FOUND, one not
// published PUBLICATION_NOT_PUBLISHED, one unpublished or whose unpublish is pending or
// running PUBLICATION_UNPUBLISHED (the latter by unpublishes_one on the insert). The insert
// marks the publication (sql/070_unpublish_guard.sql): from this transaction on, the guard
// "publication not unpublished" refuses every other task of it PUBLICATION_UNPUBLISHED.
func (h UnpublishPublicationHandler) Handle(ctx context.Context, cmd UnpublishPublication) (Started[domain.Unpublish], error) {
	// The row lock orders the unpublishes of one publication.
	pub, err := h.publications.Update(ctx, cmd.PublicationID, func(*domain.Publication) error { return nil })
	switch {
	case errors.Is(err, domain.ErrNotFound):
		err = domain.ErrPublicationNotFound
	case err != nil:
	case pub.UnpublishedAt != nil:
		err = domain.ErrPublicationUnpublished
	case !pub.Published():
		err = domain.ErrPublicationNotPublished
	}
	if err != nil {
		return Started[domain.Unpublish]{}, err
	}
	op := h.flow.newOperation(cmd.WorkspaceID, cmd.UserID, domain.OpUnpublish, "unpublish", cmd.UnpublishID)
	u := domain.NewUnpublish(cmd.UnpublishID, op.ID, pub, h.flow.Now())
	if err := h.flow.start(ctx, op, func() error { return h.unpublishes.Insert(ctx, u) }, u.RequestEvent()); err != nil {
		return Started[domain.Unpublish]{}, err
	}
	return Started[domain.Unpublish]{Resource: u, Operation: op}, nil
}

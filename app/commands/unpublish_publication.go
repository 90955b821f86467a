package commands

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Publications are the publications as the listing commands read them: with whether an
// unpublish was accepted (and has not failed).
type Publications interface {
	port.Repository[domain.Publication]
	Unpublishing(ctx context.Context, id uuid.UUID) (bool, error)
}

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
	publications Publications
	unpublishes  port.Repository[domain.Unpublish]
}

// NewUnpublishPublicationHandler returns the handler. It panics on a nil dependency.
func NewUnpublishPublicationHandler(flow FlowDeps, publications Publications, unpublishes port.Repository[domain.Unpublish]) UnpublishPublicationHandler {
	mustHave("UnpublishPublicationHandler", flow, publications, unpublishes)
	return UnpublishPublicationHandler{flow: flow, publications: publications, unpublishes: unpublishes}
}

// Handle implements bus.Handler. An unknown publication is PUBLICATION_NOT_FOUND, one not
// published PUBLICATION_NOT_PUBLISHED, one whose unpublish was accepted already
// PUBLICATION_UNPUBLISHED.
func (h UnpublishPublicationHandler) Handle(ctx context.Context, cmd UnpublishPublication) (Started[domain.Unpublish], error) {
	pub, err := publishedForListing(ctx, h.publications, cmd.PublicationID)
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

// publishedForListing returns publication id under its row lock (so that an update and an
// unpublish of one publication are accepted one after the other), refusing one that is
// unknown, not published, or whose unpublish was accepted.
func publishedForListing(ctx context.Context, pubs Publications, id uuid.UUID) (domain.Publication, error) {
	pub, err := pubs.Update(ctx, id, func(*domain.Publication) error { return nil })
	if errors.Is(err, domain.ErrNotFound) {
		err = domain.ErrPublicationNotFound
	}
	if err != nil {
		return pub, err
	}
	unpublishing, err := pubs.Unpublishing(ctx, id)
	switch {
	case err != nil:
		return pub, err
	case unpublishing || pub.UnpublishedAt != nil:
		return pub, domain.ErrPublicationUnpublished
	case !pub.Published():
		return pub, domain.ErrPublicationNotPublished
	}
	return pub, nil
}

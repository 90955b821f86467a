package commands

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// PublishProduct starts the first publish of a product to a store (seed §5, row 4): of the
// product's revision when the command runs (see PublishingHandlers.Publish).
type PublishProduct struct {
	PublicationID uuid.UUID
	WorkspaceID   uuid.UUID
	UserID        uuid.UUID
	ProductID     uuid.UUID
	StoreID       uuid.UUID
}

// CommandName implements bus.Command.
func (PublishProduct) CommandName() string { return "PublishProduct" }

// SyncStoreProducts starts a full sync of a store's online products (seed §5, row 5).
type SyncStoreProducts struct {
	SyncID      uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	StoreID     uuid.UUID
}

// CommandName implements bus.Command.
func (SyncStoreProducts) CommandName() string { return "SyncStoreProducts" }

// CreateAITask starts an AI task about a product as it is when the command runs (seed §5,
// row 6; see PublishingHandlers.CreateAI).
type CreateAITask struct {
	TaskID      uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	Kind        string
	ProductID   uuid.UUID
	Prompt      string
}

// CommandName implements bus.Command.
func (CreateAITask) CommandName() string { return "CreateAITask" }

// PublishingHandlers handles publications, syncs and AI tasks.
type PublishingHandlers struct {
	FlowDeps
	Products     port.Products
	Stores       port.Stores
	Publications port.Repository[domain.Publication]
	Syncs        port.ProductSyncs
	AITasks      port.Repository[domain.AITask]
}

// ErrProductNotFound is the product error of these commands.
var ErrProductNotFound = domain.NewError(domain.KindNotFound, "PRODUCT_NOT_FOUND", "the product does not exist")

func (h PublishingHandlers) product(ctx context.Context, id uuid.UUID) (domain.Product, error) {
	p, err := h.Products.Get(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return p, ErrProductNotFound
	}
	return p, err
}

// verifiedStore returns the store when its credentials are verified.
func (h PublishingHandlers) verifiedStore(ctx context.Context, id uuid.UUID) (domain.Store, error) {
	s, err := h.Stores.Get(ctx, id)
	if err != nil {
		return s, err
	}
	if s.Status != domain.StoreVerified {
		return s, domain.ErrStoreNotVerified
	}
	return s, nil
}

// Publish handles PublishProduct. A second request for the same product and store is
// PRODUCT_ALREADY_PUBLISHED while the first is pending, running or done.
//
// The request names no revision: it publishes the product as it is when this transaction
// reads it. The publication records that revision (ProductRevision, also in the event and in
// the response) and a snapshot of its content, both from the same row read, in the same
// transaction as the publication and its event. The worker publishes that snapshot: drafts
// saved after the request are not published by this publication, and every delivery sends
// the same content.
func (h PublishingHandlers) Publish(ctx context.Context, cmd PublishProduct) (Started[domain.Publication], error) {
	p, err := h.product(ctx, cmd.ProductID)
	if err != nil {
		return Started[domain.Publication]{}, err
	}
	if _, err := h.verifiedStore(ctx, cmd.StoreID); err != nil {
		return Started[domain.Publication]{}, err
	}
	op := h.newOperation(cmd.WorkspaceID, cmd.UserID, OpPublication, "publication", cmd.PublicationID)
	pub := domain.NewPublication(cmd.PublicationID, cmd.WorkspaceID, op.ID, p, cmd.StoreID, h.now())
	err = h.start(ctx, op, func() error { return h.Publications.Insert(ctx, pub) }, pub.RequestEvent())
	if err != nil {
		return Started[domain.Publication]{}, err
	}
	return Started[domain.Publication]{Resource: pub, Operation: op}, nil
}

// Sync handles SyncStoreProducts. While a sync of the store is active another is
// PRODUCT_SYNC_ALREADY_ACTIVE, naming the active one (the database enforces it).
func (h PublishingHandlers) Sync(ctx context.Context, cmd SyncStoreProducts) (Started[domain.ProductSync], error) {
	if _, err := h.verifiedStore(ctx, cmd.StoreID); err != nil {
		return Started[domain.ProductSync]{}, err
	}
	op := h.newOperation(cmd.WorkspaceID, cmd.UserID, OpProductSync, "product_sync", cmd.SyncID)
	sync := domain.NewProductSync(cmd.SyncID, cmd.WorkspaceID, op.ID, cmd.StoreID, h.now())
	err := h.start(ctx, op, func() error { return h.Syncs.Insert(ctx, sync) }, sync.RequestEvent())
	if errors.Is(err, domain.ErrProductSyncAlreadyActive) {
		if active, aerr := h.Syncs.Active(ctx, cmd.StoreID); aerr == nil {
			return Started[domain.ProductSync]{}, domain.ErrProductSyncAlreadyActive.
				WithMessage("product sync %s of this store is still active", active.ID).
				WithField("active_sync_id", active.ID.String())
		}
	}
	if err != nil {
		return Started[domain.ProductSync]{}, err
	}
	return Started[domain.ProductSync]{Resource: sync, Operation: op}, nil
}

// CreateAI handles CreateAITask. The task is about the product as this transaction reads it:
// a snapshot of its content is stored on the task, in the same transaction, and the worker
// builds the provider request from the task alone (see domain.AITask).
func (h PublishingHandlers) CreateAI(ctx context.Context, cmd CreateAITask) (Started[domain.AITask], error) {
	p, err := h.product(ctx, cmd.ProductID)
	if err != nil {
		return Started[domain.AITask]{}, err
	}
	op := h.newOperation(cmd.WorkspaceID, cmd.UserID, OpAITask, "ai_task", cmd.TaskID)
	t, err := domain.NewAITask(cmd.TaskID, cmd.WorkspaceID, op.ID, cmd.Kind, p, cmd.Prompt, h.now())
	if err != nil {
		return Started[domain.AITask]{}, err
	}
	err = h.start(ctx, op, func() error { return h.AITasks.Insert(ctx, t) }, t.RequestEvent())
	if err != nil {
		return Started[domain.AITask]{}, err
	}
	return Started[domain.AITask]{Resource: t, Operation: op}, nil
}

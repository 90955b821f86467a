package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// CreateMaterialTransfer starts copying material from a source URL into our storage as a
// new media (docs/http-api.md). The caller has checked the URL's address (query.CheckSourceURL,
// outside any transaction); the handler checks only its form.
type CreateMaterialTransfer struct {
	TransferID  uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	SourceURL   string
}

// CommandName implements bus.Command.
func (CreateMaterialTransfer) CommandName() string { return "CreateMaterialTransfer" }

// CreateMaterialTransferHandler handles CreateMaterialTransfer.
type CreateMaterialTransferHandler struct {
	flow      FlowDeps
	transfers port.Repository[domain.MaterialTransfer]
}

// NewCreateMaterialTransferHandler returns the handler. It panics on a nil dependency.
func NewCreateMaterialTransferHandler(flow FlowDeps, transfers port.Repository[domain.MaterialTransfer]) CreateMaterialTransferHandler {
	mustHave("CreateMaterialTransferHandler", flow, transfers)
	return CreateMaterialTransferHandler{flow: flow, transfers: transfers}
}

// Handle implements bus.Handler: it inserts the transfer, naming the media it will create,
// and starts it.
func (h CreateMaterialTransferHandler) Handle(ctx context.Context, cmd CreateMaterialTransfer) (Started[domain.MaterialTransfer], error) {
	if err := domain.ValidateSourceURL(cmd.SourceURL); err != nil {
		return Started[domain.MaterialTransfer]{}, err
	}
	op := h.flow.newOperation(cmd.WorkspaceID, cmd.UserID, domain.OpMaterialTransfer, "material_transfer", cmd.TransferID)
	t := domain.MaterialTransfer{Task: domain.NewTask(cmd.TransferID, cmd.WorkspaceID, op.ID, h.flow.Now()),
		SourceURL: cmd.SourceURL, MediaID: domain.NewID()}
	err := h.flow.start(ctx, op, func() error { return h.transfers.Insert(ctx, t) }, t.RequestEvent())
	if err != nil {
		return Started[domain.MaterialTransfer]{}, err
	}
	return Started[domain.MaterialTransfer]{Resource: t, Operation: op}, nil
}

package commands

import (
	"context"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// PublishingHandlers is what PublishProductHandler and CreateAITaskHandler were before each
// command had a handler of its own; it remains only until app/worker's snapshot tests build
// those handlers with their constructors.
//
// Deprecated: use NewPublishProductHandler and NewCreateAITaskHandler.
type PublishingHandlers struct {
	FlowDeps
	Products     port.Products
	Stores       port.Stores
	Publications port.Repository[domain.Publication]
	AITasks      port.Repository[domain.AITask]
}

// Publish runs PublishProductHandler.Handle.
//
// Deprecated: use NewPublishProductHandler.
func (h PublishingHandlers) Publish(ctx context.Context, cmd PublishProduct) (Started[domain.Publication], error) {
	return NewPublishProductHandler(h.FlowDeps, h.Products, h.Stores, h.Publications).Handle(ctx, cmd)
}

// CreateAI runs CreateAITaskHandler.Handle.
//
// Deprecated: use NewCreateAITaskHandler.
func (h PublishingHandlers) CreateAI(ctx context.Context, cmd CreateAITask) (Started[domain.AITask], error) {
	return NewCreateAITaskHandler(h.FlowDeps, h.Products, h.AITasks).Handle(ctx, cmd)
}

// Package app is the application layer: the catalogue of use cases (commands and queries)
// that transports call. It depends on domain and on the ports in app/port, never on infra.
package app

import (
	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/query"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Application is the readable catalogue of what the service can do.
type Application struct {
	// Bus runs every command through logging/metrics → RLS transaction → idempotency.
	Bus      *bus.Bus
	Commands Commands
	Queries  query.Queries
}

// Commands lists the command handlers; run them with bus.Execute(ctx, app.Bus, handler, req).
type Commands struct {
	// Start runs the flows' derived entry points (worker.Spec.Start).
	Start bus.Handler[worker.StartCommand, worker.Started]

	RegisterUser     bus.Handler[commands.RegisterUser, commands.RegisterUserResult]
	Login            bus.Handler[commands.Login, commands.Session]
	RefreshSession   bus.Handler[commands.RefreshSession, commands.RefreshSessionResult]
	CreateProduct    bus.Handler[commands.CreateProduct, domain.Product]
	SaveProductDraft bus.Handler[commands.SaveProductDraft, domain.Product]

	CreateStore               bus.Handler[commands.CreateStore, commands.Started[domain.Store]]
	ReplaceStoreAuthorization bus.Handler[commands.ReplaceStoreAuthorization, commands.Started[domain.Store]]
	VerifyStore               bus.Handler[commands.VerifyStore, commands.Started[domain.Store]]
	SetStoreRateLimit         bus.Handler[commands.SetStoreRateLimit, domain.Store]
	CreateMedia               bus.Handler[commands.CreateMedia, commands.MediaUpload]
	CompleteMediaUpload       bus.Handler[commands.CompleteMediaUpload, commands.Started[domain.Media]]
	CreateMaterialTransfer    bus.Handler[commands.CreateMaterialTransfer, commands.Started[domain.MaterialTransfer]]
	PublishProduct            bus.Handler[commands.PublishProduct, commands.Started[domain.Publication]]
	SyncStoreProducts         bus.Handler[commands.SyncStoreProducts, commands.Started[domain.ProductSync]]
	CreateAITask              bus.Handler[commands.CreateAITask, commands.Started[domain.AITask]]
	UpdateListing             bus.Handler[commands.UpdateListing, commands.Started[domain.ListingUpdate]]
	UnpublishPublication      bus.Handler[commands.UnpublishPublication, commands.Started[domain.Unpublish]]

	CancelOperation bus.Handler[commands.CancelOperation, domain.Operation]

	CreateIntegration bus.Handler[commands.CreateIntegration, commands.CreatedIntegration]
	RevokeIntegration bus.Handler[commands.RevokeIntegration, domain.Integration]
}

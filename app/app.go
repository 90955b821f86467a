// Package app is the application layer: the catalogue of use cases (commands and queries)
// that transports call. It depends on domain and on the ports in app/port, never on infra.
package app

import (
	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/query"
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
	RegisterUser     bus.Handler[commands.RegisterUser, commands.RegisterUserResult]
	Login            bus.Handler[commands.Login, commands.Session]
	RefreshSession   bus.Handler[commands.RefreshSession, commands.RefreshSessionResult]
	CreateProduct    bus.Handler[commands.CreateProduct, domain.Product]
	SaveProductDraft bus.Handler[commands.SaveProductDraft, domain.Product]
}

package commands_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
)

// A constructor refuses a nil dependency at once, so that a wiring mistake fails at start-up.
func TestConstructorsPanicOnANilDependency(t *testing.T) {
	t.Parallel()
	flow := commands.FlowDeps{Operations: postgres.NewOperations(), Now: time.Now} // no Events
	require.PanicsWithValue(t, "commands.NewCreateProductHandler: dependency 1 is nil", func() {
		commands.NewCreateProductHandler(nil, time.Now)
	})
	require.PanicsWithValue(t, "commands.NewSaveProductDraftHandler: dependency 2 is nil", func() {
		commands.NewSaveProductDraftHandler(postgres.Products{}, port.Clock(nil))
	})
	require.PanicsWithValue(t, "commands.NewPublishProductHandler: FlowDeps.Events is nil", func() {
		commands.NewPublishProductHandler(flow, postgres.Products{}, postgres.NewStores(), postgres.NewPublications())
	})

	flow.Events = noEvents{}
	var verifications *postgres.Repository[domain.StoreVerification] // a typed nil
	require.PanicsWithValue(t, "commands.NewVerifyStoreHandler: dependency 3 is nil", func() {
		commands.NewVerifyStoreHandler(flow, postgres.NewStores(), verifications)
	})
	require.NotPanics(t, func() {
		commands.NewPublishProductHandler(flow, postgres.Products{}, postgres.NewStores(), postgres.NewPublications())
	})
}

type noEvents struct{}

func (noEvents) Publish(context.Context, ...domain.Event) error { return nil }

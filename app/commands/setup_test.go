package commands_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/internal/workertest"
)

// bundle is one test's database with a product saved twice (revision 2 is current) and a
// verified store.
type bundle struct {
	*workertest.Env
	flow    commands.FlowDeps
	product domain.Product
	store   domain.Store
	// current is the snapshot of the product's current revision.
	current *domain.ProductSnapshot
}

func setup(t *testing.T) *bundle {
	t.Helper()
	e := workertest.New(t)
	now := time.Now()
	b := &bundle{Env: e, flow: commands.FlowDeps{Operations: e.Deps.Operations, Events: e.Deps.Events, Now: time.Now}}
	var err error
	b.product, err = domain.NewProduct(uuid.New(), e.Workspace, domain.ProductContent{Title: "Mug", Description: "A mug",
		Price: "9.90", Currency: "EUR", Images: []string{"https://img.example.test/a.jpg"}}, now)
	require.NoError(t, err)
	b.store, err = domain.NewStore(uuid.New(), e.Workspace, "sandbox", "shop-1", "Shop", []string{"sandbox"}, now)
	require.NoError(t, err)
	require.True(t, b.store.RecordVerification(b.store.CredentialsVersion, true, "Shop", "", now))
	e.InTx(t, func(ctx context.Context) error {
		if err := (postgres.Products{}).Insert(ctx, b.product); err != nil {
			return err
		}
		if err := postgres.NewStores().Insert(ctx, b.store); err != nil {
			return err
		}
		_, err := postgres.Products{}.Update(ctx, b.product.ID, func(p *domain.Product) error {
			return p.SaveDraft(1, domain.ProductContent{Title: "Mug v2", Description: "A better mug", Price: "10.90",
				Currency: "EUR", Images: []string{"https://img.example.test/b.jpg"}}, now)
		})
		return err
	})
	b.current = &domain.ProductSnapshot{Revision: 2, Title: "Mug v2", Description: "A better mug", Price: "10.90",
		Currency: "EUR", Images: []string{"https://img.example.test/b.jpg"}}
	return b
}

// requireNoProductContentInEvents checks that the events the commands published carry ids
// (and the revision) only.
func (b *bundle) requireNoProductContentInEvents(t *testing.T) {
	t.Helper()
	require.Zero(t, b.Count(t, `SELECT count(*) FROM outbox_all_events WHERE event_payload::text LIKE '%Mug%'`),
		"events carry no product content")
}

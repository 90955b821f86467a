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

// The commands capture the product's content with the task, in their transaction, and the
// events they publish carry ids (and the revision) only.
func TestPublishAndCreateAICaptureTheProductTheyRead(t *testing.T) {
	t.Parallel()
	e := workertest.New(t)
	now := time.Now()
	products, stores := postgres.Products{}, postgres.NewStores()
	h := commands.PublishingHandlers{
		FlowDeps: commands.FlowDeps{Operations: e.Deps.Operations, Events: e.Deps.Events, Now: time.Now},
		Products: products, Stores: stores, Publications: postgres.NewPublications(), AITasks: postgres.NewAITasks(),
	}
	product, err := domain.NewProduct(uuid.New(), e.Workspace, domain.ProductContent{Title: "Mug", Description: "A mug",
		Price: "9.90", Currency: "EUR", Images: []string{"https://img.example.test/a.jpg"}}, now)
	require.NoError(t, err)
	store, err := domain.NewStore(uuid.New(), e.Workspace, "sandbox", "shop-1", "Shop", []string{"sandbox"}, now)
	require.NoError(t, err)
	require.True(t, store.RecordVerification(store.CredentialsVersion, true, "Shop", "", now))
	e.InTx(t, func(ctx context.Context) error {
		if err := products.Insert(ctx, product); err != nil {
			return err
		}
		if err := stores.Insert(ctx, store); err != nil {
			return err
		}
		_, err := products.Update(ctx, product.ID, func(p *domain.Product) error {
			return p.SaveDraft(1, domain.ProductContent{Title: "Mug v2", Description: "A better mug", Price: "10.90",
				Currency: "EUR", Images: []string{"https://img.example.test/b.jpg"}}, now)
		})
		return err
	})
	want := &domain.ProductSnapshot{Revision: 2, Title: "Mug v2", Description: "A better mug", Price: "10.90", Currency: "EUR",
		Images: []string{"https://img.example.test/b.jpg"}}

	var pub commands.Started[domain.Publication]
	var task commands.Started[domain.AITask]
	e.InTx(t, func(ctx context.Context) error {
		var err error
		if pub, err = h.Publish(ctx, commands.PublishProduct{PublicationID: uuid.New(), WorkspaceID: e.Workspace,
			UserID: e.User, ProductID: product.ID, StoreID: store.ID}); err != nil {
			return err
		}
		task, err = h.CreateAI(ctx, commands.CreateAITask{TaskID: uuid.New(), WorkspaceID: e.Workspace, UserID: e.User,
			Kind: domain.AIKindText, ProductID: product.ID, Prompt: "short"})
		return err
	})
	require.Equal(t, 2, pub.Resource.ProductRevision)
	require.Equal(t, want, pub.Resource.Snapshot)
	require.Equal(t, want, workertest.Load(t, e, postgres.NewPublications(), pub.Resource.ID).Snapshot)
	require.Equal(t, want, task.Resource.Snapshot)
	require.Equal(t, want, workertest.Load(t, e, postgres.NewAITasks(), task.Resource.ID).Snapshot)

	require.Zero(t, e.Count(t, `SELECT count(*) FROM outbox_events WHERE event_payload::text LIKE '%Mug%'`),
		"events carry no product content")
	require.Equal(t, 1, e.CountOutbox(t, "publication.requested", pub.Resource.ID))
	require.Equal(t, 1, e.CountOutbox(t, "ai_task.requested", task.Resource.ID))

	// An unknown product: nothing is stored.
	err = postgres.Transactor{Pool: e.DB.App}.InTx(context.Background(), e.Workspace, e.User, func(ctx context.Context) error {
		_, err := h.CreateAI(ctx, commands.CreateAITask{TaskID: uuid.New(), WorkspaceID: e.Workspace, UserID: e.User,
			Kind: domain.AIKindText, ProductID: uuid.New()})
		return err
	})
	require.ErrorIs(t, err, commands.ErrProductNotFound)
	require.Equal(t, 1, e.Count(t, `SELECT count(*) FROM ai_tasks`))
}

package commands_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/internal/workertest"
)

// PublishProduct captures the product's current revision and content with the publication,
// in its transaction; its event carries ids (and the revision) only.
func TestPublishProductCapturesTheProductItReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := commands.NewPublishProductHandler(b.flow, postgres.Products{}, postgres.NewStores(), postgres.NewPublications())

	var pub commands.Started[domain.Publication]
	b.InTx(t, func(ctx context.Context) error {
		var err error
		pub, err = h.Handle(ctx, commands.PublishProduct{PublicationID: uuid.New(), WorkspaceID: b.Workspace,
			UserID: b.User, ProductID: b.product.ID, StoreID: b.store.ID})
		return err
	})
	require.Equal(t, 2, pub.Resource.ProductRevision)
	require.Equal(t, b.current, pub.Resource.Snapshot)
	require.Equal(t, b.current, workertest.Load(t, b.Env, postgres.NewPublications(), pub.Resource.ID).Snapshot)
	b.requireNoProductContentInEvents(t)
	require.Equal(t, 1, b.CountOutbox(t, "publication.requested", pub.Resource.ID))
}

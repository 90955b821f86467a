package commands_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
)

// While an unpublish is pending, an update and a second unpublish of the publication are
// refused PUBLICATION_UNPUBLISHED and a republish PRODUCT_ALREADY_PUBLISHED. Once it ended
// without deleting the product (here: cancelled before it started; a final failure is the
// same), the publication is published again: an update and a new unpublish are accepted.
func TestUnpublishPendingRefusesThenCancelledAdmits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := b.seedPublication(t, domain.TaskSucceeded)
	pubs := postgres.NewPublications()
	unpublishes := postgres.TaskRepositories()["unpublishes"].(port.Repository[domain.Unpublish])
	unpub := commands.NewUnpublishPublicationHandler(b.flow, pubs, unpublishes)
	update := commands.NewUpdateListingHandler(b.flow, postgres.Products{}, pubs, postgres.NewListingUpdates())
	publish := commands.NewPublishProductHandler(b.flow, postgres.Products{}, postgres.NewStores(), pubs)
	run := func(fn func(ctx context.Context) error) error {
		return postgres.Transactor{Pool: b.DB.App}.InTx(context.Background(), b.Workspace, b.User, fn)
	}
	unpublishIt := func() (domain.Unpublish, error) {
		var got commands.Started[domain.Unpublish]
		err := run(func(ctx context.Context) error {
			var err error
			got, err = unpub.Handle(ctx, commands.UnpublishPublication{UnpublishID: uuid.New(), WorkspaceID: b.Workspace,
				UserID: b.User, PublicationID: pub.ID})
			return err
		})
		return got.Resource, err
	}
	updateIt := func() error {
		return run(func(ctx context.Context) error {
			_, err := update.Handle(ctx, commands.UpdateListing{UpdateID: uuid.New(), WorkspaceID: b.Workspace, UserID: b.User,
				PublicationID: pub.ID})
			return err
		})
	}

	u, err := unpublishIt()
	require.NoError(t, err)
	require.ErrorIs(t, updateIt(), domain.ErrPublicationUnpublished)
	_, err = unpublishIt()
	require.ErrorIs(t, err, domain.ErrPublicationUnpublished)
	err = run(func(ctx context.Context) error {
		_, err := publish.Handle(ctx, commands.PublishProduct{PublicationID: uuid.New(), WorkspaceID: b.Workspace, UserID: b.User,
			ProductID: b.product.ID, StoreID: b.store.ID})
		return err
	})
	require.ErrorIs(t, err, domain.ErrProductAlreadyPublished)

	require.NoError(t, run(func(ctx context.Context) error {
		_, err := unpublishes.Update(ctx, u.ID, func(u *domain.Unpublish) error { return u.Cancel(time.Now()) })
		return err
	}))
	require.NoError(t, updateIt(), "the cancelled unpublish left the publication published")
	_, err = unpublishIt()
	require.NoError(t, err)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM listing_updates`))
	require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM unpublishes`))
}

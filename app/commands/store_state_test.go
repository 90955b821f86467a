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
)

// A store in a state a flow declared (domain.DeclareState: disconnected) keeps it and its
// Since column through the stores repository, and a command checking the store answers the
// store's declared guard (STORE_DISCONNECTED) before its own STORE_NOT_VERIFIED. Replacing
// the credentials leaves the state (its column NULL again).
func TestStoreInADeclaredStateIsRefusedItsGuard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stores := postgres.NewStores()
	now := time.Now().UTC().Truncate(time.Microsecond)
	change := func(f func(*domain.Store)) (got domain.Store) {
		b.InTx(t, func(ctx context.Context) (err error) {
			if _, err = stores.Update(ctx, b.store.ID, func(s *domain.Store) error { f(s); return nil }); err == nil {
				got, err = stores.Get(ctx, b.store.ID)
			}
			return err
		})
		return got
	}
	got := change(func(s *domain.Store) { s.Enter(domain.StoreDisconnected, now) })
	require.True(t, got.In(domain.StoreDisconnected))
	require.True(t, now.Equal(*got.StateSince))

	publish := commands.NewPublishProductHandler(b.flow, postgres.Products{}, stores, postgres.NewPublications())
	sync := commands.NewSyncStoreProductsHandler(b.flow, stores, postgres.NewProductSyncs())
	run := func(fn func(ctx context.Context) error) error {
		return postgres.Transactor{Pool: b.DB.App}.InTx(context.Background(), b.Workspace, b.User, fn)
	}
	publishIt := func(ctx context.Context) error {
		_, err := publish.Handle(ctx, commands.PublishProduct{PublicationID: uuid.New(), WorkspaceID: b.Workspace,
			UserID: b.User, ProductID: b.product.ID, StoreID: b.store.ID})
		return err
	}
	syncIt := func(ctx context.Context) error {
		_, err := sync.Handle(ctx, commands.SyncStoreProducts{SyncID: uuid.New(), WorkspaceID: b.Workspace,
			UserID: b.User, StoreID: b.store.ID})
		return err
	}
	for _, fn := range []func(ctx context.Context) error{publishIt, syncIt} {
		require.ErrorIs(t, run(fn), domain.ErrStoreDisconnected)
	}

	got = change(func(s *domain.Store) { s.ReplaceCredentials(now) })
	require.Nil(t, got.StateSince)
	require.Zero(t, b.Count(t, `SELECT count(*) FROM stores WHERE disconnected_at IS NOT NULL`))
	require.ErrorIs(t, run(publishIt), domain.ErrStoreNotVerified)
}

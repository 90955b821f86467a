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

// seedPublication inserts a publication of the product at revision 1, finished as status
// says (succeeded: with its platform product).
func (b *bundle) seedPublication(t *testing.T, status domain.TaskStatus) domain.Publication {
	t.Helper()
	op := domain.NewOperation(b.Workspace, b.User, domain.OpPublication, "publication", uuid.Nil, b.flow.Now())
	p := b.product
	p.Revision = 1
	pub := domain.NewPublication(uuid.New(), b.Workspace, op.ID, p, b.store.ID, b.flow.Now())
	pub.Snapshot = nil
	pub.Status = status
	if status == domain.TaskSucceeded {
		pub.ExternalProductID = "prod_1"
		pub.RecordPushed(1)
	}
	workertest.InsertTask(t, b.Env, postgres.NewPublications(), op, pub)
	return pub
}

// UpdateListing captures the product's current revision and content with the update, in
// its transaction; its event carries ids and the revision only.
func TestUpdateListingCapturesTheCurrentRevision(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := b.seedPublication(t, domain.TaskSucceeded)
	updates := postgres.NewListingUpdates()
	h := commands.NewUpdateListingHandler(b.flow, postgres.Products{}, postgres.NewPublications(), updates)

	var got commands.Started[domain.ListingUpdate]
	b.InTx(t, func(ctx context.Context) error {
		var err error
		got, err = h.Handle(ctx, commands.UpdateListing{UpdateID: uuid.New(), WorkspaceID: b.Workspace, UserID: b.User,
			PublicationID: pub.ID})
		return err
	})
	u := got.Resource
	require.Equal(t, 2, u.ProductRevision)
	require.Equal(t, *b.current, u.Snapshot)
	require.Equal(t, pub.ID, u.PublicationID)
	require.Equal(t, domain.TaskPending, u.Status)
	require.Equal(t, domain.OpListingUpdate, got.Operation.Type)
	require.Equal(t, u.ID, got.Operation.ResourceID)
	stored := workertest.Load(t, b.Env, updates, u.ID)
	require.Equal(t, *b.current, stored.Snapshot)
	require.Equal(t, u.OperationID, stored.OperationID)
	require.Equal(t, 1, b.CountOutbox(t, "listing_update.requested", u.ID))
	b.requireNoProductContentInEvents(t)
}

// A publication that has not succeeded, or does not exist, is refused; nothing is written.
func TestUpdateListingRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := commands.NewUpdateListingHandler(b.flow, postgres.Products{}, postgres.NewPublications(), postgres.NewListingUpdates())
	run := func(pubID uuid.UUID) error {
		return postgres.Transactor{Pool: b.DB.App}.InTx(context.Background(), b.Workspace, b.User, func(ctx context.Context) error {
			_, err := h.Handle(ctx, commands.UpdateListing{UpdateID: uuid.New(), WorkspaceID: b.Workspace, UserID: b.User, PublicationID: pubID})
			return err
		})
	}
	pub := b.seedPublication(t, domain.TaskPending)
	for _, status := range []domain.TaskStatus{domain.TaskPending, domain.TaskRunning, domain.TaskFailed} {
		_, err := b.DB.Owner.Exec(context.Background(), `UPDATE publications SET status = $2 WHERE id = $1`, pub.ID, status)
		require.NoError(t, err)
		require.ErrorIs(t, run(pub.ID), domain.ErrPublicationNotPublished, status)
	}
	require.ErrorIs(t, run(uuid.New()), domain.ErrPublicationNotFound)
	require.Zero(t, b.Count(t, `SELECT count(*) FROM listing_updates`))
	require.Zero(t, b.Count(t, `SELECT count(*) FROM outbox_all_events WHERE event_type = 'listing_update.requested'`))
}

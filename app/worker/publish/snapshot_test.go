package publish_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/workertest"
)

// recorder records the create requests a handler sends.
type recorder struct {
	port.Marketplace
	mu      sync.Mutex
	creates []port.ProductInput
}

func (r *recorder) CreateProduct(ctx context.Context, creds port.Credentials, key string, in port.ProductInput) (port.PlatformProduct, error) {
	r.mu.Lock()
	r.creates = append(r.creates, in)
	r.mu.Unlock()
	return r.Marketplace.CreateProduct(ctx, creds, key, in)
}

func (r *recorder) sent() []port.ProductInput {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]port.ProductInput(nil), r.creates...)
}

// request runs the PublishProduct command for the fixture's product and store, as the HTTP
// API does, and returns the fixture with the publication and the job the outbox delivers:
// the event exactly as the command stored it.
func (b *bundle) request(t *testing.T, f fixture) fixture {
	t.Helper()
	h := commands.NewPublishProductHandler(commands.FlowDeps{Operations: b.Deps.Operations, Events: b.Deps.Events, Now: time.Now},
		b.products, b.stores, b.pubs)
	var started commands.Started[domain.Publication]
	b.InTx(t, func(ctx context.Context) error {
		var err error
		started, err = h.Handle(ctx, commands.PublishProduct{PublicationID: uuid.New(), WorkspaceID: b.Workspace,
			UserID: b.User, ProductID: f.product.ID, StoreID: f.store.ID})
		return err
	})
	f.pub, f.op = started.Resource, started.Operation
	var id uuid.UUID
	var payload json.RawMessage
	require.NoError(t, b.DB.Owner.QueryRow(context.Background(), `SELECT id, event_payload FROM outbox_all_events
		WHERE event_type = 'publication.requested' AND aggregate_id = $1`, f.pub.ID.String()).Scan(&id, &payload))
	f.job = worker.Job{ID: id.String(), WorkspaceID: b.Workspace, EventType: "publication.requested", Payload: payload, Attempt: 1}
	return f
}

// saveDraft saves a new draft of the product, as PUT …/draft does, and returns the product.
func (b *bundle) saveDraft(t *testing.T, id uuid.UUID, c domain.ProductContent) domain.Product {
	t.Helper()
	var p domain.Product
	b.InTx(t, func(ctx context.Context) error {
		var err error
		p, err = b.products.Update(ctx, id, func(p *domain.Product) error { return p.SaveDraft(p.Revision, c, time.Now()) })
		return err
	})
	return p
}

var (
	draft2 = domain.ProductContent{Title: "Red mug", Description: "A red mug", Price: "14.00", Currency: "USD",
		Images: []string{"https://img.example.test/red.jpg"}}
	draft3 = domain.ProductContent{Title: "Green mug", Description: "A green mug", Price: "15.00", Currency: "GBP"}
)

// The request names a revision (the product's, when the command ran); drafts saved after it,
// before the first delivery and between a delivery that failed at the create and its
// redelivery, are not published: every delivery sends the requested revision's content.
func TestPublishesTheRequestedRevisionWhateverIsEditedAfter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{Marketplace: b.gateway}
	h := b.newHandler(t, rec)
	ctx := context.Background()
	f := b.request(t, b.seedStoreAndProduct(t, "sk_test_pub_snap_1", true))
	require.Equal(t, 1, f.pub.ProductRevision)
	require.Equal(t, &domain.ProductSnapshot{Revision: 1, Title: "Blue mug", Description: "A mug", Price: "12.50",
		Currency: "EUR", Images: []string{"https://img.example.test/mug.jpg"}}, f.pub.Snapshot)
	var ev map[string]any
	require.NoError(t, json.Unmarshal(f.job.Payload, &ev))
	require.Equal(t, float64(1), ev["product_revision"])
	require.ElementsMatch(t, []string{"publication_id", "operation_id", "product_id", "store_id", "product_revision"},
		keys(ev), "the event carries ids and the revision, not the content")

	require.Equal(t, 2, b.saveDraft(t, f.product.ID, draft2).Revision)
	b.sandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointCreateProduct, Status: 503})
	err := h.Handle(ctx, f.job)
	require.ErrorIs(t, err, port.ErrPlatformTransient)
	require.False(t, worker.IsPermanent(err))

	require.Equal(t, 3, b.saveDraft(t, f.product.ID, draft3).Revision)
	require.NoError(t, h.Handle(ctx, redeliver(f.job)))

	want := port.ProductInput{ExternalRef: f.pub.ExternalRef(), Title: "Blue mug", Description: "A mug", Price: "12.50",
		Currency: "EUR", Images: []string{"https://img.example.test/mug.jpg"}}
	require.Equal(t, []port.ProductInput{want, want}, rec.sent(), "both deliveries sent revision 1")
	p := b.platformProduct(t, f)
	require.Equal(t, "Blue mug", p.Title)
	require.Equal(t, "12.50", p.Price)
	require.Equal(t, "EUR", p.Currency)
	s := b.state(t, f)
	require.Equal(t, domain.TaskSucceeded, s.pub.Status)
	require.Equal(t, p.ID, s.pub.ExternalProductID)
	require.Equal(t, domain.OperationSucceeded, s.op.Status)
	require.Equal(t, []string{"pending", "succeeded"}, s.events, "the command's event, then the worker's")
	require.Equal(t, 1, s.pub.ProductRevision)
	require.Equal(t, f.pub.Snapshot, s.pub.Snapshot, "the snapshot never changes")
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// legacy stores the fixture's publication as it was before snapshots existed: without one.
func (b *bundle) legacy(t *testing.T, f fixture) {
	t.Helper()
	_, err := b.DB.Owner.Exec(context.Background(), `UPDATE publications SET product_snapshot = NULL WHERE id = $1`, f.pub.ID)
	require.NoError(t, err)
	require.Nil(t, workertest.Load(t, b.Env, b.pubs, f.pub.ID).Snapshot)
}

// A publication without a snapshot whose product is still at the requested revision: Step A
// captures that revision's content, and a later edit changes nothing.
func TestPublicationWithoutSnapshotCapturesTheRequestedRevision(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{Marketplace: b.gateway}
	h := b.newHandler(t, rec)
	ctx := context.Background()
	f := b.seed(t, "sk_test_pub_snap_2", true)
	b.legacy(t, f)

	b.sandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointCreateProduct, Status: 503})
	require.Error(t, h.Handle(ctx, f.job))
	captured := workertest.Load(t, b.Env, b.pubs, f.pub.ID).Snapshot
	require.Equal(t, f.pub.Snapshot, captured)

	b.saveDraft(t, f.product.ID, draft2)
	require.NoError(t, h.Handle(ctx, redeliver(f.job)))

	sent := rec.sent()
	require.Len(t, sent, 2)
	require.Equal(t, sent[0], sent[1])
	require.Equal(t, "Blue mug", sent[1].Title)
	require.Equal(t, "Blue mug", b.platformProduct(t, f).Title)
	b.requireSucceeded(t, f)
}

// A publication without a snapshot whose product moved on: the requested revision's content
// is lost, so the publication fails instead of publishing another revision.
func TestPublicationWithoutSnapshotOfAnOlderRevisionFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_pub_snap_3", true)
	b.legacy(t, f)
	b.saveDraft(t, f.product.ID, draft2)

	err := b.handler.Handle(context.Background(), f.job)
	require.True(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, domain.ErrProductRevisionUnavailable)

	s := b.state(t, f)
	require.Equal(t, domain.TaskFailed, s.pub.Status)
	require.Equal(t, "PRODUCT_REVISION_UNAVAILABLE", s.pub.ErrorCode)
	require.Nil(t, s.pub.Snapshot)
	require.Equal(t, domain.OperationFailed, s.op.Status)
	require.Equal(t, "PRODUCT_REVISION_UNAVAILABLE", s.op.ErrorCode)
	require.Equal(t, []string{"failed"}, s.events)
	require.Empty(t, b.sandbox.Stats().Calls)

	// A new request publishes the current revision.
	again := b.request(t, f)
	require.Equal(t, 2, again.pub.ProductRevision)
	require.NoError(t, b.handler.Handle(context.Background(), again.job))
	require.Equal(t, "Red mug", b.platformProduct(t, again).Title)
}

// A publication without a snapshot that an earlier delivery had already started (before
// snapshots existed) and whose product moved on: the product that delivery may have created
// is looked for first. Found, it is recorded (not orphaned); not found, the publication
// fails with PRODUCT_REVISION_UNAVAILABLE, and nothing is created from another revision.
func TestStartedPublicationWithoutSnapshotRecordsWhatAnEarlierDeliveryCreated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, created := range []bool{true, false} {
		rec := &recorder{Marketplace: b.gateway}
		h := b.newHandler(t, rec)
		f := b.seed(t, "sk_test_pub_snap_4", true)
		b.legacy(t, f)
		_, err := b.DB.Owner.Exec(ctx, `UPDATE publications SET status = 'running', attempts = 1 WHERE id = $1`, f.pub.ID)
		require.NoError(t, err)
		var earlier port.PlatformProduct
		if created { // the earlier delivery's create reached the platform, then it died
			earlier, err = b.gateway.CreateProduct(ctx, f.creds, f.pub.ExternalRef(), port.ProductInput{
				ExternalRef: f.pub.ExternalRef(), Title: "Blue mug", Price: "12.00", Currency: "EUR"})
			require.NoError(t, err)
		}
		b.saveDraft(t, f.product.ID, draft2)

		err = h.Handle(ctx, f.job)
		require.Empty(t, rec.sent(), "nothing is created without the requested revision's content")
		s := b.state(t, f)
		if created {
			require.NoError(t, err)
			require.Equal(t, domain.TaskSucceeded, s.pub.Status)
			require.Equal(t, earlier.ID, s.pub.ExternalProductID)
		} else {
			require.True(t, worker.IsPermanent(err))
			require.ErrorIs(t, err, domain.ErrProductRevisionUnavailable)
			s = b.afterLastLook(t, h, f, "PRODUCT_REVISION_UNAVAILABLE")
			require.Equal(t, domain.TaskFailed, s.pub.Status)
			require.Equal(t, "PRODUCT_REVISION_UNAVAILABLE", s.pub.ErrorCode)
			require.Equal(t, "PRODUCT_REVISION_UNAVAILABLE", s.op.ErrorCode)
		}
	}
}

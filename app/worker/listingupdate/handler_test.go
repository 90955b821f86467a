package listingupdate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/listingupdate"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/platform"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/infra/secret"
	"github.com/listingkit/listing/internal/testwait"
	"github.com/listingkit/listing/internal/workertest"
)

const apiKey = "sk_test_update"

// bundle is one test's world: a verified store, a product published at revision 1 (its
// platform product exists in the sandbox) and a handler.
type bundle struct {
	*workertest.Env
	sandbox  *marketplace.Sandbox
	gateway  *platform.Client
	cipher   *secret.Cipher
	handler  *listingupdate.Handler
	stores   postgres.Stores
	pubs     postgres.Publications
	updates  postgres.ListingUpdates
	products postgres.Products

	store   domain.Store
	product domain.Product
	pub     domain.Publication
	creds   port.Credentials
}

func setup(t *testing.T, key string) *bundle {
	t.Helper()
	b := &bundle{Env: workertest.New(t)}
	var err error
	b.sandbox, err = marketplace.New(marketplace.Config{Logger: b.Log})
	require.NoError(t, err)
	srv := httptest.NewServer(b.sandbox)
	t.Cleanup(srv.Close)
	b.gateway, err = platform.New(platform.Config{BaseURL: srv.URL, Logger: b.Log, Timeout: 5 * time.Second})
	require.NoError(t, err)
	b.cipher, err = secret.New(secret.Config{Logger: b.Log})
	require.NoError(t, err)
	b.stores, b.pubs, b.updates = postgres.NewStores(), postgres.NewPublications(), postgres.NewListingUpdates()
	// The declared guards, as the service checks them in every begin step.
	b.Deps.Guards = postgres.TaskGuards{Tables: []port.TaskTable{{Queue: worker.QueueListingUpdate, Table: "listing_updates"}}}
	b.handler = b.newHandler(t, b.gateway, b.Deps)
	b.creds, err = port.NewCredentials(key)
	require.NoError(t, err)

	now := time.Now()
	b.InTx(t, func(ctx context.Context) error {
		b.store, err = domain.NewStore(uuid.New(), b.Workspace, "sandbox", "shop-"+uuid.NewString()[:8], "Shop", []string{"sandbox"}, now)
		require.NoError(t, err)
		require.True(t, b.store.RecordVerification(b.store.CredentialsVersion, true, "Shop", "", now))
		require.NoError(t, b.stores.Insert(ctx, b.store))
		require.NoError(t, b.stores.SetCredentials(ctx, b.store.ID, b.Seal(t, b.cipher, b.store.ID, key)))
		b.product, err = domain.NewProduct(uuid.New(), b.Workspace, content("v1"), now)
		require.NoError(t, err)
		return b.products.Insert(ctx, b.product)
	})
	// The product published at revision 1, as the publish flow leaves it.
	op := domain.NewOperation(b.Workspace, b.User, "publication", "publication", uuid.Nil, now)
	b.pub = domain.NewPublication(uuid.New(), b.Workspace, op.ID, b.product, b.store.ID, now)
	created, err := b.gateway.CreateProduct(context.Background(), b.creds, b.pub.ID.String(), port.ProductInput{
		ExternalRef: b.pub.ExternalRef(), Title: "v1", Price: "10.00", Currency: "EUR"})
	require.NoError(t, err)
	b.pub.Status, b.pub.ExternalProductID = domain.TaskSucceeded, created.ID
	b.pub.RecordPushed(1)
	workertest.InsertTask(t, b.Env, b.pubs, op, b.pub)
	return b
}

func (b *bundle) newHandler(t *testing.T, m port.Marketplace, deps worker.Deps) *listingupdate.Handler {
	t.Helper()
	h, err := listingupdate.New(listingupdate.Config{Deps: deps, Updates: b.updates, Publications: b.pubs, Stores: b.stores,
		Cipher: b.cipher, Marketplace: m, Lease: time.Minute})
	require.NoError(t, err)
	return h
}

func content(title string) domain.ProductContent {
	return domain.ProductContent{Title: title, Description: "A mug", Price: "10.00", Currency: "EUR",
		Images: []string{"https://img.example.test/mug.jpg"}}
}

// saveDraft saves the product with title, as PUT …/draft does, and returns the new revision.
func (b *bundle) saveDraft(t *testing.T, title string) int {
	t.Helper()
	b.InTx(t, func(ctx context.Context) error {
		p, err := b.products.Update(ctx, b.product.ID, func(p *domain.Product) error {
			return p.SaveDraft(p.Revision, content(title), time.Now())
		})
		b.product = p
		return err
	})
	return b.product.Revision
}

// fixture is one requested update.
type fixture struct {
	update domain.ListingUpdate
	op     domain.Operation
	job    worker.Job
}

// request inserts an update of the product's current revision, as the command does, and
// returns the job the outbox would deliver.
func (b *bundle) request(t *testing.T) fixture {
	t.Helper()
	var f fixture
	now := time.Now()
	f.op = domain.NewOperation(b.Workspace, b.User, "listing_update", "listing_update", uuid.Nil, now)
	f.update = domain.NewListingUpdate(uuid.New(), f.op.ID, b.pub, b.product, now)
	f.op.ResourceID = f.update.ID
	workertest.InsertTask(t, b.Env, b.updates, f.op, f.update)
	f.job = b.Job(t, f.update.RequestEvent(), 1, false)
	return f
}

func (b *bundle) publication(t *testing.T) domain.Publication {
	t.Helper()
	return workertest.Load(t, b.Env, b.pubs, b.pub.ID)
}

// listing is the platform product's current title.
func (b *bundle) listing(t *testing.T) string {
	t.Helper()
	p, ok := b.sandbox.Product(b.creds.APIKey(), b.pub.ExternalProductID)
	require.True(t, ok)
	return p.Title
}

func (b *bundle) puts() int { return b.sandbox.Calls(marketplace.EndpointUpdateProduct) }

// requireOutcome checks that the update and its operation succeeded with outcome, the
// platform holding platformRevision.
func (b *bundle) requireOutcome(t *testing.T, f fixture, outcome string, platformRevision int) {
	t.Helper()
	u := workertest.Load(t, b.Env, b.updates, f.update.ID)
	require.Equal(t, domain.TaskSucceeded, u.Status)
	require.Equal(t, outcome, u.Outcome)
	op := b.Operation(t, f.op.ID)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	var res map[string]any
	require.NoError(t, json.Unmarshal(op.Result, &res))
	require.Equal(t, map[string]any{"update_id": f.update.ID.String(), "publication_id": b.pub.ID.String(),
		"product_revision": float64(f.update.ProductRevision), "outcome": outcome,
		"platform_revision": float64(platformRevision), "external_product_id": b.pub.ExternalProductID}, res)
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, f.op.ID))
}

func redeliver(job worker.Job) worker.Job {
	job.Attempt++
	return job
}

func TestUpdatePushesTheRevision(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	require.Equal(t, 2, b.saveDraft(t, "v2"))
	f := b.request(t)

	require.NoError(t, b.handler.Handle(context.Background(), f.job))

	b.requireOutcome(t, f, domain.UpdatePushed, 2)
	require.Equal(t, "v2", b.listing(t))
	require.Equal(t, 1, b.puts())
	p := b.publication(t)
	require.Equal(t, 2, p.PushedRevision)
	require.Equal(t, 2, p.SentRevision)
	require.Equal(t, uuid.Nil, p.Push.UpdateID, "the claim is released")
}

// Out of order: the update of revision 3 is recorded, then revision 2's job arrives. The
// platform keeps revision 3; the late update succeeds as superseded without a call.
func TestOutOfOrderDeliveryNeverRegressesTheListing(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.saveDraft(t, "v2")
	f2 := b.request(t)
	b.saveDraft(t, "v3")
	f3 := b.request(t)
	ctx := context.Background()

	require.NoError(t, b.handler.Handle(ctx, f3.job))
	require.NoError(t, b.handler.Handle(ctx, f2.job))

	b.requireOutcome(t, f3, domain.UpdatePushed, 3)
	b.requireOutcome(t, f2, domain.UpdateSuperseded, 3)
	require.Equal(t, "v3", b.listing(t))
	require.Equal(t, 1, b.puts(), "revision 2 was never sent")
	require.Equal(t, 3, b.publication(t).PushedRevision)
}

// Two updates of the same revision: the second is a no-op.
func TestUpdateOfTheRevisionAlreadyPushedIsANoOp(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.saveDraft(t, "v2")
	a, c := b.request(t), b.request(t)
	ctx := context.Background()

	require.NoError(t, b.handler.Handle(ctx, a.job))
	require.NoError(t, b.handler.Handle(ctx, c.job))

	b.requireOutcome(t, a, domain.UpdatePushed, 2)
	b.requireOutcome(t, c, domain.UpdateSuperseded, 2)
	require.Equal(t, 1, b.puts())

	// An update of the revision the first publish pushed is a no-op too.
	b2 := setup(t, apiKey+"_2")
	f := b2.request(t)
	require.NoError(t, b2.handler.Handle(ctx, f.job))
	b2.requireOutcome(t, f, domain.UpdateSuperseded, 1)
	require.Zero(t, b2.puts())
}

func TestRedeliveryOfAFinishedUpdateDoesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.sandbox.SetIgnoreIdempotencyKey(true)
	b.saveDraft(t, "v2")
	f := b.request(t)
	ctx := context.Background()
	require.NoError(t, b.handler.Handle(ctx, f.job))
	before := b.sandbox.Stats()
	pubBefore := b.publication(t)

	require.NoError(t, b.newHandler(t, b.gateway, b.Deps).Handle(ctx, redeliver(f.job)))

	require.Equal(t, before, b.sandbox.Stats(), "no platform call at all")
	require.Equal(t, pubBefore, b.publication(t))
	b.requireOutcome(t, f, domain.UpdatePushed, 2)
}

// A crash (a lost database connection) at the begin step: nothing was sent; the
// redelivery pushes.
func TestRedeliveryAfterACrashAtBegin(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.saveDraft(t, "v2")
	f := b.request(t)
	ctx := context.Background()
	deps := b.Deps
	deps.Tx = &workertest.FlakyTx{Transactor: b.Deps.Tx, FailAt: 1}

	err := b.newHandler(t, b.gateway, deps).Handle(ctx, f.job)
	require.ErrorIs(t, err, workertest.ErrCrash)
	require.Zero(t, b.puts())
	require.Equal(t, domain.TaskPending, workertest.Load(t, b.Env, b.updates, f.update.ID).Status)

	require.NoError(t, b.handler.Handle(ctx, redeliver(f.job)))
	b.requireOutcome(t, f, domain.UpdatePushed, 2)
	require.Equal(t, 1, b.puts())
}

// A crash after the PUT, before the record step: the redelivery holds its own claim and
// sends the same PUT with the same Idempotency-Key, which the gateway answers from its saved
// response (or, ignoring the key, applies the same content again).
func TestRedeliveryAfterACrashBetweenPutAndRecord(t *testing.T) {
	t.Parallel()
	for _, ignore := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignore_idempotency_key=%v", ignore), func(t *testing.T) {
			t.Parallel()
			b := setup(t, apiKey)
			b.sandbox.SetIgnoreIdempotencyKey(ignore)
			b.saveDraft(t, "v2")
			f := b.request(t)
			ctx := context.Background()
			deps := b.Deps
			deps.Tx = &workertest.FlakyTx{Transactor: b.Deps.Tx, FailAt: 2, Times: workertest.CrashTimes}

			err := b.newHandler(t, b.gateway, deps).Handle(ctx, f.job)
			require.ErrorIs(t, err, workertest.ErrCrash)
			require.Equal(t, "v2", b.listing(t))
			mid := b.publication(t)
			require.Equal(t, f.update.ID, mid.Push.UpdateID, "the claim is still held")
			require.Equal(t, 1, mid.PushedRevision)
			require.Equal(t, 2, mid.SentRevision)
			require.Equal(t, domain.TaskRunning, workertest.Load(t, b.Env, b.updates, f.update.ID).Status)

			require.NoError(t, b.handler.Handle(ctx, redeliver(f.job)))
			b.requireOutcome(t, f, domain.UpdatePushed, 2)
			require.Equal(t, 2, b.puts())
			st := b.sandbox.Stats()
			if ignore {
				require.Equal(t, 2, st.ProductsUpdated)
			} else {
				require.Equal(t, 1, st.ProductsUpdated)
				require.Equal(t, 1, st.IdempotentReplays)
			}
			require.Equal(t, "v2", b.listing(t))
		})
	}
}

// gate holds every UpdateProduct until released, and says when one arrived.
type gate struct {
	port.Marketplace
	arrived chan struct{}
	release chan struct{}
}

func (g gate) UpdateProduct(ctx context.Context, creds port.Credentials, key, id string, in port.ProductInput) (port.PlatformProduct, error) {
	select {
	case g.arrived <- struct{}{}:
	case <-ctx.Done():
		return port.PlatformProduct{}, ctx.Err()
	}
	select {
	case <-g.release:
	case <-ctx.Done():
		return port.PlatformProduct{}, ctx.Err()
	}
	return g.Marketplace.UpdateProduct(ctx, creds, key, id, in)
}

// Two updates of one publication never push at once: while revision 2's PUT is in flight,
// revision 3's delivery waits (a snooze for the claim's remaining lease) without a call;
// afterwards it pushes. A claim whose lease ended is taken over.
func TestUpdatesOfOnePublicationNeverPushConcurrently(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.saveDraft(t, "v2")
	f2 := b.request(t)
	b.saveDraft(t, "v3")
	f3 := b.request(t)
	ctx := t.Context() // ends the gated PUT's wait when the test fails

	g := gate{Marketplace: b.gateway, arrived: make(chan struct{}, 1), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- b.newHandler(t, g, b.Deps).Handle(ctx, f2.job) }()
	testwait.Recv(t, g.arrived, "revision 2's PUT")

	err := b.handler.Handle(ctx, f3.job)
	delay, snoozed := worker.SnoozeOf(err)
	require.True(t, snoozed, "got %v", err)
	require.ErrorIs(t, err, domain.ErrListingUpdateBusy)
	require.Equal(t, 15*time.Second, delay, "a quarter of the lease at most")
	require.Zero(t, b.puts(), "nothing sent while the other PUT is in flight")
	require.Equal(t, domain.TaskPending, workertest.Load(t, b.Env, b.updates, f3.update.ID).Status)

	close(g.release)
	require.NoError(t, testwait.Recv(t, done, "revision 2's delivery"))
	require.NoError(t, b.handler.Handle(ctx, redeliver(f3.job)))
	b.requireOutcome(t, f2, domain.UpdatePushed, 2)
	b.requireOutcome(t, f3, domain.UpdatePushed, 3)
	require.Equal(t, "v3", b.listing(t))

	// An expired claim (its holder died after taking it) is taken over.
	b.saveDraft(t, "v4")
	f4 := b.request(t)
	dead := uuid.New()
	_, err = b.DB.Owner.Exec(ctx, `UPDATE publications SET pushing_update_id = $2, pushing_until = now() - interval '1 second' WHERE id = $1`,
		b.pub.ID, dead)
	require.NoError(t, err)
	require.NoError(t, b.handler.Handle(ctx, f4.job))
	b.requireOutcome(t, f4, domain.UpdatePushed, 4)
	require.Equal(t, "v4", b.listing(t))
}

// An older update whose newer sibling's PUT may have landed (SentRevision) sends nothing,
// even when that sibling's claim expired.
func TestOlderUpdateThanOneSentIsSuperseded(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.saveDraft(t, "v2")
	f2 := b.request(t)
	b.saveDraft(t, "v3")
	f3 := b.request(t)
	ctx := context.Background()
	deps := b.Deps
	deps.Tx = &workertest.FlakyTx{Transactor: b.Deps.Tx, FailAt: 2, Times: workertest.CrashTimes}
	// Revision 3 is sent; its worker dies before recording it.
	require.ErrorIs(t, b.newHandler(t, b.gateway, deps).Handle(ctx, f3.job), workertest.ErrCrash)
	_, err := b.DB.Owner.Exec(ctx, `UPDATE publications SET pushing_until = now() - interval '1 second' WHERE id = $1`, b.pub.ID)
	require.NoError(t, err)

	require.NoError(t, b.handler.Handle(ctx, f2.job))
	b.requireOutcome(t, f2, domain.UpdateSuperseded, 1)
	require.Equal(t, "v3", b.listing(t), "revision 2 never lands after revision 3")
	require.Equal(t, 1, b.puts())

	require.NoError(t, b.handler.Handle(ctx, redeliver(f3.job)))
	b.requireOutcome(t, f3, domain.UpdatePushed, 3)
}

// A retryable failure keeps the claim for the retry; the last attempt fails the update and
// its operation with a client-safe code and releases the claim, so the next update pushes.
func TestLastAttemptFailsAndReleasesTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.saveDraft(t, "v2")
	f := b.request(t)
	ctx := context.Background()

	b.sandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointUpdateProduct, Status: 502})
	err := b.handler.Handle(ctx, f.job)
	require.ErrorIs(t, err, port.ErrPlatformTransient)
	require.False(t, worker.IsPermanent(err))
	require.Equal(t, f.update.ID, b.publication(t).Push.UpdateID)

	b.sandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointUpdateProduct, Status: 500})
	job := redeliver(f.job)
	job.LastAttempt = true
	err = b.handler.Handle(ctx, job)
	require.True(t, worker.IsPermanent(err))

	u := workertest.Load(t, b.Env, b.updates, f.update.ID)
	require.Equal(t, domain.TaskFailed, u.Status)
	require.Equal(t, "PLATFORM_UNAVAILABLE", u.ErrorCode)
	op := b.Operation(t, f.op.ID)
	require.Equal(t, domain.OperationFailed, op.Status)
	require.Equal(t, "PLATFORM_UNAVAILABLE", op.ErrorCode)
	require.Equal(t, port.ErrPlatformTransient.Message, op.ErrorMessage)
	require.Equal(t, []string{"failed"}, b.StatusEvents(t, f.op.ID))
	p := b.publication(t)
	require.Equal(t, uuid.Nil, p.Push.UpdateID, "the claim is released")
	require.Equal(t, 1, p.PushedRevision)
	require.Equal(t, "v1", b.listing(t))

	b.saveDraft(t, "v3")
	f3 := b.request(t)
	require.NoError(t, b.handler.Handle(ctx, f3.job))
	b.requireOutcome(t, f3, domain.UpdatePushed, 3)
	require.Equal(t, "v3", b.listing(t))
}

func TestRejectedCredentialsFailAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.saveDraft(t, "v2")
	f := b.request(t)
	// Revoked since the publish: the platform answers 401.
	b.InTx(t, func(ctx context.Context) error {
		return b.stores.SetCredentials(ctx, b.store.ID, b.Seal(t, b.cipher, b.store.ID, "sk_test_invalid_update"))
	})

	err := b.handler.Handle(context.Background(), f.job)
	require.True(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, port.ErrPlatformUnauthorized)
	op := b.Operation(t, f.op.ID)
	require.Equal(t, "PLATFORM_UNAUTHORIZED", op.ErrorCode)
	require.Equal(t, uuid.Nil, b.publication(t).Push.UpdateID)
	require.NoError(t, b.handler.Handle(context.Background(), redeliver(f.job)), "a finished update is skipped")
}

func TestUnverifiedStoreIsRefusedWithoutACall(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.saveDraft(t, "v2")
	f := b.request(t)
	_, err := b.DB.Owner.Exec(context.Background(), `UPDATE stores SET status = 'invalid' WHERE id = $1`, b.store.ID)
	require.NoError(t, err)

	err = b.handler.Handle(context.Background(), f.job)
	require.True(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, domain.ErrStoreNotVerified)
	require.Equal(t, "STORE_NOT_VERIFIED", b.Operation(t, f.op.ID).ErrorCode)
	require.Equal(t, []string{"failed"}, b.StatusEvents(t, f.op.ID))
	require.Zero(t, b.puts())
}

// A PUT refused with Retry-After was not applied: the update is snoozed and releases its
// claim, so a newer update pushes meanwhile; the older one's next delivery sends nothing.
func TestRateLimitedPushReleasesTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.saveDraft(t, "v2")
	f2 := b.request(t)
	b.saveDraft(t, "v3")
	f3 := b.request(t)
	ctx := context.Background()

	b.sandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointUpdateProduct, Status: 429, RetryAfter: 2 * time.Second})
	err := b.handler.Handle(ctx, f2.job)
	delay, snoozed := worker.SnoozeOf(err)
	require.True(t, snoozed, "got %v", err)
	require.Equal(t, 2*time.Second, delay)
	p := b.publication(t)
	require.Equal(t, uuid.Nil, p.Push.UpdateID, "released while snoozed")
	require.Equal(t, 2, p.SentRevision)

	require.NoError(t, b.handler.Handle(ctx, f3.job))
	require.NoError(t, b.handler.Handle(ctx, redeliver(f2.job)))
	b.requireOutcome(t, f3, domain.UpdatePushed, 3)
	b.requireOutcome(t, f2, domain.UpdateSuperseded, 3)
	require.Equal(t, "v3", b.listing(t))
	require.Equal(t, 2, b.puts(), "the refused PUT and revision 3's")
}

// An update accepted before an unpublish and run after it meets an unpublished publication:
// it ends PUBLICATION_UNPUBLISHED without a call, not with the platform's refusal.
func TestUpdateAfterAnUnpublishEndsPublicationUnpublished(t *testing.T) {
	t.Parallel()
	b := setup(t, apiKey)
	b.saveDraft(t, "v2")
	f := b.request(t)
	_, err := b.DB.Owner.Exec(context.Background(), `UPDATE publications SET unpublished_at = now() WHERE id = $1`, b.publication(t).ID)
	require.NoError(t, err)

	err = b.handler.Handle(context.Background(), f.job)
	require.True(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, domain.ErrPublicationUnpublished)
	require.Equal(t, "PUBLICATION_UNPUBLISHED", b.Operation(t, f.op.ID).ErrorCode)
	require.Zero(t, b.puts())
}

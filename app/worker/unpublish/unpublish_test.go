package unpublish_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/app/worker/listingupdate"
	"github.com/listingkit/listing/app/worker/unpublish"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/platform"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/infra/secret"
	"github.com/listingkit/listing/internal/workertest"
)

const apiKey = "sk_test_unpublish"

// bundle is one test's world: a store (verified when asked), a publication whose platform
// product exists in the sandbox, an unpublish of it accepted, and the flow's handler.
type bundle struct {
	env       *workertest.Env
	sb        *marketplace.Sandbox
	h         worker.Handler
	stores    postgres.Stores
	cipher    port.CredentialCipher
	pubs      postgres.Publications
	pub       domain.Publication
	u         domain.Unpublish
	uop       domain.Operation
	productID string
	gateway   *platform.Client
	product   domain.Product
}

// setup builds the world; before runs after the publication is inserted and before its
// unpublish is accepted.
func setup(t *testing.T, verified bool, before ...func(*bundle)) *bundle {
	t.Helper()
	env := workertest.New(t)
	sb, err := marketplace.New(marketplace.Config{Logger: env.Log})
	require.NoError(t, err)
	srv := httptest.NewServer(sb)
	t.Cleanup(srv.Close)
	gateway, err := platform.New(platform.Config{BaseURL: srv.URL, Logger: env.Log, Timeout: 5 * time.Second})
	require.NoError(t, err)
	cipher, err := secret.New(secret.Config{Logger: env.Log})
	require.NoError(t, err)
	stores, pubs, products := postgres.NewStores(), postgres.NewPublications(), postgres.Products{}
	unpublishes := postgres.TaskRepositories()["unpublishes"]
	h, err := unpublish.Flow.Handler(worker.Provide(env.Deps, stores, pubs, unpublishes, port.CredentialCipher(cipher),
		port.Marketplace(gateway), worker.Settings{PlatformTimeout: 5 * time.Second}, &worker.StoreBudget{}))
	require.NoError(t, err)
	creds, err := port.NewCredentials(apiKey)
	require.NoError(t, err)

	now := time.Now()
	var store domain.Store
	var product domain.Product
	env.InTx(t, func(ctx context.Context) error {
		store, err = domain.NewStore(uuid.New(), env.Workspace, "sandbox", "shop-"+uuid.NewString()[:8], "Shop", []string{"sandbox"}, now)
		require.NoError(t, err)
		if verified {
			require.True(t, store.RecordVerification(store.CredentialsVersion, true, "Shop", "", now))
		}
		require.NoError(t, stores.Insert(ctx, store))
		require.NoError(t, stores.SetCredentials(ctx, store.ID, env.Seal(t, cipher, store.ID, apiKey)))
		product, err = domain.NewProduct(uuid.New(), env.Workspace, domain.ProductContent{Title: "v1", Price: "10.00",
			Currency: "EUR", Images: []string{"https://img.example.test/mug.jpg"}}, now)
		require.NoError(t, err)
		return products.Insert(ctx, product)
	})
	op := domain.NewOperation(env.Workspace, env.User, domain.OpPublication, "publication", uuid.Nil, now)
	pub := domain.NewPublication(uuid.New(), env.Workspace, op.ID, product, store.ID, now)
	created, err := gateway.CreateProduct(context.Background(), creds, pub.ID.String(), port.ProductInput{
		ExternalRef: pub.ExternalRef(), Title: "v1", Price: "10.00", Currency: "EUR"})
	require.NoError(t, err)
	pub.Status, pub.ExternalProductID = domain.TaskSucceeded, created.ID
	pub.RecordPushed(1)
	workertest.InsertTask(t, env, pubs, op, pub)
	b := &bundle{env: env, sb: sb, h: h, stores: stores, cipher: cipher, pubs: pubs, pub: pub, productID: created.ID,
		gateway: gateway, product: product}
	for _, f := range before {
		f(b)
	}

	uop := domain.NewOperation(env.Workspace, env.User, domain.OpUnpublish, "unpublish", uuid.Nil, now)
	u := domain.NewUnpublish(uuid.New(), uop.ID, pub, now)
	uop.ResourceID = u.ID
	workertest.InsertTask(t, env, unpublishes.(port.Repository[domain.Unpublish]), uop, u)

	b.u, b.uop = u, uop
	return b
}

func (b *bundle) handle(t *testing.T) error {
	return b.h.Handle(context.Background(), b.env.Job(t, b.u.RequestEvent(), 1, false))
}

// An unpublish whose store is no longer verified (its credentials replaced and not verified
// yet) fails STORE_NOT_VERIFIED without a call: with other credentials, the platform's 404
// would count as deleted.
func TestUnverifiedStoreIsRefusedWithoutACall(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	err := b.handle(t)
	require.True(t, worker.IsPermanent(err), "%v", err)
	require.ErrorIs(t, err, domain.ErrStoreNotVerified)
	require.Equal(t, "STORE_NOT_VERIFIED", b.env.Operation(t, b.uop.ID).ErrorCode)
	require.Zero(t, b.sb.Calls(marketplace.EndpointDeleteProduct))
	_, exists := b.sb.Product(apiKey, b.productID)
	require.True(t, exists)
}

// While a listing update holds the publication's push claim, the unpublish waits (a snooze
// until the claim's lease ends), with its own code, not the update's.
func TestUnpublishWaitsForARunningUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.env.InTx(t, func(ctx context.Context) error {
		_, err := b.pubs.Update(ctx, b.pub.ID, func(p *domain.Publication) error {
			p.Claim(uuid.New(), 2, time.Now(), time.Minute)
			return nil
		})
		return err
	})
	err := b.handle(t)
	delay, snoozed := worker.SnoozeOf(err)
	require.True(t, snoozed, "%v", err)
	require.Positive(t, delay)
	require.ErrorIs(t, err, domain.ErrPublicationBusy)
	require.NotErrorIs(t, err, domain.ErrListingUpdateBusy)
	require.Zero(t, b.sb.Calls(marketplace.EndpointDeleteProduct))
}

// A last look whose store is no longer verified asks nothing and does not count the product
// as deleted: with another shop's credentials the product is absent there too. The held
// failure is recorded and the publication stays published.
func TestLastLookOfAnUnverifiedStoreDoesNotCountAsDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointDeleteProduct, Status: 500})
	err := b.h.Handle(context.Background(), b.env.Job(t, b.u.RequestEvent(), 1, true))
	require.True(t, worker.IsPermanent(err), "%v", err)
	require.NotEqual(t, domain.OperationFailed, b.env.Operation(t, b.uop.ID).Status, "held until the last look")
	// The store's credentials are replaced by another shop's and not verified yet.
	b.env.InTx(t, func(ctx context.Context) error {
		if _, err := b.stores.Update(ctx, b.pub.StoreID, func(s *domain.Store) error {
			s.ReplaceCredentials(time.Now())
			return nil
		}); err != nil {
			return err
		}
		return b.stores.SetCredentials(ctx, b.pub.StoreID, b.env.Seal(t, b.cipher, b.pub.StoreID, "sk_test_other_shop"))
	})

	look := domain.LastLookRequested{Request: b.u.RequestEvent(), Code: "PLATFORM_UNAVAILABLE", Message: "m"}
	err = b.h.Handle(context.Background(), b.env.Job(t, look, 1, false))
	require.True(t, worker.IsPermanent(err), "%v", err)
	op := b.env.Operation(t, b.uop.ID)
	require.Equal(t, domain.OperationFailed, op.Status)
	require.Equal(t, "PLATFORM_UNAVAILABLE", op.ErrorCode)
	require.Nil(t, workertest.Load(t, b.env, b.pubs, b.pub.ID).UnpublishedAt)
	require.Zero(t, b.sb.Calls(marketplace.EndpointFindProduct))
	_, exists := b.sb.Product(apiKey, b.productID)
	require.True(t, exists)
}

// A listing update accepted before the unpublish and run after the unpublish was accepted
// (still pending) ends PUBLICATION_UNPUBLISHED without a call: the pending unpublish is on
// the publication, and the guard refuses the update whether or not the unpublish ran.
func TestUpdateAcceptedBeforeAPendingUnpublishEndsPublicationUnpublished(t *testing.T) {
	t.Parallel()
	var update domain.ListingUpdate
	var updateOp domain.Operation
	b := setup(t, true, func(b *bundle) {
		now := time.Now()
		updateOp = domain.NewOperation(b.env.Workspace, b.env.User, domain.OpListingUpdate, "listing_update", uuid.Nil, now)
		update = domain.NewListingUpdate(uuid.New(), updateOp.ID, b.pub, b.product, now)
		updateOp.ResourceID = update.ID
		workertest.InsertTask(t, b.env, postgres.NewListingUpdates(), updateOp, update)
	})
	deps := b.env.Deps
	deps.Guards = postgres.TaskGuards{Tables: flows.TaskTables()}
	updates, err := listingupdate.New(listingupdate.Config{Deps: deps, Updates: postgres.NewListingUpdates(), Publications: b.pubs,
		Stores: b.stores, Cipher: b.cipher, Marketplace: b.gateway, Lease: time.Minute})
	require.NoError(t, err)

	err = updates.Handle(context.Background(), b.env.Job(t, update.RequestEvent(), 1, false))
	require.True(t, worker.IsPermanent(err), "%v", err)
	require.ErrorIs(t, err, domain.ErrPublicationUnpublished)
	require.Equal(t, "PUBLICATION_UNPUBLISHED", b.env.Operation(t, updateOp.ID).ErrorCode)
	require.Zero(t, b.sb.Calls(marketplace.EndpointUpdateProduct))

	require.NoError(t, b.handle(t))
	require.Equal(t, domain.OperationSucceeded, b.env.Operation(t, b.uop.ID).Status)
	require.NotNil(t, workertest.Load(t, b.env, b.pubs, b.pub.ID).UnpublishedAt)
}

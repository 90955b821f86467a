package productsync_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/productsync"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/platform"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/infra/secret"
	"github.com/listingkit/listing/internal/workertest"
)

const apiKey = "sk_test_canary_9f3b2c"

// spyMarket wraps the real adapter: it records the page tokens asked for and lets a test act
// before a call (inject a fault, run another delivery).
type spyMarket struct {
	port.Marketplace
	mu     sync.Mutex
	tokens []string
	// before runs before call n (from 1); an error is returned instead of calling the gateway.
	before func(n int, token string) error
}

func (s *spyMarket) ListProducts(ctx context.Context, creds port.Credentials, limit int, token string) (port.ProductPage, error) {
	s.mu.Lock()
	s.tokens = append(s.tokens, token)
	n, before := len(s.tokens), s.before
	s.mu.Unlock()
	if before != nil {
		if err := before(n, token); err != nil {
			return port.ProductPage{}, err
		}
	}
	return s.Marketplace.ListProducts(ctx, creds, limit, token)
}

func (s *spyMarket) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tokens...)
}

type bundle struct {
	*workertest.Env
	sb     *marketplace.Sandbox
	market *spyMarket
	cipher *secret.Cipher
	h      *productsync.Handler
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{Env: workertest.New(t)}
	discard := slog.New(slog.DiscardHandler)
	var err error
	b.sb, err = marketplace.New(marketplace.Config{})
	require.NoError(t, err)
	srv := httptest.NewServer(b.sb)
	t.Cleanup(srv.Close)
	client, err := platform.New(platform.Config{BaseURL: srv.URL, Logger: discard})
	require.NoError(t, err)
	b.market = &spyMarket{Marketplace: client}
	b.cipher, err = secret.New(secret.Config{Logger: discard})
	require.NoError(t, err)
	b.h, err = productsync.New(productsync.Config{
		Deps:        b.Deps,
		Syncs:       postgres.NewProductSyncs(),
		Stores:      postgres.NewStores(),
		Cipher:      b.cipher,
		Marketplace: b.market,
		PageSize:    10,
	})
	require.NoError(t, err)
	return b
}

// seedSync creates a store with status and sealed credentials for key, its pending sync and
// the sync's operation, through the repositories as app_user.
func (b *bundle) seedSync(t *testing.T, status domain.StoreStatus, key string) domain.ProductSync {
	t.Helper()
	now := time.Now()
	store, err := domain.NewStore(uuid.New(), b.Workspace, "sandbox", "shop-1", "Shop", []string{"sandbox"}, now)
	require.NoError(t, err)
	if status != domain.StorePendingVerification {
		store.RecordVerification(store.CredentialsVersion, status == domain.StoreVerified, "Shop", "", now)
	}
	b.InTx(t, func(ctx context.Context) error {
		stores := postgres.NewStores()
		if err := stores.Insert(ctx, store); err != nil {
			return err
		}
		return stores.SetCredentials(ctx, store.ID, b.Seal(t, b.cipher, store.ID, key))
	})
	id := uuid.New()
	op := domain.NewOperation(b.Workspace, b.User, "product_sync", "product_sync", id, now)
	s := domain.NewProductSync(id, b.Workspace, op.ID, store.ID, now)
	workertest.InsertTask(t, b.Env, postgres.NewProductSyncs(), op, s)
	return s
}

func (b *bundle) job(t *testing.T, s domain.ProductSync) worker.Job {
	return b.Job(t, domain.ProductSyncRequested{SyncID: s.ID, OperationID: s.OperationID, StoreID: s.StoreID}, 1, false)
}

func (b *bundle) load(t *testing.T, id uuid.UUID) (domain.ProductSync, domain.Operation) {
	t.Helper()
	s := workertest.Load(t, b.Env, postgres.NewProductSyncs(), id)
	return s, b.Operation(t, s.OperationID)
}

func (b *bundle) platformProducts(t *testing.T, storeID uuid.UUID) int {
	t.Helper()
	return b.Count(t, `SELECT count(*) FROM platform_products WHERE store_id = $1`, storeID)
}

func (b *bundle) listCalls() int { return b.sb.Calls(marketplace.EndpointListProducts) }

func TestSyncHappyPathAndRedelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.sb.Seed(apiKey, 25)
	s := b.seedSync(t, domain.StoreVerified, apiKey)
	job := b.job(t, s)

	require.NoError(t, b.h.Handle(ctx, job))

	got, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, 3, got.PagesDone)
	require.Equal(t, 25, got.ItemsSynced)
	require.Empty(t, got.NextPageToken)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	require.JSONEq(t, `{"sync_id":"`+s.ID.String()+`","pages":3,"items":25}`, string(op.Result))
	require.Equal(t, 25, b.platformProducts(t, s.StoreID))
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, op.ID))
	require.Equal(t, 3, b.listCalls())

	// A redelivery after success changes nothing and calls nothing.
	job.Attempt = 2
	require.NoError(t, b.h.Handle(ctx, job))
	again, opAgain := b.load(t, s.ID)
	require.Equal(t, got, again)
	require.Equal(t, op.Version, opAgain.Version)
	require.Equal(t, 3, b.listCalls())
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, op.ID))
	require.Equal(t, 1, b.CountOutbox(t, "product_sync.completed", s.ID), "one product_sync.completed")
	require.NotContains(t, b.Logs.String(), apiKey)
}

func TestSyncEmptyStore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.seedSync(t, domain.StoreVerified, apiKey)
	require.NoError(t, b.h.Handle(context.Background(), b.job(t, s)))
	got, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, 1, got.PagesDone)
	require.Zero(t, got.ItemsSynced)
	require.JSONEq(t, `{"sync_id":"`+s.ID.String()+`","pages":1,"items":0}`, string(op.Result))
}

func TestSyncResumesFromLastSavedPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.sb.Seed(apiKey, 25)
	s := b.seedSync(t, domain.StoreVerified, apiKey)
	job := b.job(t, s)

	// The 2nd page fetch fails at the gateway (a crash of this delivery mid-way).
	b.market.before = func(n int, _ string) error {
		if n == 2 {
			b.sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointListProducts, Status: http.StatusServiceUnavailable})
		}
		return nil
	}
	err := b.h.Handle(ctx, job)
	require.Error(t, err)
	require.False(t, worker.IsPermanent(err), "a transient failure is retried: %v", err)
	require.ErrorIs(t, err, port.ErrPlatformTransient)

	mid, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskRunning, mid.Status)
	require.Equal(t, 1, mid.PagesDone)
	require.Equal(t, 10, mid.ItemsSynced)
	require.NotEmpty(t, mid.NextPageToken, "the first page's next token was saved")
	require.Equal(t, domain.OperationRunning, op.Status)
	require.Equal(t, 10, b.platformProducts(t, s.StoreID))

	// The redelivery goes on from the saved token.
	job.Attempt = 2
	require.NoError(t, b.h.Handle(ctx, job))
	got, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, 3, got.PagesDone)
	require.Equal(t, 25, got.ItemsSynced)
	require.Equal(t, 2, got.Attempts)
	require.JSONEq(t, `{"sync_id":"`+s.ID.String()+`","pages":3,"items":25}`, string(op.Result))
	require.Equal(t, 25, b.platformProducts(t, s.StoreID))
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, op.ID))

	tokens := b.market.seen()
	require.Len(t, tokens, 4) // page 1, page 2 (failed), page 2, page 3
	require.Equal(t, "", tokens[0])
	require.Equal(t, mid.NextPageToken, tokens[1])
	require.Equal(t, mid.NextPageToken, tokens[2])
	first := 0
	for _, tok := range tokens {
		if tok == "" {
			first++
		}
	}
	require.Equal(t, 1, first, "the first page was fetched once")
	require.Equal(t, 4, b.listCalls())
}

func TestSyncConcurrentDeliveryNeverDoubleCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.sb.Seed(apiKey, 25)
	s := b.seedSync(t, domain.StoreVerified, apiKey)
	job := b.job(t, s)

	// While the first delivery fetches page 1, a second delivery records page 1 and then
	// fails on page 2. The first delivery's page 1 is then stale: it must not count it again
	// and must go on from the saved token.
	var innerErr error
	b.market.before = func(n int, _ string) error {
		switch n {
		case 1:
			innerErr = b.h.Handle(ctx, job)
		case 3:
			return port.ErrPlatformTransient
		}
		return nil
	}
	require.NoError(t, b.h.Handle(ctx, job))
	require.ErrorIs(t, innerErr, port.ErrPlatformTransient)

	got, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, 3, got.PagesDone)
	require.Equal(t, 25, got.ItemsSynced)
	require.JSONEq(t, `{"sync_id":"`+s.ID.String()+`","pages":3,"items":25}`, string(op.Result))
	require.Equal(t, 25, b.platformProducts(t, s.StoreID))
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, op.ID))
}

func TestSyncConcurrentDeliveryFinishedFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.sb.Seed(apiKey, 25)
	s := b.seedSync(t, domain.StoreVerified, apiKey)
	job := b.job(t, s)

	var innerErr error
	b.market.before = func(n int, _ string) error {
		if n == 1 {
			innerErr = b.h.Handle(ctx, job) // finishes the whole sync
		}
		return nil
	}
	require.NoError(t, b.h.Handle(ctx, job))
	require.NoError(t, innerErr)
	got, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, 3, got.PagesDone)
	require.Equal(t, 25, got.ItemsSynced)
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, op.ID))
}

func TestSyncRateLimitedIsRetryable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.sb.Seed(apiKey, 5)
	s := b.seedSync(t, domain.StoreVerified, apiKey)
	job := b.job(t, s)

	b.sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointListProducts, Status: http.StatusTooManyRequests, RetryAfter: 2 * time.Second})
	err := b.h.Handle(ctx, job)
	require.Error(t, err)
	require.False(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, port.ErrPlatformRateLimited)
	var rl *port.RateLimitedError
	require.ErrorAs(t, err, &rl)
	require.Equal(t, 2*time.Second, rl.RetryAfter)
	mid, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskRunning, mid.Status)
	require.Equal(t, domain.OperationRunning, op.Status)

	job.Attempt = 2
	require.NoError(t, b.h.Handle(ctx, job))
	got, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, 5, got.ItemsSynced)
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, op.ID))
}

func TestSyncLastAttemptRecordsFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.sb.Seed(apiKey, 5)
	s := b.seedSync(t, domain.StoreVerified, apiKey)
	job := b.job(t, s)
	job.Attempt, job.LastAttempt = 5, true

	b.sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointListProducts, Status: http.StatusBadGateway})
	err := b.h.Handle(ctx, job)
	require.True(t, worker.IsPermanent(err))
	got, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "PLATFORM_UNAVAILABLE", got.ErrorCode)
	require.Equal(t, domain.OperationFailed, op.Status)
	require.Equal(t, "PLATFORM_UNAVAILABLE", op.ErrorCode)
	require.Equal(t, port.ErrPlatformTransient.Message, op.ErrorMessage)
	require.NotContains(t, op.ErrorMessage, "HTTP")
	require.Equal(t, []string{"failed"}, b.StatusEvents(t, op.ID))

	// A redelivery of a failed sync does nothing.
	calls := b.listCalls()
	require.NoError(t, b.h.Handle(ctx, job))
	require.Equal(t, calls, b.listCalls())
}

func TestSyncBadCredentialsFailAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const revoked = "sk_test_invalid_canary_77aa"
	s := b.seedSync(t, domain.StoreVerified, revoked)

	err := b.h.Handle(context.Background(), b.job(t, s)) // attempt 1 of many: still final
	require.True(t, worker.IsPermanent(err))
	require.NotContains(t, err.Error(), revoked)
	got, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "PLATFORM_UNAUTHORIZED", got.ErrorCode)
	require.Equal(t, "PLATFORM_UNAUTHORIZED", op.ErrorCode)
	require.Equal(t, 1, b.listCalls())
	require.Equal(t, []string{"failed"}, b.StatusEvents(t, op.ID))
	require.NotContains(t, b.Logs.String(), revoked)
	var leaked int
	require.NoError(t, b.DB.Owner.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox_all_events WHERE event_payload::text LIKE '%' || $1 || '%'`, revoked).Scan(&leaked))
	require.Zero(t, leaked)
}

// Credentials that cannot be opened fail the sync at once with CREDENTIALS_UNREADABLE, as in
// every worker that calls the platform, before any call.
func TestSyncUnreadableCredentialsFailAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.seedSync(t, domain.StoreVerified, apiKey)
	b.InTx(t, func(ctx context.Context) error {
		return postgres.NewStores().SetCredentials(ctx, s.StoreID, port.SealedCredentials{Ciphertext: []byte("garbage"), KeyID: "nope"})
	})

	err := b.h.Handle(context.Background(), b.job(t, s)) // attempt 1 of many: still final
	require.True(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, worker.ErrCredentialsUnreadable)
	got, op := b.load(t, s.ID)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "CREDENTIALS_UNREADABLE", got.ErrorCode)
	require.Equal(t, "CREDENTIALS_UNREADABLE", op.ErrorCode)
	require.Zero(t, b.listCalls())
}

func TestSyncStoreNotVerified(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, status := range []domain.StoreStatus{domain.StorePendingVerification, domain.StoreInvalid} {
		s := b.seedSync(t, status, apiKey)
		err := b.h.Handle(context.Background(), b.job(t, s))
		require.True(t, worker.IsPermanent(err))
		require.True(t, errors.Is(err, domain.ErrStoreNotVerified))
		got, op := b.load(t, s.ID)
		require.Equal(t, domain.TaskFailed, got.Status)
		require.Equal(t, "STORE_NOT_VERIFIED", got.ErrorCode)
		require.Equal(t, domain.OperationFailed, op.Status)
		require.Equal(t, "STORE_NOT_VERIFIED", op.ErrorCode)
		require.Equal(t, []string{"failed"}, b.StatusEvents(t, op.ID))
		// Tidy up so the next store's unique shop id does not clash.
		_, err = b.DB.Owner.Exec(context.Background(), `DELETE FROM stores WHERE id = $1`, s.StoreID)
		require.NoError(t, err)
	}
	require.Zero(t, b.listCalls())
}

func TestSyncUnknownSyncIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.job(t, domain.ProductSync{Task: domain.Task{ID: uuid.New()}})
	err := b.h.Handle(context.Background(), job)
	require.True(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, domain.ErrProductSyncNotFound)

	bad := job
	bad.Payload = json.RawMessage(`{`)
	require.True(t, worker.IsPermanent(b.h.Handle(context.Background(), bad)))
}

func TestNewValidates(t *testing.T) {
	_, err := productsync.New(productsync.Config{})
	require.Error(t, err)
}

// A running sync reports the products synced so far on its operation, in the transaction of
// the page that got it there, at most once a second: operation.progressed announces each report.
func TestSyncReportsProgressAtMostOnceASecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.sb.Seed(apiKey, 45) // five pages of 10: four saved by the call step, the last by the record step
	s := b.seedSync(t, domain.StoreVerified, apiKey)

	var mu sync.Mutex
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	deps := b.Deps
	deps.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h, err := productsync.New(productsync.Config{Deps: deps, Syncs: postgres.NewProductSyncs(), Stores: postgres.NewStores(),
		Cipher: b.cipher, Marketplace: b.market, PageSize: 10})
	require.NoError(t, err)
	var seen []*domain.Progress
	b.market.before = func(n int, _ string) error {
		seen = append(seen, b.Operation(t, s.OperationID).Progress)
		if n == 3 {
			mu.Lock()
			now = now.Add(domain.ProgressInterval) // pages 1 and 2 saved in the same second; page 3 a second later
			mu.Unlock()
		}
		return nil
	}
	require.NoError(t, h.Handle(ctx, b.job(t, s)))

	ten, thirty := int64(10), int64(30)
	require.Equal(t, []*domain.Progress{nil, {Done: ten}, {Done: ten}, {Done: thirty}, {Done: thirty}}, seen,
		"reported after page 1, not after page 2 (the same second), after page 3")
	op := b.Operation(t, s.OperationID)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	require.Equal(t, &domain.Progress{Done: thirty}, op.Progress, "the last report while running")
	require.Equal(t, 2, b.CountOutbox(t, "operation.progressed", s.OperationID))
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, op.ID), "status events keep their meaning")
}

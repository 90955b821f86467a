package storeverify_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/storeverify"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/platform"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/infra/secret"
	"github.com/listingkit/listing/internal/workertest"
)

// bundle is what every test works with.
type bundle struct {
	*workertest.Env
	sandbox *marketplace.Sandbox
	gateway *platform.Client
	cipher  *secret.Cipher
	handler *storeverify.Handler
	stores  postgres.Stores
	verifs  postgres.StoreVerifications
}

func setup(t *testing.T) *bundle {
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
	b.stores, b.verifs = postgres.NewStores(), postgres.NewStoreVerifications()
	b.handler = b.newHandler(t, b.gateway)
	return b
}

func (b *bundle) newHandler(t *testing.T, m port.Marketplace) *storeverify.Handler {
	t.Helper()
	h, err := storeverify.New(storeverify.Config{Deps: b.Deps, Verifications: b.verifs, Stores: b.stores, Cipher: b.cipher, Marketplace: m})
	require.NoError(t, err)
	return h
}

func (b *bundle) seal(t *testing.T, storeID uuid.UUID, apiKey string) port.SealedCredentials {
	t.Helper()
	return b.Seal(t, b.cipher, storeID, apiKey)
}

// fixture is one requested verification.
type fixture struct {
	store domain.Store
	op    domain.Operation
	verif domain.StoreVerification
	job   worker.Job
}

// seed creates a store with apiKey, an operation and a pending verification, as the
// command would, and returns the job the outbox would deliver.
func (b *bundle) seed(t *testing.T, apiKey string) fixture {
	t.Helper()
	now := time.Now()
	var f fixture
	b.InTx(t, func(ctx context.Context) error {
		var err error
		f.store, err = domain.NewStore(uuid.New(), b.Workspace, "sandbox", "shop-"+uuid.NewString()[:8], "My shop", []string{"sandbox"}, now)
		require.NoError(t, err)
		require.NoError(t, b.stores.Insert(ctx, f.store))
		return b.stores.SetCredentials(ctx, f.store.ID, b.seal(t, f.store.ID, apiKey))
	})
	f.op = domain.NewOperation(b.Workspace, b.User, "store.verify", "store", f.store.ID, now)
	f.verif = domain.NewStoreVerification(uuid.New(), b.Workspace, f.op.ID, f.store, now)
	workertest.InsertTask(t, b.Env, b.verifs, f.op, f.verif)
	f.job = b.Job(t, domain.StoreVerificationRequested{StoreID: f.store.ID, VerificationID: f.verif.ID, OperationID: f.op.ID,
		CredentialsVersion: f.store.CredentialsVersion}, 1, false)
	return f
}

// state is what the database holds about a fixture.
type state struct {
	verif domain.StoreVerification
	store domain.Store
	op    domain.Operation
	// events are the statuses of the operation's status_changed outbox rows, oldest first.
	events []string
}

func (b *bundle) state(t *testing.T, f fixture) state {
	t.Helper()
	return state{
		verif:  workertest.Load(t, b.Env, b.verifs, f.verif.ID),
		store:  workertest.Load(t, b.Env, b.stores, f.store.ID),
		op:     b.Operation(t, f.op.ID),
		events: b.StatusEvents(t, f.op.ID),
	}
}

func result(t *testing.T, op domain.Operation) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(op.Result, &m))
	return m
}

func redeliver(job worker.Job) worker.Job {
	job.Attempt++
	return job
}

func TestValidCredentials(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_valid_1")

	require.NoError(t, b.handler.Handle(context.Background(), f.job))

	s := b.state(t, f)
	require.Equal(t, domain.TaskSucceeded, s.verif.Status)
	require.NotNil(t, s.verif.Valid)
	require.True(t, *s.verif.Valid)
	require.Equal(t, 1, s.verif.Attempts)
	require.Equal(t, domain.StoreVerified, s.store.Status)
	require.Equal(t, "Sandbox shop "+f.store.ShopID, s.store.ShopName)
	require.NotNil(t, s.store.VerifiedAt)
	require.Equal(t, domain.OperationSucceeded, s.op.Status)
	require.Equal(t, map[string]any{"store_id": f.store.ID.String(), "valid": true,
		"message": "the marketplace accepted the store's credentials"}, result(t, s.op))
	require.Equal(t, []string{"succeeded"}, s.events)
	require.Equal(t, 1, b.sandbox.Calls(marketplace.EndpointVerify))
	require.Equal(t, 1, b.CountOutbox(t, "store.verified", f.store.ID), "store.verified, in the record transaction")
}

func TestInvalidCredentialsSucceedWithValidFalse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_invalid_1")

	require.NoError(t, b.handler.Handle(context.Background(), f.job))

	s := b.state(t, f)
	require.Equal(t, domain.TaskSucceeded, s.verif.Status)
	require.NotNil(t, s.verif.Valid)
	require.False(t, *s.verif.Valid)
	require.Equal(t, domain.StoreInvalid, s.store.Status)
	require.NotEmpty(t, s.store.StatusReason, "the platform's reason is kept on the store")
	require.Equal(t, domain.OperationSucceeded, s.op.Status)
	// The platform's words stay out of the operation: a fixed message instead.
	require.Equal(t, map[string]any{"store_id": f.store.ID.String(), "valid": false,
		"message": "the marketplace rejected the store's credentials"}, result(t, s.op))
	require.NotContains(t, string(s.op.Result), s.store.StatusReason)
	require.Equal(t, []string{"succeeded"}, s.events)
	require.Zero(t, b.CountOutbox(t, "store.verified", f.store.ID), "invalid credentials: no store.verified")
}

func TestRedeliveryAfterSuccessChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_valid_2")
	ctx := context.Background()
	require.NoError(t, b.handler.Handle(ctx, f.job))
	before := b.state(t, f)

	require.NoError(t, b.handler.Handle(ctx, redeliver(f.job)))

	after := b.state(t, f)
	require.Equal(t, before, after)
	require.Equal(t, 1, b.sandbox.Calls(marketplace.EndpointVerify), "no second platform call")
	require.Equal(t, 1, b.CountOutbox(t, "store.verified", f.store.ID), "one store.verified")
}

// crashAfterVerify calls the platform and then dies before Step B, as a killed process would.
type crashAfterVerify struct{ port.Marketplace }

var errCrash = errors.New("simulated crash")

func (c crashAfterVerify) VerifyStore(ctx context.Context, creds port.Credentials, platform, shopID string) (port.VerifyResult, error) {
	if _, err := c.Marketplace.VerifyStore(ctx, creds, platform, shopID); err != nil {
		return port.VerifyResult{}, err
	}
	panic(errCrash)
}

func TestRedeliveryAfterCrashBetweenCallAndRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_valid_3")
	ctx := context.Background()

	crashing := b.newHandler(t, crashAfterVerify{b.gateway})
	require.PanicsWithValue(t, errCrash, func() { _ = crashing.Handle(ctx, f.job) })
	mid := b.state(t, f)
	require.Equal(t, domain.TaskRunning, mid.verif.Status)
	require.Equal(t, domain.OperationRunning, mid.op.Status)
	require.Equal(t, domain.StorePendingVerification, mid.store.Status)

	require.NoError(t, b.handler.Handle(ctx, redeliver(f.job)))

	s := b.state(t, f)
	require.Equal(t, domain.TaskSucceeded, s.verif.Status)
	require.Equal(t, 2, s.verif.Attempts)
	require.Equal(t, domain.StoreVerified, s.store.Status)
	require.Equal(t, domain.OperationSucceeded, s.op.Status)
	// The operation started once: its finish is at version 3 (the redelivery's start changed
	// nothing) and carries started_at (StatusEvents checks both).
	require.Equal(t, []string{"succeeded"}, s.events)
	// VerifyStore is read-only; the redelivery asks again (two calls, no side effect).
	require.Equal(t, 2, b.sandbox.Calls(marketplace.EndpointVerify))
}

func TestRetryableErrorThenSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_valid_4")
	ctx := context.Background()

	b.sandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointVerify, Status: 503})
	err := b.handler.Handle(ctx, f.job)
	require.ErrorIs(t, err, port.ErrPlatformTransient)
	require.False(t, worker.IsPermanent(err))
	mid := b.state(t, f)
	require.Equal(t, domain.TaskRunning, mid.verif.Status)
	require.Equal(t, domain.OperationRunning, mid.op.Status)

	b.sandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointVerify, Status: 429, RetryAfter: 2 * time.Second})
	err = b.handler.Handle(ctx, redeliver(f.job))
	require.ErrorIs(t, err, port.ErrPlatformRateLimited)
	require.False(t, worker.IsPermanent(err))

	require.NoError(t, b.handler.Handle(ctx, redeliver(redeliver(f.job))))
	s := b.state(t, f)
	require.Equal(t, domain.TaskSucceeded, s.verif.Status)
	require.Equal(t, 3, s.verif.Attempts)
	require.Equal(t, domain.OperationSucceeded, s.op.Status)
	require.Equal(t, []string{"succeeded"}, s.events)
}

func TestLastAttemptRecordsClientSafeFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_valid_5")
	job := f.job
	job.LastAttempt = true

	b.sandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointVerify, Status: 503})
	err := b.handler.Handle(context.Background(), job)
	require.True(t, worker.IsPermanent(err))

	s := b.state(t, f)
	require.Equal(t, domain.TaskFailed, s.verif.Status)
	require.Equal(t, "PLATFORM_UNAVAILABLE", s.verif.ErrorCode)
	require.Equal(t, port.ErrPlatformTransient.Message, s.verif.ErrorMessage)
	require.Equal(t, domain.OperationFailed, s.op.Status)
	require.Equal(t, "PLATFORM_UNAVAILABLE", s.op.ErrorCode)
	require.Equal(t, port.ErrPlatformTransient.Message, s.op.ErrorMessage)
	require.NotContains(t, s.op.ErrorMessage, "HTTP")
	require.Equal(t, domain.StorePendingVerification, s.store.Status)
	require.Equal(t, []string{"failed"}, s.events)
}

func TestPermanentPlatformErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_valid_6")

	b.sandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointVerify, Status: 400})
	err := b.handler.Handle(context.Background(), f.job) // attempt 1 of many
	require.True(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, port.ErrPlatformRejected)

	s := b.state(t, f)
	require.Equal(t, domain.TaskFailed, s.verif.Status)
	require.Equal(t, "PLATFORM_REJECTED", s.verif.ErrorCode)
	require.Equal(t, domain.OperationFailed, s.op.Status)
	require.Equal(t, "PLATFORM_REJECTED", s.op.ErrorCode)
	require.Equal(t, []string{"failed"}, s.events)

	// A redelivery of the failed job does nothing.
	require.NoError(t, b.handler.Handle(context.Background(), redeliver(f.job)))
	require.Equal(t, 1, b.sandbox.Calls(marketplace.EndpointVerify))
}

func TestReplacedCredentialsFailWithoutCallingThePlatform(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_valid_7")
	b.InTx(t, func(ctx context.Context) error {
		_, err := b.stores.Update(ctx, f.store.ID, func(s *domain.Store) error {
			s.ReplaceCredentials(time.Now())
			return nil
		})
		require.NoError(t, err)
		return b.stores.SetCredentials(ctx, f.store.ID, b.seal(t, f.store.ID, "sk_test_valid_7b"))
	})

	// A refusal is a final failure: the job fails with its task.
	err := b.handler.Handle(context.Background(), f.job)
	require.True(t, worker.IsPermanent(err), "%v", err)

	s := b.state(t, f)
	require.Equal(t, domain.TaskFailed, s.verif.Status)
	require.Equal(t, "CREDENTIALS_REPLACED", s.verif.ErrorCode)
	require.Zero(t, s.verif.Attempts)
	require.Equal(t, domain.OperationFailed, s.op.Status)
	require.Equal(t, "CREDENTIALS_REPLACED", s.op.ErrorCode)
	require.Equal(t, []string{"failed"}, s.events)
	require.Equal(t, domain.StorePendingVerification, s.store.Status)
	require.Equal(t, 2, s.store.CredentialsVersion)
	require.Zero(t, b.sandbox.Calls(marketplace.EndpointVerify))
}

// replaceDuringVerify replaces the store's credentials while the platform is being asked,
// so that Step B records a result of stale credentials.
type replaceDuringVerify struct {
	port.Marketplace
	replace func()
}

func (r replaceDuringVerify) VerifyStore(ctx context.Context, creds port.Credentials, platform, shopID string) (port.VerifyResult, error) {
	r.replace()
	return r.Marketplace.VerifyStore(ctx, creds, platform, shopID)
}

func TestStaleResultLeavesTheStoreAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_valid_8")
	h := b.newHandler(t, replaceDuringVerify{Marketplace: b.gateway, replace: func() {
		b.InTx(t, func(ctx context.Context) error {
			_, err := b.stores.Update(ctx, f.store.ID, func(s *domain.Store) error {
				s.ReplaceCredentials(time.Now())
				return nil
			})
			require.NoError(t, err)
			return b.stores.SetCredentials(ctx, f.store.ID, b.seal(t, f.store.ID, "sk_test_invalid_8b"))
		})
	}})

	require.NoError(t, h.Handle(context.Background(), f.job))

	s := b.state(t, f)
	require.Equal(t, domain.TaskSucceeded, s.verif.Status, "the verification answered for its own version")
	require.True(t, *s.verif.Valid)
	require.Equal(t, domain.StorePendingVerification, s.store.Status, "the newer credentials await their own verification")
	require.Equal(t, 2, s.store.CredentialsVersion)
	require.Empty(t, s.store.ShopName)
	require.Equal(t, domain.OperationSucceeded, s.op.Status)
	require.Zero(t, b.CountOutbox(t, "store.verified", f.store.ID), "a stale result verifies nothing")
}

func TestUnreadableCredentialsFailAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_valid_9")
	// A value sealed for another store does not open for this one.
	b.InTx(t, func(ctx context.Context) error {
		return b.stores.SetCredentials(ctx, f.store.ID, b.seal(t, uuid.New(), "sk_test_valid_9"))
	})

	err := b.handler.Handle(context.Background(), f.job)
	require.True(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, storeverify.ErrCredentialsUnreadable)

	s := b.state(t, f)
	require.Equal(t, domain.TaskFailed, s.verif.Status)
	require.Equal(t, "CREDENTIALS_UNREADABLE", s.verif.ErrorCode)
	require.Equal(t, domain.OperationFailed, s.op.Status)
	require.Equal(t, "CREDENTIALS_UNREADABLE", s.op.ErrorCode)
	require.Equal(t, storeverify.ErrCredentialsUnreadable.Message, s.op.ErrorMessage)
	require.Equal(t, []string{"failed"}, s.events)
	require.Zero(t, b.sandbox.Calls(marketplace.EndpointVerify))
}

func TestMissingVerificationFailsItsOperation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.seed(t, "sk_test_valid_10")
	ev := domain.StoreVerificationRequested{StoreID: f.store.ID, VerificationID: uuid.New(), OperationID: f.op.ID, CredentialsVersion: 1}
	payload, err := json.Marshal(ev)
	require.NoError(t, err)
	job := f.job
	job.Payload = payload

	err = b.handler.Handle(context.Background(), job)
	require.True(t, worker.IsPermanent(err))
	s := b.state(t, f)
	require.Equal(t, domain.TaskPending, s.verif.Status, "another verification is not touched")
	require.Equal(t, domain.OperationFailed, s.op.Status)
	require.Equal(t, "STORE_VERIFICATION_NOT_FOUND", s.op.ErrorCode)
	require.Equal(t, []string{"failed"}, s.events)
	require.Zero(t, b.sandbox.Calls(marketplace.EndpointVerify))

	// Neither the verification nor the operation exists: nothing to record.
	ev.OperationID = uuid.New()
	job.Payload, err = json.Marshal(ev)
	require.NoError(t, err)
	require.True(t, worker.IsPermanent(b.handler.Handle(context.Background(), job)))

	job.Payload = json.RawMessage(`{"verification_id": 7}`)
	require.True(t, worker.IsPermanent(b.handler.Handle(context.Background(), job)))
}

// TestSecretsStayOut runs every path that touches credentials with a planted key and looks
// for it in every table the flow writes and in the logs.
func TestSecretsStayOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const canary = "sk_test_canary_7f3a9c"
	const invalidCanary = "sk_test_invalid_canary_7f3a9c"

	ok := b.seed(t, canary)
	require.NoError(t, b.handler.Handle(ctx, ok.job))
	bad := b.seed(t, invalidCanary)
	require.NoError(t, b.handler.Handle(ctx, bad.job))
	failing := b.seed(t, canary)
	job := failing.job
	job.LastAttempt = true
	b.sandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointVerify, Status: 500})
	require.Error(t, b.handler.Handle(ctx, job))

	for _, table := range []string{"operations", "outbox_events", "outbox_dispatched", "store_verifications", "stores"} {
		var n int
		require.NoError(t, b.DB.Owner.QueryRow(ctx,
			"SELECT count(*) FROM "+table+" t WHERE t::text LIKE '%canary_7f3a9c%'").Scan(&n))
		require.Zero(t, n, "%s holds the key", table)
	}
	require.NotContains(t, b.Logs.String(), "canary_7f3a9c")
	require.Contains(t, b.Logs.String(), ok.verif.ID.String(), "the handler logs ids")
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := storeverify.New(storeverify.Config{})
	require.Error(t, err)
}

// Package storedisconnect is the store disconnection: it revokes the store's authorization
// at its marketplace, then records the store disconnected (domain.StoreDisconnected), erases
// its credentials and emits store.disconnected.
//
// It never revokes the key under another task of the store: the command refuses STORE_BUSY
// while any is pending or running, and from its acceptance the guard "store connected"
// (sql/061) refuses every new task of the store STORE_DISCONNECTED. Its begin step locks the
// store and counts again (a task accepted just before it), snoozing while another runs. A
// redelivery after the revoke revokes again (401: done); one after the record finds the task
// finished. Its last look asks whether the authorization is still active.
package storedisconnect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Queue is the store disconnection queue.
const Queue = "listing-store-disconnection"

// Flow registers the store disconnections (app/worker/flows lists it).
var Flow = worker.Register(worker.Spec{
	Name: "store_disconnection", Queue: Queue, Table: "store_disconnections", Request: domain.StoreDisconnectionRequested{},
	TaskIDField: "disconnection_id", AggregateColumn: "id", NotFound: domain.ErrStoreDisconnectionNotFound,
	Operation: domain.OpStoreDisconnection, StartedBy: "a store disconnection",
	Start: &worker.Start{Type: "listing.disconnect_store", Method: "DELETE", Path: "/stores/{store_id}",
		NotFound: []*domain.Error{domain.ErrStoreNotFound}, OperationID: "disconnectStore",
		Errors:  []*domain.Error{domain.ErrStoreBusy, domain.ErrStoreDisconnected},
		Summary: "Disconnect the store (idempotent).",
		Description: "Revokes the store's authorization at its marketplace (POST /v1/authorizations/revoke; a repeat's 401 counts as done), " +
			"then the store is `disconnected`, its credentials erased and `disconnected_at` set; `store.disconnected` is emitted. " +
			"Refused 409 STORE_BUSY while a task of the store is pending or running. From acceptance, every other task of the store " +
			"is refused 409 STORE_DISCONNECTED; PUT …/authorization reconnects it (verified again)."},
	LastLook: worker.Asks("asks whether the store's authorization is still active: revoked (401), the disconnection succeeded"),
	Resource: &worker.Resource{Parent: "/stores/{store_id}", ParentTable: "stores", ParentNotFound: domain.ErrStoreNotFound,
		Path: "disconnections", IDParam: "disconnection_id", Key: "store_disconnection",
		GetOperation: "getStoreDisconnection", ListOperation: "listStoreDisconnections", Body: Body},
}, tasks, handler)

// Authorizations are the marketplace's calls on a store's authorization (infra/platform).
type Authorizations interface {
	// RevokeAuthorization revokes creds' authorization; already revoked counts as done.
	RevokeAuthorization(ctx context.Context, creds port.Credentials) error
	// AuthorizationActive reports whether creds' authorization is still active.
	AuthorizationActive(ctx context.Context, creds port.Credentials) (bool, error)
}

// kindNeeds are what the task kind is built from, in every process.
type kindNeeds struct {
	Deps   worker.Deps
	Tasks  port.Repository[domain.StoreDisconnection]
	Stores port.Stores
}

// handlerNeeds are what the handler is built from, in a process that consumes jobs.
type handlerNeeds struct {
	Deps           worker.Deps
	Tasks          port.Repository[domain.StoreDisconnection]
	Stores         port.Stores
	Cipher         port.CredentialCipher
	Authorizations Authorizations
	Settings       worker.Settings
	Budget         *worker.StoreBudget
}

func tasks(n kindNeeds) (worker.TaskKind, error) {
	f, err := flowOf(handlerNeeds{Deps: n.Deps, Tasks: n.Tasks, Stores: n.Stores})
	return f.Kind, err
}

func handler(n handlerNeeds) (worker.Handler, error) { return flowOf(n) }

// disconnectionJSON is a store disconnection in the API.
type disconnectionJSON struct {
	ID        uuid.UUID         `json:"id"`
	StoreID   uuid.UUID         `json:"store_id"`
	Status    domain.TaskStatus `json:"status"`
	Error     *worker.ErrorJSON `json:"error"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// Body is the JSON of a store disconnection in the API.
func Body(task any) any {
	d := task.(domain.StoreDisconnection)
	return disconnectionJSON{d.ID, d.StoreID, d.Status, worker.TaskError(d.Task), d.CreatedAt.UTC(), d.UpdatedAt.UTC()}
}

// revocation is what the begin step hands the call: the store and its sealed credentials.
type revocation struct {
	store domain.Store
	key   port.SealedCredentials
}

// steps are the flow's steps, over its dependencies.
type steps struct{ env handlerNeeds }

// flowOf is the flow: its task kind (with Accept) and its steps; the flow is the job handler.
func flowOf(e handlerNeeds) (worker.Flow[domain.StoreDisconnection, revocation, struct{}], error) {
	h := steps{env: e}
	kind := worker.Kind[domain.StoreDisconnection]{QueueName: Queue, Deps: e.Deps, Tasks: e.Tasks, AsksLastLook: true,
		TaskOf: func(d *domain.StoreDisconnection) *domain.Task { return &d.Task },
		TaskID: worker.PayloadID(func(r domain.StoreDisconnectionRequested) uuid.UUID { return r.DisconnectionID }),
		Accept: h.accept}
	f := worker.Flow[domain.StoreDisconnection, revocation, struct{}]{Kind: kind, Begin: h.begin, Call: h.revoke,
		Record: h.record, LastLook: h.lastLook, CallTimeout: 2 * e.Settings.PlatformTimeout}
	if e.Deps.Guards == nil || e.Stores == nil {
		return f, errors.New("storedisconnect: Deps.Guards and Stores are required")
	}
	return f, f.Validate()
}

// lockStore locks the store's row (so that a task of the store starting beside is
// serialized with this) and refuses a store disconnected, or with tasks other than the
// disconnection (self: 0 or 1) pending or running.
func (h steps) lockStore(ctx context.Context, id uuid.UUID, self int) (domain.Store, error) {
	store, err := h.env.Stores.Update(ctx, id, func(*domain.Store) error { return nil })
	if err != nil {
		return store, err
	}
	if store.In(domain.StoreDisconnected) {
		return store, domain.ErrStoreDisconnected
	}
	n, err := h.env.Deps.Guards.Unfinished(ctx, "store_id", id)
	if err == nil && n > self {
		err = domain.ErrStoreBusy
	}
	return store, err
}

// accept is the command: the store, connected and without a task pending or running.
func (h steps) accept(ctx context.Context, a worker.Acceptance) (domain.StoreDisconnection, error) {
	store, err := h.lockStore(ctx, a.IDs["store_id"], 0)
	if err != nil {
		return domain.StoreDisconnection{}, err
	}
	return domain.StoreDisconnection{Task: domain.NewTask(a.TaskID, a.WorkspaceID, a.OperationID, a.Now), StoreID: store.ID}, nil
}

// begin waits while another task of the store runs, then reads the credentials to revoke.
func (h steps) begin(ctx context.Context, d *domain.StoreDisconnection) (revocation, error) {
	store, err := h.lockStore(ctx, d.StoreID, 1)
	switch {
	case errors.Is(err, domain.ErrStoreBusy):
		return revocation{}, domain.ErrStoreBusy.WithRetryAfter(5 * time.Second)
	case errors.Is(err, domain.ErrStoreDisconnected):
		return revocation{}, worker.Refuse(domain.ErrStoreDisconnected)
	case err != nil:
		return revocation{}, err
	}
	if err := h.env.Budget.Wait(ctx, store, 1); err != nil {
		return revocation{}, err
	}
	sealed, _, err := h.env.Stores.Credentials(ctx, d.StoreID)
	return revocation{store: store, key: sealed}, err
}

// revoke revokes the authorization, outside any transaction.
func (h steps) revoke(ctx context.Context, d domain.StoreDisconnection, r revocation, _ worker.Tx) (struct{}, error) {
	creds, err := worker.OpenCredentials(h.env.Cipher, d.WorkspaceID, d.StoreID, r.key)
	if err == nil {
		err = h.env.Authorizations.RevokeAuthorization(ctx, creds)
		h.env.Budget.Limited(ctx, r.store, err)
	}
	if err != nil {
		return struct{}{}, fmt.Errorf("store disconnection: revoke: %w", err)
	}
	return struct{}{}, nil
}

// record records the store disconnected, erases its credentials and emits store.disconnected.
func (h steps) record(ctx context.Context, d *domain.StoreDisconnection, _ struct{}) (any, error) {
	now := h.env.Deps.Now().UTC()
	store, err := h.env.Stores.Update(ctx, d.StoreID, func(s *domain.Store) error { s.Enter(domain.StoreDisconnected, now); return nil })
	if err == nil {
		err = h.env.Stores.SetCredentials(ctx, d.StoreID, port.SealedCredentials{Ciphertext: []byte{}})
	}
	if err == nil {
		err = h.env.Deps.Events.Publish(ctx, domain.StoreDisconnectedEvent{StoreID: store.ID, DisconnectionID: d.ID,
			OperationID: d.OperationID, Platform: store.Platform, ShopID: store.ShopID})
	}
	return map[string]any{"store_id": d.StoreID, "disconnection_id": d.ID}, err
}

// lastLook asks whether the authorization is still active before a final failure: revoked,
// the disconnection succeeded.
func (h steps) lastLook(ctx context.Context, d domain.StoreDisconnection, tx worker.Tx) (struct{}, bool, error) {
	var sealed port.SealedCredentials
	if err := tx(ctx, func(ctx context.Context) (err error) {
		sealed, _, err = h.env.Stores.Credentials(ctx, d.StoreID)
		return err
	}); err != nil {
		return struct{}{}, false, err
	}
	creds, err := worker.OpenCredentials(h.env.Cipher, d.WorkspaceID, d.StoreID, sealed)
	if err != nil {
		return struct{}{}, false, err
	}
	active, err := h.env.Authorizations.AuthorizationActive(ctx, creds)
	return struct{}{}, err == nil && !active, err
}

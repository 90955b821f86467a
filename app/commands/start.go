package commands

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// This file holds what more than one command shares: starting asynchronous work (an
// operation, its task and their events, in the command's transaction) and the steps and
// pre-checks two commands take alike. Each command lives in a file of its own.

// Started is the result of a command that starts asynchronous work: the resource it created
// or changed, and the operation the client follows.
type Started[T any] struct {
	Resource  T
	Operation domain.Operation
}

// FlowDeps are what the commands that start asynchronous work share. Every field is
// required.
type FlowDeps struct {
	Operations port.Repository[domain.Operation]
	Events     port.EventPublisher
	Now        port.Clock
}

// start inserts a pending operation about a resource, then the task (insertTask, which
// references the operation), and publishes in the same transaction the operation's first
// status event and the job event that starts the work.
func (d FlowDeps) start(ctx context.Context, op domain.Operation, insertTask func() error, job domain.Event) error {
	if err := d.Operations.Insert(ctx, op); err != nil {
		return err
	}
	if err := insertTask(); err != nil {
		return err
	}
	return d.Events.Publish(ctx, op.StatusChanged(), job)
}

// newOperation returns a pending operation created now by user.
func (d FlowDeps) newOperation(ws, user uuid.UUID, typ, resourceType string, resourceID uuid.UUID) domain.Operation {
	return domain.NewOperation(ws, user, typ, resourceType, resourceID, d.Now())
}

// mustHave panics when one of a constructor's dependencies is nil, so that a wiring mistake
// fails at start-up rather than on the first request. A FlowDeps is checked field by field.
func mustHave(handler string, deps ...any) {
	for i, d := range deps {
		if f, ok := d.(FlowDeps); ok {
			for name, v := range map[string]any{"Operations": f.Operations, "Events": f.Events, "Now": f.Now} {
				if isNil(v) {
					panic(fmt.Sprintf("commands.New%s: FlowDeps.%s is nil", handler, name))
				}
			}
			continue
		}
		if isNil(d) {
			panic(fmt.Sprintf("commands.New%s: dependency %d is nil", handler, i+1))
		}
	}
}

// isNil reports whether v is nil or holds a nil func, pointer, interface or map.
func isNil(v any) bool {
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Invalid:
		return true
	case reflect.Func, reflect.Pointer, reflect.Interface, reflect.Map:
		return r.IsNil()
	}
	return false
}

// getProduct loads a product of the transaction's workspace; an absent one is
// domain.ErrProductNotFound.
func getProduct(ctx context.Context, products port.Products, id uuid.UUID) (domain.Product, error) {
	p, err := products.Get(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return p, domain.ErrProductNotFound
	}
	return p, err
}

// getVerifiedStore loads a store of the transaction's workspace and refuses it unless its
// current credentials are verified: with the error of a declared guard of the store first
// (Stores.Refusal: a state a flow gave it, STORE_DISCONNECTED), else STORE_NOT_VERIFIED.
func getVerifiedStore(ctx context.Context, stores port.Stores, id uuid.UUID) (domain.Store, error) {
	s, err := stores.Get(ctx, id)
	if err == nil && s.Status != domain.StoreVerified {
		if err = stores.Refusal(ctx, id); err == nil {
			err = domain.ErrStoreNotVerified
		}
	}
	return s, err
}

// sealCredentials seals a store's credentials (bound to its workspace and id) and stores
// them; the plaintext is wiped once sealed.
func sealCredentials(ctx context.Context, stores port.Stores, cipher port.CredentialCipher, s domain.Store, creds port.Credentials) error {
	plain, err := creds.SecretJSON()
	if err != nil {
		return err
	}
	sealed, keyID, err := cipher.Seal(plain, port.CredentialsAD(s.WorkspaceID, s.ID))
	clear(plain)
	if err != nil {
		return fmt.Errorf("seal credentials: %w", err)
	}
	return stores.SetCredentials(ctx, s.ID, port.SealedCredentials{Ciphertext: sealed, KeyID: keyID})
}

// startStoreVerification starts the verification of the store's current credentials.
func startStoreVerification(ctx context.Context, flow FlowDeps, verifications port.Repository[domain.StoreVerification],
	s domain.Store, user uuid.UUID) (Started[domain.Store], error) {
	op := flow.newOperation(s.WorkspaceID, user, domain.OpStoreVerification, "store", s.ID)
	v := domain.NewStoreVerification(domain.NewID(), s.WorkspaceID, op.ID, s, flow.Now())
	if err := flow.start(ctx, op, func() error { return verifications.Insert(ctx, v) }, v.RequestEvent()); err != nil {
		return Started[domain.Store]{}, err
	}
	return Started[domain.Store]{Resource: s, Operation: op}, nil
}

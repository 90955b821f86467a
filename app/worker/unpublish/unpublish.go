// Package unpublish handles the unpublish queue: an unpublish (domain.UnpublishRequested)
// deletes a publication's platform product through the gateway's DELETE /v1/products/{id}
// (a repeat's 404 counts as deleted), then records the publication unpublished
// (Publication.UnpublishedAt; its task status stays succeeded) and emits
// publication.unpublished. It holds the publication's push claim while it deletes, like a
// listing update (app/worker/listingupdate), so the two never call the platform at once; a
// final failure releases it and leaves the publication published. From the unpublish's
// acceptance until it fails or is cancelled, the publication carries it (unpublish_id) and
// the guard "publication not unpublished" (sql/070_unpublish_guard.sql) refuses every other
// task of the publication PUBLICATION_UNPUBLISHED, at acceptance and when it runs.
package unpublish

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Queue is the unpublish queue.
const Queue = "listing-unpublish"

// Flow registers the unpublishes with the engine (app/worker/flows lists it): its
// declaration, and its task kind and handler built from the dependencies they need.
var Flow = worker.Register(worker.Spec{
	Name: "unpublish", Queue: Queue, Table: "unpublishes", Request: domain.UnpublishRequested{}, TaskIDField: "unpublish_id",
	AggregateColumn: "id", NotFound: domain.ErrUnpublishNotFound, Operation: domain.OpUnpublish, StartedBy: "an unpublish",
	Messages: []worker.Message{{Type: "listing.unpublish", Method: "POST", Path: "/publications/{publication_id}/unpublish"}},
	LastLook: worker.Asks("finds the product by the publication's external_ref: absent, the unpublish succeeded"),
	Resource: &worker.Resource{Parent: "/publications/{publication_id}", ParentTable: "publications",
		ParentNotFound: domain.ErrPublicationNotFound, Path: "unpublishes", IDParam: "unpublish_id", Key: "unpublish",
		GetOperation: "getUnpublish", ListOperation: "listUnpublishes", Body: Body},
}, tasks, handler)

// kindNeeds are what the task kind is built from, in every process.
type kindNeeds struct {
	Deps         worker.Deps
	Unpublishes  port.Repository[domain.Unpublish]
	Publications port.Repository[domain.Publication]
}

func tasks(n kindNeeds) (worker.TaskKind, error) {
	h, err := newHandler(handlerNeeds{Deps: n.Deps, Unpublishes: n.Unpublishes, Publications: n.Publications})
	return h.flow.Kind, err
}

// handlerNeeds are what the handler is built from, in a process that consumes jobs.
type handlerNeeds struct {
	Deps         worker.Deps
	Unpublishes  port.Repository[domain.Unpublish]
	Publications port.Repository[domain.Publication]
	Stores       port.Stores
	Cipher       port.CredentialCipher
	Marketplace  port.Marketplace
	Settings     worker.Settings
	Budget       *worker.StoreBudget
}

func handler(n handlerNeeds) (worker.Handler, error) { return newHandler(n) }

// Body is the JSON of an unpublish in the API.
func Body(task any) any {
	u := task.(domain.Unpublish)
	return map[string]any{"id": u.ID, "publication_id": u.PublicationID, "status": u.Status, "error": worker.TaskError(u.Task),
		"created_at": u.CreatedAt.UTC(), "updated_at": u.UpdatedAt.UTC()}
}

// Handler handles the jobs of Queue through the task lifecycle (worker.Flow).
type Handler struct {
	env  handlerNeeds
	flow worker.Flow[domain.Unpublish, started, struct{}]
}

// Handle implements worker.Handler.
func (h *Handler) Handle(ctx context.Context, job worker.Job) error { return h.flow.Handle(ctx, job) }

type started struct {
	sealed port.SealedCredentials
	store  domain.Store
}

func newHandler(e handlerNeeds) (*Handler, error) {
	h := &Handler{env: e}
	kind := worker.Kind[domain.Unpublish]{QueueName: Queue, Deps: e.Deps, Tasks: e.Unpublishes, AsksLastLook: true,
		TaskOf: func(u *domain.Unpublish) *domain.Task { return &u.Task },
		TaskID: worker.PayloadID(func(r domain.UnpublishRequested) uuid.UUID { return r.UnpublishID }),
		OnFail: func(ctx context.Context, u domain.Unpublish, _ worker.Failure) error { return h.release(ctx, u) }}
	// The delete is fenced by two platform time-outs (one call, and a margin).
	h.flow = worker.Flow[domain.Unpublish, started, struct{}]{Kind: kind, Begin: h.begin, Call: h.delete, Record: h.record,
		LastLook: h.lastLook, CallTimeout: 2 * e.Settings.PlatformTimeout}
	return h, h.flow.Validate()
}

// lease is how long the unpublish holds the publication's push claim: longer than one call
// of the adapter (listingupdate's lease rule).
func (h *Handler) lease() time.Duration { return 4 * h.env.Settings.PlatformTimeout }

// begin refuses an unpublish whose store is no longer verified (with other credentials, the
// platform's 404 would count as deleted), takes the publication's push claim (waiting, like
// an update, while another holds it) and reads the store's credentials.
func (h *Handler) begin(ctx context.Context, u *domain.Unpublish) (started, error) {
	store, err := h.env.Stores.Get(ctx, u.StoreID)
	if err != nil {
		return started{}, err
	}
	if store.Status != domain.StoreVerified {
		return started{}, worker.Refuse(domain.ErrStoreNotVerified)
	}
	if err := h.env.Budget.Wait(ctx, store, 1); err != nil {
		return started{}, err
	}
	now := h.env.Deps.Now()
	_, err = h.env.Publications.Update(ctx, u.PublicationID, func(p *domain.Publication) error {
		if p.Push.HeldBy(u.ID, now) {
			return domain.ErrPublicationBusy.WithRetryAfter(max(min(p.Push.Until.Sub(now), h.lease()/4), time.Second))
		}
		p.Claim(u.ID, 0, now, h.lease())
		return nil
	})
	if err != nil {
		return started{}, err
	}
	sealed, _, err := h.env.Stores.Credentials(ctx, u.StoreID)
	return started{sealed: sealed, store: store}, err
}

// delete deletes the platform product, outside any transaction; a repeat's 404 is success
// (port.Marketplace.DeleteProduct).
func (h *Handler) delete(ctx context.Context, u domain.Unpublish, s started, _ worker.Tx) (struct{}, error) {
	creds, err := worker.OpenCredentials(h.env.Cipher, u.WorkspaceID, u.StoreID, s.sealed)
	if err != nil {
		return struct{}{}, err
	}
	if err := h.env.Marketplace.DeleteProduct(ctx, creds, u.ExternalProductID); err != nil {
		h.env.Budget.Limited(ctx, s.store, err)
		return struct{}{}, fmt.Errorf("unpublish: delete product: %w", err)
	}
	return struct{}{}, nil
}

// record marks the publication unpublished, releases the claim and emits
// publication.unpublished, in the record transaction.
func (h *Handler) record(ctx context.Context, u *domain.Unpublish, _ struct{}) (any, error) {
	now := h.env.Deps.Now().UTC()
	p, err := h.env.Publications.Update(ctx, u.PublicationID, func(p *domain.Publication) error {
		p.Release(u.ID)
		p.UnpublishedAt = &now
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = h.env.Deps.Events.Publish(ctx, domain.PublicationUnpublished{PublicationID: p.ID, OperationID: u.OperationID,
		ProductID: p.ProductID, StoreID: p.StoreID, ExternalProductID: u.ExternalProductID})
	return map[string]any{"unpublish_id": u.ID, "publication_id": p.ID, "external_product_id": u.ExternalProductID}, err
}

// lastLook asks the platform for the product by the publication's external_ref before a
// final failure: absent, the delete happened, and the unpublish succeeded. A store no longer
// verified is not asked (another shop's credentials would find nothing): the held failure
// stands and the publication stays published.
func (h *Handler) lastLook(ctx context.Context, u domain.Unpublish, tx worker.Tx) (struct{}, bool, error) {
	var sealed port.SealedCredentials
	verified := false
	if err := tx(ctx, func(ctx context.Context) error {
		store, err := h.env.Stores.Get(ctx, u.StoreID)
		if err != nil {
			return err
		}
		verified = store.Status == domain.StoreVerified
		sealed, _, err = h.env.Stores.Credentials(ctx, u.StoreID)
		return err
	}); err != nil || !verified {
		return struct{}{}, false, err
	}
	creds, err := worker.OpenCredentials(h.env.Cipher, u.WorkspaceID, u.StoreID, sealed)
	if err != nil {
		return struct{}{}, false, err
	}
	found, err := h.env.Marketplace.FindProductByExternalRef(ctx, creds, u.PublicationID.String())
	return struct{}{}, err == nil && found == nil, err
}

// release drops u's push claim, if it holds it (a final failure: the publication stays
// published).
func (h *Handler) release(ctx context.Context, u domain.Unpublish) error {
	_, err := h.env.Publications.Update(ctx, u.PublicationID, func(p *domain.Publication) error {
		p.Release(u.ID)
		return nil
	})
	return err
}

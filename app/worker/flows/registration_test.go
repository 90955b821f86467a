package flows

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/listingupdate"
	"github.com/listingkit/listing/app/worker/storedisconnect"
	"github.com/listingkit/listing/domain"
)

// The fakes implement the interface they embed (a call panics: the builders only keep them).
type (
	repo[T any]  struct{ port.Repository[T] }
	fakeTx       struct{ port.Transactor }
	fakeEvents   struct{ port.EventPublisher }
	fakeProducts struct{ port.Products }
	fakeStores   struct{ port.Stores }
	fakeSyncs    struct{ port.ProductSyncs }
	fakeLedger   struct{ port.AILedger }
	fakeCipher   struct{ port.CredentialCipher }
	fakeStorage  struct{ port.ObjectStorage }
	fakeFetcher  struct{ port.Fetcher }
	fakeMarket   struct{ port.Marketplace }
	fakeAI       struct{ port.AIProvider }
	fakeGuards   struct{ port.TaskGuards }
	fakeAuth     struct{ storedisconnect.Authorizations }
)

// provided is what a process provides: every dependency a flow of the registry may need,
// as the assembly of a worker process offers them (workers.go), less those of the types
// named in without.
func provided(without ...string) worker.Provided {
	deps := worker.Deps{Tx: fakeTx{}, Operations: repo[domain.Operation]{},
		Events: fakeEvents{}, Now: time.Now, Log: slog.New(slog.DiscardHandler), Guards: fakeGuards{}}
	inspect := port.InspectImageFunc(func(io.Reader, int64) (port.InspectedImage, error) { return port.InspectedImage{}, nil })
	all := map[string]any{
		"deps": deps, "settings": worker.Settings{PlatformTimeout: time.Second, MediaMaxBytes: 1 << 20, MediaDecodes: 1},
		"products": fakeProducts{}, "stores": fakeStores{},
		"verifications": repo[domain.StoreVerification]{}, "media": repo[domain.Media]{},
		"media tasks": repo[domain.MediaTask]{}, "transfers": repo[domain.MaterialTransfer]{},
		"publications": repo[domain.Publication]{}, "syncs": fakeSyncs{},
		"ai tasks": repo[domain.AITask]{}, "ledger": fakeLedger{},
		"updates": repo[domain.ListingUpdate]{}, "unpublishes": repo[domain.Unpublish]{},
		"disconnections": repo[domain.StoreDisconnection]{}, "authorizations": fakeAuth{},
		"cipher": fakeCipher{}, "storage": fakeStorage{}, "fetcher": fakeFetcher{},
		"marketplace": fakeMarket{}, "ai": fakeAI{}, "inspect": inspect, "budget": &worker.StoreBudget{},
	}
	for _, w := range without {
		delete(all, w)
	}
	values := make([]any, 0, len(all))
	for _, v := range all {
		values = append(values, v)
	}
	return worker.Provide(values...)
}

// Every registered flow builds its task kind and its handler from what a worker process
// provides, and its task kind from what any process provides.
func TestFlowsBuildFromWhatIsProvided(t *testing.T) {
	kinds, err := Kinds(provided())
	require.NoError(t, err)
	handlers, err := Handlers(provided())
	require.NoError(t, err)
	require.NoError(t, Check(kinds, handlers))

	kinds, err = Kinds(provided("cipher", "storage", "fetcher", "marketplace", "ai", "inspect"))
	require.NoError(t, err, "a task kind needs only what every process has")
	require.Len(t, kinds, len(all))
}

// A dependency a flow needs and the process lacks is named at start-up, with the flow and
// the field; so is one that two values could fill.
func TestAMissingDependencyIsNamed(t *testing.T) {
	_, err := Handlers(provided("marketplace"))
	require.ErrorContains(t, err, "flow store_verification: the handler needs Marketplace (port.Marketplace): not provided")
	require.ErrorContains(t, err, "flow unpublish: the handler needs Marketplace (port.Marketplace): not provided")
	require.NotContains(t, err.Error(), "flow media_processing")

	_, err = Kinds(provided("publications"))
	require.ErrorContains(t, err, "flow publication: the task kind needs Publications (port.Repository[")

	_, err = Kinds(worker.Provide(fakeStores{}, port.Stores(nil)))
	require.ErrorContains(t, err, "the task kind needs Deps (worker.Deps): not provided")

	type otherStores struct{ port.Stores }
	_, err = Handlers(worker.Provide(otherStores{}, fakeStores{}))
	require.ErrorContains(t, err, "flow publication: the handler needs Stores (port.Stores): provided 2 times")
}

// A registration that lacks a part, or declares one twice or inconsistently, is refused.
func TestARegistrationLacksOrRepeatsAPart(t *testing.T) {
	base := listingupdate.Flow.Spec
	kind := func(_ struct{}) (worker.TaskKind, error) {
		return worker.Kind[domain.ListingUpdate]{QueueName: base.Queue}, nil
	}
	handler := func(_ struct{}) (worker.Handler, error) {
		return worker.HandlerFunc(func(context.Context, worker.Job) error { return nil }), nil
	}
	require.NoError(t, worker.Register(base, kind, handler).Check())

	require.ErrorContains(t, worker.Register[struct{}, struct{}](base, nil, handler).Check(), "flow listing_update: no task kind builder")
	require.ErrorContains(t, worker.Register[struct{}, struct{}](base, kind, nil).Check(), "flow listing_update: no handler builder")
	require.ErrorContains(t, worker.Register(base, func(struct{ deps worker.Deps }) (worker.TaskKind, error) { return nil, nil }, handler).Check(),
		"field deps of struct { deps worker.Deps } is not exported")

	// The last look is declared once, by the Spec: a kind that asks otherwise is refused.
	asks := base
	asks.LastLook = worker.Asks("find it")
	_, err := worker.Register(asks, kind, handler).Kind(worker.Provide())
	require.ErrorContains(t, err, "flow listing_update: the task kind's last look (AsksLastLook false) is not the one Spec.LastLook declares")

	other := base
	other.Queue = "elsewhere"
	_, err = worker.Register(other, kind, handler).Kind(worker.Provide())
	require.ErrorContains(t, err, "the task kind's queue "+base.Queue+" is not the flow's queue elsewhere")

	// A derived entry point needs the task kind's Accept, a Resource and a not-found error
	// per id of its path; and its command type is another flow's at most once.
	start := base
	start.Start = &worker.Start{Type: "listing.test_start", Method: "DELETE", Path: "/publications/{publication_id}",
		NotFound: []*domain.Error{domain.ErrPublicationNotFound}, OperationID: "testStart"}
	require.NoError(t, worker.Register(start, kind, handler).Check())
	_, err = worker.Register(start, kind, handler).Kind(worker.Provide())
	require.ErrorContains(t, err, "flow listing_update: entry point listing.test_start, but the task kind has no Accept")
	start.Start.NotFound = nil
	require.ErrorContains(t, worker.Register(start, kind, handler).Check(), "entry point listing.test_start: not one not-found error per id")
	start.Start.Type = "listing.unpublish"
	require.ErrorContains(t, validate(append(all[:len(all):len(all)], worker.Register(start, kind, handler))), "the same command type")

	// A flow listed twice shares its every part with itself.
	twice := append(all[:len(all):len(all)], listingupdate.Flow)
	err = validate(twice)
	require.ErrorContains(t, err, "flows listing_update and listing_update: the same queue")
	require.ErrorContains(t, err, "flows listing_update and listing_update: the same table")
}

//go:build wireinject

package listing

import (
	"context"
	"log/slog"

	"github.com/google/wire"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/infra/config"
)

// core builds what the API and the workers share: connections, the command bus and the
// application catalogue.
var core = wire.NewSet(ProvidePool, ProvideRedis, ProvideIdempotency, ProvideBus, ProvideTokens, ProvideHasher,
	ProvideRepositories, ProvideEventPublisher, ProvideCipher, ProvideStorage, ProvideFetcher, ProvideApplication)

// InitializeAPI assembles the HTTP API. The cleanup function closes the pool and the Redis
// client.
func InitializeAPI(ctx context.Context, cfg config.Config, opts Options, reg *prometheus.Registry, log *slog.Logger) (*API, func(), error) {
	wire.Build(core, ProvideHTTP, ProvideCommandConsumer, wire.Struct(new(API), "*"))
	return nil, nil, nil
}

// InitializeDispatch assembles the outbox dispatcher, its publishers and the reconciler.
func InitializeDispatch(ctx context.Context, cfg config.Config, q *Queues, reg *prometheus.Registry, log *slog.Logger) (*Dispatch, func(), error) {
	wire.Build(ProvidePool, ProvideRedis, ProvideBullMQConfig, ProvidePublishers, ProvideDispatcher, ProvideRepositories,
		ProvideEventPublisher, ProvideWorkerDeps, ProvideTaskKinds, ProvideSessionPool, ProvideReconciler, ProvideEventStreams, wire.Struct(new(Dispatch), "*"))
	return nil, nil, nil
}

// InitializeCleanup assembles the retention jobs.
func InitializeCleanup(ctx context.Context, cfg config.Config, reg *prometheus.Registry, log *slog.Logger) (*Cleanup, func(), error) {
	wire.Build(ProvidePool, ProvideCleanup)
	return nil, nil, nil
}

// InitializeWork assembles the job consumers of every queue, with the external systems
// (or their development sandboxes).
func InitializeWork(ctx context.Context, cfg config.Config, q *Queues, reg *prometheus.Registry, log *slog.Logger) (*Work, func(), error) {
	wire.Build(ProvidePool, ProvideRedis, ProvideRepositories, ProvideEventPublisher, ProvideCipher, ProvideStorage,
		ProvideFetcher, ProvideExternals, ProvideStoreBudget, ProvideWorkerDeps, ProvideTaskKinds, ProvideJobHandlers, ProvideBullMQConfig,
		ProvideTransport, ProvideRunner, wire.Struct(new(Work), "*"))
	return nil, nil, nil
}

//go:build wireinject

package listing

import (
	"context"
	"log/slog"

	"github.com/google/wire"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/infra/config"
)

// core builds what every role shares.
var core = wire.NewSet(ProvidePool, ProvideRedis, ProvideIdempotency, ProvideBus, ProvideTokens, ProvideHasher, ProvideApplication)

// InitializeAPI assembles the HTTP API. The cleanup function closes the pool and the Redis
// client.
func InitializeAPI(ctx context.Context, cfg config.Config, opts Options, reg *prometheus.Registry, log *slog.Logger) (*API, func(), error) {
	wire.Build(core, ProvideHTTP, wire.Struct(new(API), "*"))
	return nil, nil, nil
}

package bus

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/domain"
)

// Metrics counts and times command executions.
type Metrics struct {
	executions *prometheus.CounterVec
	duration   *prometheus.HistogramVec
}

// NewMetrics registers the command collectors on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "listing_commands_total",
			Help: "Commands executed, by command and outcome (ok, replayed, or the error code).",
		}, []string{"command", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "listing_command_duration_seconds",
			Help:    "Command latency including its transaction.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"command"}),
	}
	for _, c := range []prometheus.Collector{m.executions, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observe is the outermost middleware: one log line per failed command (never the command's
// fields: they may hold passwords or credentials) and metrics for every command. m may be nil.
func Observe(logger *slog.Logger, m *Metrics) Middleware {
	return func(ctx context.Context, inv Invocation, next Next) (Outcome, error) {
		start := time.Now()
		out, err := next(ctx)
		outcome := "ok"
		var de *domain.Error
		switch {
		case err != nil && errors.As(err, &de) && de.Kind != domain.KindInternal:
			outcome = de.Code
		case err != nil:
			outcome = domain.ErrInternal.Code
			logger.ErrorContext(ctx, "command failed", "command", inv.Name,
				"workspace_id", inv.Actor.WorkspaceID.String(), "user_id", inv.Actor.UserID.String(), "err", err)
		case out.Replayed:
			outcome = "replayed"
		}
		if m != nil {
			m.executions.WithLabelValues(inv.Name, outcome).Inc()
			m.duration.WithLabelValues(inv.Name).Observe(time.Since(start).Seconds())
		}
		return out, err
	}
}

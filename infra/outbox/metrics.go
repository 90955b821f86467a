package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/infra/metrics"
)

// Metrics are the outbox's Prometheus collectors. The gauges come from ReadGauges (refreshed
// by the Dispatcher every MetricsInterval); the counters and the histogram are updated as
// events are delivered.
type Metrics struct {
	// Pending is outbox_pending_events: events waiting for delivery (pending and dispatching).
	Pending prometheus.Gauge
	// OldestPendingAge is outbox_oldest_pending_age_seconds: age of the oldest pending event.
	OldestPendingAge prometheus.Gauge
	// DeadLetters is outbox_dead_letter_events: events in dead_letter now.
	DeadLetters prometheus.Gauge
	// Latency is outbox_dispatch_latency_seconds: created_at → dispatched.
	Latency prometheus.Histogram
	// Claim is outbox_claim_duration_seconds: one round's claim (one statement, committed).
	Claim prometheus.Histogram
	// Attempts is outbox_dispatch_attempts_total{result="success"|"failure"}.
	Attempts *prometheus.CounterVec
	// DeadLettered is outbox_dead_lettered_total: events moved to dead_letter.
	DeadLettered prometheus.Counter
	// Published is outbox_published_total{destination}.
	Published *prometheus.CounterVec
	// FairShareHeld is listing_fair_share_held{flow}: request events held back in the outbox
	// by fair share (doc.go), per flow.
	FairShareHeld *prometheus.GaugeVec
}

// NewMetrics creates the collectors and registers them on reg (nil: not registered). A
// collector already registered on reg (by another Dispatcher) is reused.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "listing_outbox_pending_events", Help: "Outbox events not yet delivered (pending or dispatching; those held by fair share are listing_fair_share_held).",
		}),
		OldestPendingAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "listing_outbox_oldest_pending_age_seconds", Help: "Age of the oldest undelivered outbox event.",
		}),
		DeadLetters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "listing_outbox_dead_letter_events", Help: "Outbox events in dead_letter.",
		}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "listing_outbox_dispatch_latency_seconds",
			Help:    "Time from an outbox event's insert to its dispatch.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
		}),
		Claim: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "listing_outbox_claim_duration_seconds",
			Help:    "Duration of a dispatcher round's claim (one committed statement), from send to result.",
			Buckets: []float64{.0005, .001, .0015, .002, .003, .004, .005, .0075, .01, .015, .02, .03, .05, .075, .1, .2, .5, 1, 2, 5},
		}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "listing_outbox_dispatch_attempts_total", Help: "Delivery attempts of outbox events by result.",
		}, []string{"result"}),
		DeadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "listing_outbox_dead_lettered_total", Help: "Outbox events moved to dead_letter.",
		}),
		Published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "listing_outbox_published_total", Help: "Outbox events published, by destination.",
		}, []string{"destination"}),
		FairShareHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "listing_fair_share_held", Help: "Request events held back in the outbox by fair share, per flow.",
		}, []string{"flow"}),
	}
	// Both results exist from the start, so a rate over them sees the first failure.
	m.Attempts.WithLabelValues("success")
	m.Attempts.WithLabelValues("failure")
	if reg == nil {
		return m, nil
	}
	var err error
	m.Pending = metrics.Register(reg, m.Pending, &err)
	m.OldestPendingAge = metrics.Register(reg, m.OldestPendingAge, &err)
	m.DeadLetters = metrics.Register(reg, m.DeadLetters, &err)
	m.Latency = metrics.Register(reg, m.Latency, &err)
	m.Claim = metrics.Register(reg, m.Claim, &err)
	m.Attempts = metrics.Register(reg, m.Attempts, &err)
	m.DeadLettered = metrics.Register(reg, m.DeadLettered, &err)
	m.Published = metrics.Register(reg, m.Published, &err)
	m.FairShareHeld = metrics.Register(reg, m.FairShareHeld, &err)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// SetGauges sets the gauges from g.
func (m *Metrics) SetGauges(g Gauges) {
	m.Pending.Set(float64(g.Undelivered))
	m.OldestPendingAge.Set(g.OldestUndeliveredAge.Seconds())
	m.DeadLetters.Set(float64(g.DeadLetters))
}

// Gauges is the outbox across workspaces as the dispatcher's metrics show it: counts and an
// age, nothing of any one workspace.
type Gauges struct {
	// Undelivered counts pending and dispatching events.
	Undelivered int64
	// OldestUndeliveredAge is the age of the oldest undelivered event; zero when none.
	OldestUndeliveredAge time.Duration
	// DeadLetters counts events in dead_letter.
	DeadLetters int64
}

// ReadGauges reads the gauges through the SECURITY DEFINER function outbox_gauges, which
// app_user may run (unlike outbox_stats, which is the operators').
func ReadGauges(ctx context.Context, pool *pgxpool.Pool) (Gauges, error) {
	var g Gauges
	var now time.Time
	var oldest *time.Time
	err := pool.QueryRow(ctx, `SELECT now(), undelivered, oldest_undelivered_at, dead_letters FROM outbox_gauges()`).
		Scan(&now, &g.Undelivered, &oldest, &g.DeadLetters)
	if err != nil {
		return Gauges{}, fmt.Errorf("outbox.ReadGauges: %w", err)
	}
	if oldest != nil {
		g.OldestUndeliveredAge = max(now.Sub(*oldest), 0)
	}
	return g, nil
}

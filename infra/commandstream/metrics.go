package commandstream

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the consumer's Prometheus collectors.
type metrics struct {
	messages  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	reclaimed prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "listing_command_messages_total",
			Help: "Command messages handled, by command type (unknown when not a command of ours) and outcome: accepted, replayed (a second delivery answered from the idempotency record), rejected (the endpoint refused it), malformed (no CloudEvent), unauthenticated, retried (a transient failure: no reply, the entry stays pending).",
		}, []string{"type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "listing_command_message_duration_seconds",
			Help:    "Time from reading a command message to its acknowledgement, by command type.",
			Buckets: prometheus.DefBuckets,
		}, []string{"type"}),
		reclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "listing_command_messages_reclaimed_total",
			Help: "Command entries taken back after staying pending longer than COMMANDS_CLAIM_IDLE (a consumer crashed, or a transient failure).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.messages, m.duration, m.reclaimed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("commandstream: metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) count(typ, outcome string) { m.messages.WithLabelValues(typ, outcome).Inc() }

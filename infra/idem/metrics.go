package idem

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/infra/metrics"
)

// Metrics are the Prometheus counters of the middleware and the cleanup. The label "command"
// is the bus command name (a bounded set). A nil *Metrics records nothing.
type Metrics struct {
	// Executions counts requests that claimed their key and ran the handler.
	Executions *prometheus.CounterVec
	// Replays counts requests answered from a completed record.
	Replays *prometheus.CounterVec
	// Conflicts counts IDEMPOTENCY_KEY_REUSED answers.
	Conflicts *prometheus.CounterVec
	// InProgress counts IDEMPOTENCY_REQUEST_IN_PROGRESS answers.
	InProgress *prometheus.CounterVec
	// CleanupDeleted counts expired records deleted by the cleanup.
	CleanupDeleted prometheus.Counter
}

// NewMetrics creates the counters and registers them on reg. An already registered identical
// collector (a second NewMetrics on the same registry) is reused.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "listing", Subsystem: "idempotency", Name: name, Help: help,
		}, []string{"command"})
	}
	m := &Metrics{
		Executions: vec("executions_total", "Idempotent requests that claimed their key and ran the handler."),
		Replays:    vec("replays_total", "Idempotent requests answered from a stored response."),
		Conflicts:  vec("key_reused_total", "Idempotent requests refused because the key was used for another request."),
		InProgress: vec("in_progress_total", "Idempotent requests refused because the same key was still executing."),
		CleanupDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "listing", Subsystem: "idempotency", Name: "cleanup_deleted_total",
			Help: "Expired idempotency records deleted by the cleanup.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	for _, p := range []**prometheus.CounterVec{&m.Executions, &m.Replays, &m.Conflicts, &m.InProgress} {
		*p = metrics.Register(reg, *p, &err)
	}
	m.CleanupDeleted = metrics.Register(reg, m.CleanupDeleted, &err)
	if err != nil {
		return nil, fmt.Errorf("idem.NewMetrics: %w", err)
	}
	return m, nil
}

func inc(v *prometheus.CounterVec, command string) {
	if v != nil {
		v.WithLabelValues(command).Inc()
	}
}

func (m *Metrics) execution(cmd string) {
	if m != nil {
		inc(m.Executions, cmd)
	}
}

func (m *Metrics) replay(cmd string) {
	if m != nil {
		inc(m.Replays, cmd)
	}
}

func (m *Metrics) conflict(cmd string) {
	if m != nil {
		inc(m.Conflicts, cmd)
	}
}

func (m *Metrics) inProgress(cmd string) {
	if m != nil {
		inc(m.InProgress, cmd)
	}
}

func (m *Metrics) cleanupDeleted(n int64) {
	if m == nil || m.CleanupDeleted == nil || n <= 0 {
		return
	}
	m.CleanupDeleted.Add(float64(n))
}

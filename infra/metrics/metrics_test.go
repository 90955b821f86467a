package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestRegisterReusesAnEqualCollectorAndReportsConflicts(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "things_total", Help: "Things."}
	var err error
	first := Register(reg, prometheus.NewCounter(opts), &err)
	second := Register(reg, prometheus.NewCounter(opts), &err)
	require.NoError(t, err)
	require.Same(t, first, second, "the second instance shares the registered counter")

	// Same name, another help text: a real conflict.
	Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "things_total", Help: "Other."}), &err)
	require.Error(t, err)
}

// Package metrics holds what the infra packages share about Prometheus collectors.
package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it. When reg already holds an equal collector (one
// registered by another instance of the same component in this process), it returns that one
// instead, so both instances update the same series. Any other failure is joined into *errp
// and c is returned unregistered.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*errp = errors.Join(*errp, err)
	return c
}

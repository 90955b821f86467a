// Package port declares the interfaces through which the application layer reaches the
// outside world. Implementations live in infra; the application never imports infra.
package port

import (
	"context"

	"github.com/listingkit/listing/domain"
)

// EventPublisher records domain events in the transactional outbox of the transaction that
// ctx carries (opened by the command bus or by a worker step). The events commit with the
// business rows or not at all; delivery happens later, at least once. Publish fails when ctx
// carries no transaction.
type EventPublisher interface {
	Publish(ctx context.Context, events ...domain.Event) error
}

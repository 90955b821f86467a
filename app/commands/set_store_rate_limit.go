package commands

import (
	"context"
	"strings"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// SetStoreRateLimit sets a store's own budget of requests to its marketplace, or, with the
// zero RateLimit, returns it to its platform's (STORE_RATE_LIMITS). The workers read it with
// the store at the start of each task, so it applies to the next task that starts. Setting
// the same limit twice changes nothing more: it needs no idempotency key.
type SetStoreRateLimit struct {
	StoreID     uuid.UUID
	WorkspaceID uuid.UUID
	Limit       domain.RateLimit
}

// CommandName implements bus.Command.
func (SetStoreRateLimit) CommandName() string { return "SetStoreRateLimit" }

// SetStoreRateLimitHandler handles SetStoreRateLimit.
type SetStoreRateLimitHandler struct {
	stores port.Stores
	now    port.Clock
}

// NewSetStoreRateLimitHandler returns the handler. It panics on a nil dependency.
func NewSetStoreRateLimitHandler(stores port.Stores, now port.Clock) SetStoreRateLimitHandler {
	mustHave("SetStoreRateLimitHandler", stores, now)
	return SetStoreRateLimitHandler{stores: stores, now: now}
}

// Handle implements bus.Handler: VALIDATION_FAILED for a limit out of range
// (domain.RateLimit.Validate), STORE_NOT_FOUND for a store the workspace does not have, else
// the store with its new limit.
func (h SetStoreRateLimitHandler) Handle(ctx context.Context, cmd SetStoreRateLimit) (domain.Store, error) {
	if err := cmd.Limit.Validate(); err != nil {
		field, _, _ := strings.Cut(err.Error(), " ")
		return domain.Store{}, domain.Invalid(field, err.Error())
	}
	return h.stores.Update(ctx, cmd.StoreID, func(s *domain.Store) error {
		if s.RateLimit != cmd.Limit {
			s.RateLimit, s.UpdatedAt = cmd.Limit, h.now()
		}
		return nil
	})
}

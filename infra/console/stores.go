package console

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/domain"
)

// The workspace page's stores: each store with tasks waiting for it (sql/075), its budget of
// requests to its marketplace (its own, or its platform's: Config.StoreRateLimits), and when
// its backlog is expected to end at that budget. A rate-limited shop's long backlog is
// expected, not stuck: the page says when it ends.

// StoreBacklog is one store of a workspace with unfinished tasks.
type StoreBacklog struct {
	ID               uuid.UUID
	Name, Platform   string
	Pending, Running int64
	// Limit is the store's budget: its own (OwnLimit) or its platform's; zero when neither
	// is set (the store is not paced).
	Limit    domain.RateLimit
	OwnLimit bool
	// ExpectedEnd is when the store's unfinished tasks are expected to be done at its budget,
	// counting one request a task (a product sync's pages take more); zero when not paced.
	ExpectedEnd time.Time
}

func (r reader) storeBacklogs(ctx context.Context, ws uuid.UUID) ([]StoreBacklog, error) {
	rows, err := r.pool.Query(ctx, `SELECT store_id, name, platform, rate_per_second, rate_burst, pending, running
		FROM operator_store_backlogs($1)`, ws) // at most 100, the most unfinished tasks first
	if err != nil {
		return nil, fmt.Errorf("console.storeBacklogs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StoreBacklog, error) {
		var b StoreBacklog
		return b, row.Scan(&b.ID, &b.Name, &b.Platform, &b.Limit.PerSecond, &b.Limit.Burst, &b.Pending, &b.Running)
	})
	if err != nil {
		return nil, fmt.Errorf("console.storeBacklogs: %w", err)
	}
	return out, nil
}

// paced completes b's budget (its platform's when the store has none of its own) and its
// expected end from now: the burst goes at once, the rest at the budget's rate.
func paced(b StoreBacklog, platforms map[string]domain.RateLimit, now time.Time) StoreBacklog {
	b.OwnLimit = !b.Limit.IsZero()
	if !b.OwnLimit {
		b.Limit = platforms[b.Platform]
	}
	if b.Limit.IsZero() || b.Limit.PerSecond <= 0 {
		return b
	}
	rest := max(float64(b.Pending+b.Running-int64(b.Limit.Burst)), 0)
	b.ExpectedEnd = now.Add(time.Duration(math.Ceil(rest/b.Limit.PerSecond)) * time.Second)
	return b
}

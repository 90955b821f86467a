package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CleanupConfig configures a Cleaner.
type CleanupConfig struct {
	// Retention is how long dispatched events are kept in the log after dispatch: a day's
	// partition is dropped once all of it is older than Retention. Default 7 days; at least
	// 24 hours (the database refuses less).
	Retention time.Duration
	// DaysAhead is how many days after today get their partition of the log created ahead.
	// Default 3, in [1, 31]. Cleanup must run more often than that: a day without its
	// partition goes to the log's default partition (marking never fails for it).
	DaysAhead int
}

func (c *CleanupConfig) setDefaults() {
	setDefault(&c.Retention, 7*24*time.Hour)
	setDefault(&c.DaysAhead, 3)
}

// MinRetention is the shortest CleanupConfig.Retention.
const MinRetention = 24 * time.Hour

// Validate reports the first invalid field. It does not change c.
func (c CleanupConfig) Validate() error {
	switch {
	case c.Retention < MinRetention:
		return fmt.Errorf("outbox: CleanupConfig.Retention must be at least %s, got %s", MinRetention, c.Retention)
	case c.DaysAhead < 1 || c.DaysAhead > 31:
		return fmt.Errorf("outbox: CleanupConfig.DaysAhead must be in [1, 31], got %d", c.DaysAhead)
	}
	return nil
}

// Cleaner keeps the log of dispatched events (`app cleanup`): it creates the partitions of
// the days ahead and drops the partitions older than the retention, through the database's
// outbox_dispatched_maintain (sql/018). Events still owed and dead letters live in
// outbox_events and are never touched. Safe to run concurrently with dispatchers and with
// other cleaners (a cleaner that waits more than 2 s for a lock fails and runs next time).
type Cleaner struct {
	cfg  CleanupConfig
	pool *pgxpool.Pool
	log  *slog.Logger
}

// NewCleaner returns a Cleaner on pool (the app_user pool). logger may be nil.
func NewCleaner(cfg CleanupConfig, pool *pgxpool.Pool, logger *slog.Logger) (*Cleaner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("outbox.NewCleaner: %w", err)
	}
	if pool == nil {
		return nil, errors.New("outbox.NewCleaner: pool is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Cleaner{cfg: cfg, pool: pool, log: logger.With("component", "outbox.cleanup")}, nil
}

// CleanupResult says what one Cleanup did to the log.
type CleanupResult struct {
	// Created and Dropped count the day partitions created and dropped.
	Created, Dropped int
	// Deleted counts the rows deleted from the default partition.
	Deleted int64
}

// Cleanup creates the partitions of today and the DaysAhead days after it, drops those
// older than Retention, and deletes the default partition's rows older than Retention.
func (c *Cleaner) Cleanup(ctx context.Context) (CleanupResult, error) {
	var res CleanupResult
	err := c.pool.QueryRow(ctx, `SELECT created, dropped, deleted FROM outbox_dispatched_maintain($1, $2)`,
		c.cfg.Retention, c.cfg.DaysAhead).Scan(&res.Created, &res.Dropped, &res.Deleted)
	if err != nil {
		return res, fmt.Errorf("outbox.Cleaner.Cleanup: %w", err)
	}
	c.log.Info("outbox cleanup done", "partitions_created", res.Created, "partitions_dropped", res.Dropped,
		"default_partition_deleted", res.Deleted)
	return res, nil
}

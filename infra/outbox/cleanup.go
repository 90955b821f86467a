package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/infra/postgres"
)

// CleanupConfig configures a Cleaner.
type CleanupConfig struct {
	// Retention is how long dispatched events are kept after dispatch. Default 7 days;
	// at least 1 minute.
	Retention time.Duration
	// BatchSize is the most rows one DELETE (one transaction) removes. Default 1000.
	BatchSize int
	// WorkspacesPerRound is the most workspaces taken from outbox_retention_workspaces at
	// once. Default 1000, max 10000.
	WorkspacesPerRound int
}

func (c *CleanupConfig) setDefaults() {
	setDefault(&c.Retention, 7*24*time.Hour)
	setDefault(&c.BatchSize, 1000)
	setDefault(&c.WorkspacesPerRound, 1000)
}

// Validate reports the first invalid field. It does not change c.
func (c CleanupConfig) Validate() error {
	switch {
	case c.Retention < time.Minute:
		return fmt.Errorf("outbox: CleanupConfig.Retention must be at least 1m, got %s", c.Retention)
	case c.BatchSize < 1 || c.BatchSize > 100000:
		return fmt.Errorf("outbox: CleanupConfig.BatchSize must be in [1, 100000], got %d", c.BatchSize)
	case c.WorkspacesPerRound < 1 || c.WorkspacesPerRound > 10000:
		return fmt.Errorf("outbox: CleanupConfig.WorkspacesPerRound must be in [1, 10000], got %d", c.WorkspacesPerRound)
	}
	return nil
}

// Cleaner deletes dispatched outbox events older than the retention period (`app cleanup`).
// Pending, dispatching and dead_letter rows are never deleted. Safe to run concurrently with
// dispatchers and with other cleaners.
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

// CleanupResult says what one Cleanup removed.
type CleanupResult struct {
	Deleted    int64
	Workspaces int
}

// Cleanup deletes, workspace by workspace (each in its own RLS transactions of at most
// BatchSize rows), every dispatched event whose dispatched_at is older than now - Retention,
// until none is left or ctx ends.
func (c *Cleaner) Cleanup(ctx context.Context) (CleanupResult, error) {
	var res CleanupResult
	before := time.Now().Add(-c.cfg.Retention)
	seen := map[uuid.UUID]bool{}
	for {
		rows, err := c.pool.Query(ctx, `SELECT workspace_id FROM outbox_retention_workspaces($1, $2)`, before, c.cfg.WorkspacesPerRound)
		if err != nil {
			return res, fmt.Errorf("outbox.Cleaner.Cleanup: %w", err)
		}
		wss, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return res, fmt.Errorf("outbox.Cleaner.Cleanup: %w", err)
		}
		if len(wss) == 0 {
			break
		}
		for _, ws := range wss {
			n, err := c.cleanWorkspace(ctx, ws, before)
			res.Deleted += n
			if !seen[ws] {
				seen[ws] = true
				res.Workspaces++
			}
			if err != nil {
				return res, err
			}
		}
	}
	c.log.Info("outbox cleanup done", "deleted", res.Deleted, "workspaces", res.Workspaces)
	return res, nil
}

func (c *Cleaner) cleanWorkspace(ctx context.Context, ws uuid.UUID, before time.Time) (int64, error) {
	var total int64
	for {
		var n int64
		err := postgres.InTx(ctx, c.pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `
				DELETE FROM outbox_events WHERE id IN (
				  SELECT id FROM outbox_events
				  WHERE workspace_id = $1 AND status = 'dispatched' AND dispatched_at < $2
				  ORDER BY dispatched_at LIMIT $3
				  FOR UPDATE SKIP LOCKED)`, ws, before, c.cfg.BatchSize)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("outbox.Cleaner.cleanWorkspace: %w", err)
		}
		total += n
		if n < int64(c.cfg.BatchSize) {
			return total, nil
		}
	}
}

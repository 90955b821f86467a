package idem

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

// CleanupStats counts what one cleanup pass did.
type CleanupStats struct {
	// Workspaces is how many workspace visits the pass made (a workspace found in two
	// discovery rounds counts twice).
	Workspaces int
	// Batches is how many delete transactions ran.
	Batches int
	// Deleted is how many records were deleted.
	Deleted int64
}

// Cleaner deletes expired idempotency records. It finds workspaces with expired records
// through the SECURITY DEFINER function idempotency_expired_workspaces (ids only), then
// deletes each workspace's records in its own RLS transactions of at most BatchSize rows,
// skipping rows another transaction holds. It needs no BYPASSRLS and holds no lock longer
// than one batch. Safe for concurrent use; two cleaners running at once only share the work.
type Cleaner struct {
	pool  *pgxpool.Pool
	store *Store
	cfg   CleanerConfig
}

// NewCleaner validates cfg (after defaults) and returns a Cleaner on pool (the app_user pool).
func NewCleaner(pool *pgxpool.Pool, cfg CleanerConfig) (*Cleaner, error) {
	if pool == nil {
		return nil, errors.New("idem.NewCleaner: nil pool")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("idem.NewCleaner: %w", err)
	}
	return &Cleaner{pool: pool, store: NewStore(), cfg: cfg}, nil
}

// RunOnce deletes every record expired when it starts (and any expiring meanwhile) and
// returns the counts. It stops when a discovery round finds no workspace or deletes nothing
// (the remaining rows are held by other transactions and are left for the next pass).
func (c *Cleaner) RunOnce(ctx context.Context) (CleanupStats, error) {
	var st CleanupStats
	for {
		workspaces, err := c.expiredWorkspaces(ctx)
		if err != nil {
			return st, err
		}
		if len(workspaces) == 0 {
			return st, nil
		}
		var round int64
		for _, ws := range workspaces {
			st.Workspaces++
			n, batches, err := c.cleanWorkspace(ctx, ws)
			st.Deleted += n
			st.Batches += batches
			round += n
			if err != nil {
				return st, err
			}
		}
		if round == 0 {
			return st, nil
		}
	}
}

func (c *Cleaner) expiredWorkspaces(ctx context.Context) ([]uuid.UUID, error) {
	rows, err := c.pool.Query(ctx, `SELECT workspace_id FROM idempotency_expired_workspaces(now(), $1)`,
		c.cfg.WorkspacesPerRound)
	if err != nil {
		return nil, fmt.Errorf("idem.Cleaner.RunOnce: discover: %w", postgres.TranslateError(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("idem.Cleaner.RunOnce: discover: %w", postgres.TranslateError(err))
	}
	return ids, nil
}

// cleanWorkspace deletes the workspace's expired records, one batch per transaction.
func (c *Cleaner) cleanWorkspace(ctx context.Context, ws uuid.UUID) (deleted int64, batches int, err error) {
	for {
		if err := ctx.Err(); err != nil {
			return deleted, batches, err
		}
		var n int64
		err := postgres.InTx(ctx, c.pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
			var err error
			n, err = c.store.DeleteExpired(ctx, c.cfg.BatchSize)
			return err
		})
		if err != nil {
			return deleted, batches, fmt.Errorf("idem.Cleaner.RunOnce: workspace %s: %w", ws, err)
		}
		batches++
		deleted += n
		c.cfg.Metrics.cleanupDeleted(n)
		if n < int64(c.cfg.BatchSize) {
			return deleted, batches, nil
		}
	}
}

// Run calls RunOnce at once and then every interval until ctx ends, logging each pass that
// deleted something or failed (counts and workspace ids only). It returns ctx's error.
func (c *Cleaner) Run(ctx context.Context, interval time.Duration, log *slog.Logger) error {
	if interval <= 0 {
		return errors.New("idem.Cleaner.Run: interval must be positive")
	}
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		st, err := c.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			log.ErrorContext(ctx, "idempotency cleanup failed", "error", err, "deleted", st.Deleted)
		case st.Deleted > 0:
			log.InfoContext(ctx, "idempotency cleanup", "deleted", st.Deleted, "batches", st.Batches, "workspaces", st.Workspaces)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

package postgres

import (
	"context"
	dbsql "database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
)

// The move of a long outbox history around migration 018.
//
// Migration 018 moves every dispatched event from outbox_events to the log, outbox_dispatched,
// under an ACCESS EXCLUSIVE lock on outbox_events held until it commits (about 26 µs a row on
// the development machine: half an hour at 70 M rows, during which no event can be written).
// Migrate therefore stages the history first: on a database at version 17, it moves the
// dispatched events to outbox_history_staged in batches of historyBatch rows, each batch a
// transaction of its own (a short lock on outbox_events, to lift its forced row security for
// the owner within the batch), while the previous version keeps running; 018 then copies only
// what was dispatched since, and after the migrations Migrate moves the staged events into
// the log in batches (one workspace at a time, under the log's tenant policy: no lock on the
// log beyond its inserts), and drops the staging table. A Migrate interrupted half-way goes
// on where it stopped the next time it runs. While the history is staged (between the first
// batch and the end of Migrate), the operator tools and the reconciler of either version do
// not see it: the reconciler's last-dispatched-job lookup may miss a task's job and deliver
// its event again (at least once, as always).

// historyVersion is the migration that moves the history, historyBatch the rows per batch.
const (
	historyVersion = 18
	historyBatch   = 5000
)

// stagedTable is where the history waits between the two halves.
const stagedTable = "outbox_history_staged"

// HistoryMove counts the events Migrate staged and then moved to the log.
type HistoryMove struct {
	Staged, Moved int64
	// LongestBatch is the longest batch's transaction (the lock it held on outbox_events).
	LongestBatch time.Duration
}

// stageOutboxHistory moves the dispatched events of outbox_events (schema of version 17) to
// the staging table, in batches.
func stageOutboxHistory(ctx context.Context, db *dbsql.DB, mv *HistoryMove) error {
	if _, err := db.ExecContext(ctx, `
		DO $$ BEGIN
		  SET LOCAL ROLE listing_owner;
		  CREATE TABLE IF NOT EXISTS public.outbox_history_staged (LIKE public.outbox_events);
		  CREATE INDEX IF NOT EXISTS outbox_history_staged_workspace ON public.outbox_history_staged (workspace_id);
		  REVOKE ALL ON public.outbox_history_staged FROM PUBLIC;
		END $$`); err != nil {
		return fmt.Errorf("stage the outbox history: %w", err)
	}
	for {
		start := time.Now()
		n, err := inTxSQL(ctx, db, func(tx *dbsql.Tx) (int64, error) {
			for _, q := range []string{`SET LOCAL ROLE listing_owner`, `SET LOCAL lock_timeout = '2s'`,
				`ALTER TABLE outbox_events NO FORCE ROW LEVEL SECURITY`} {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return 0, err
				}
			}
			res, err := tx.ExecContext(ctx, `
				WITH m AS (
				  DELETE FROM outbox_events WHERE id IN (
				    SELECT id FROM outbox_events WHERE status = 'dispatched' LIMIT $1)
				  RETURNING *)
				INSERT INTO outbox_history_staged SELECT * FROM m`, historyBatch)
			if err != nil {
				return 0, err
			}
			if _, err := tx.ExecContext(ctx, `ALTER TABLE outbox_events FORCE ROW LEVEL SECURITY`); err != nil {
				return 0, err
			}
			return res.RowsAffected()
		})
		if isLockTimeout(err) {
			continue // a long transaction held outbox_events: try again
		}
		if err != nil {
			return fmt.Errorf("stage the outbox history: %w", err)
		}
		mv.Staged += n
		mv.LongestBatch = max(mv.LongestBatch, time.Since(start))
		if n < historyBatch {
			return nil
		}
	}
}

// unstageOutboxHistory moves the staged events to the log, one workspace and batch at a time,
// then drops the staging table; it does nothing when there is none.
func unstageOutboxHistory(ctx context.Context, db *dbsql.DB, mv *HistoryMove) error {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('public.outbox_history_staged') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT workspace_id::text FROM outbox_history_staged`)
	if err != nil {
		return fmt.Errorf("move the staged outbox history: %w", err)
	}
	var wss []string
	for rows.Next() {
		var ws string
		if err := rows.Scan(&ws); err != nil {
			rows.Close()
			return err
		}
		wss = append(wss, ws)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, ws := range wss {
		for {
			n, err := inTxSQL(ctx, db, func(tx *dbsql.Tx) (int64, error) {
				if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE listing_owner`); err != nil {
					return 0, err
				}
				if _, err := tx.ExecContext(ctx, `SELECT set_config('app.workspace_id', $1, true)`, ws); err != nil {
					return 0, err
				}
				res, err := tx.ExecContext(ctx, `
					WITH m AS (
					  DELETE FROM outbox_history_staged WHERE ctid = ANY (ARRAY (
					    SELECT ctid FROM outbox_history_staged WHERE workspace_id = $1::uuid LIMIT $2))
					  RETURNING *)
					INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
					                               event_payload, metadata, attempt_count, created_at, dispatched_at)
					SELECT id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
					       event_payload, metadata, attempt_count, created_at, coalesce(dispatched_at, created_at)
					FROM m`, ws, historyBatch)
				if err != nil {
					return 0, err
				}
				return res.RowsAffected()
			})
			if err != nil {
				return fmt.Errorf("move the staged outbox history of workspace %s: %w", ws, err)
			}
			mv.Moved += n
			if n < historyBatch {
				break
			}
		}
	}
	var left int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox_history_staged`).Scan(&left); err != nil {
		return err
	}
	if left > 0 {
		return fmt.Errorf("move the staged outbox history: %d events left in %s (staged meanwhile by another run?): run migrate again", left, stagedTable)
	}
	_, err = db.ExecContext(ctx, `DO $$ BEGIN SET LOCAL ROLE listing_owner; DROP TABLE public.outbox_history_staged; END $$`)
	return err
}

func inTxSQL(ctx context.Context, db *dbsql.DB, fn func(*dbsql.Tx) (int64, error)) (int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	n, err := fn(tx)
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	return n, tx.Commit()
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == CodeLockNotAvailable
}

// upWithStagedHistory applies the migrations, staging the outbox history around 018 when the
// database is at a version before it (see above).
func upWithStagedHistory(ctx context.Context, db *dbsql.DB, p *goose.Provider) ([]*goose.MigrationResult, *HistoryMove, error) {
	mv := &HistoryMove{}
	var results []*goose.MigrationResult
	current, err := p.GetDBVersion(ctx)
	if err == nil && current > 0 && current < historyVersion {
		// The history is staged at 17's schema.
		r, err := p.UpTo(ctx, historyVersion-1)
		results = append(results, r...)
		if err != nil {
			return results, mv, err
		}
		if err := stageOutboxHistory(ctx, db, mv); err != nil {
			return results, mv, err
		}
	}
	r, err := p.Up(ctx)
	results = append(results, r...)
	if err != nil {
		return results, mv, err
	}
	return results, mv, unstageOutboxHistory(ctx, db, mv)
}

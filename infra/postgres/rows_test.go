package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// The updates at commit of several tasks and their operations in one workspace's
// transaction reach the server as one statement (the tasks' rows and the operations' rows,
// merged), and write every row as one update each would: columns set, NULLs kept NULL, the
// columns not updated untouched.
func TestUpdatesAtCommitOfManyRowsAreOneStatement(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws := uuid.New()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var seeded []domain.StoreVerification
	for range 3 {
		_, _, task := seedVerification(ctx, t, db, ws, now)
		seeded = append(seeded, task)
	}
	rec := &batchRecorder{}
	pool := tracedPool(ctx, t, db, 2, rec)
	ops, tasks := postgres.NewOperations(), postgres.NewStoreVerifications()

	later := now.Add(time.Second)
	require.NoError(t, postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
		for i, s := range seeded {
			task, err := tasks.UpdateAtCommit(port.LockingOperation(ctx), s.ID, func(v *domain.StoreVerification) error {
				if i == 1 {
					valid := true
					v.Valid = &valid
				}
				return v.Start(later)
			})
			if err != nil {
				return err
			}
			if _, err := ops.UpdateAtCommit(ctx, task.OperationID, func(o *domain.Operation) error {
				_, err := o.Start(later)
				return err
			}); err != nil {
				return err
			}
		}
		return nil
	}))
	var writes []string
	for _, sql := range rec.stmts {
		if strings.HasPrefix(sql, "WITH") || strings.HasPrefix(sql, "UPDATE") {
			writes = append(writes, sql)
		}
	}
	require.Len(t, writes, 1, "one statement for the six rows")
	require.Contains(t, writes[0], "UPDATE store_verifications AS x")
	require.Contains(t, writes[0], "UPDATE operations AS x")

	require.NoError(t, postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
		for i, s := range seeded {
			got, err := tasks.Get(ctx, s.ID)
			require.NoError(t, err)
			want := s
			require.NoError(t, want.Start(later))
			if i == 1 {
				valid := true
				want.Valid = &valid
			}
			got.CreatedAt, got.UpdatedAt = got.CreatedAt.UTC(), got.UpdatedAt.UTC()
			require.Equal(t, want, got)
			op, err := ops.Get(ctx, s.OperationID)
			require.NoError(t, err)
			require.Equal(t, domain.OperationRunning, op.Status)
			require.Equal(t, 2, op.Version)
			require.Nil(t, op.Result, "a NULL stays NULL")
			require.Equal(t, ws, op.WorkspaceID)
		}
		return nil
	}))
	var nulls int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM operations WHERE workspace_id = $1 AND created_by IS NULL AND result IS NULL`, ws).Scan(&nulls))
	require.Equal(t, 3, nulls, "NULLs written as NULL")
}

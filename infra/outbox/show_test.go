package outbox

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// The operators' show of a dispatched event reads a few pages of the log, not every event
// of its workspace still there: the buffers its plan touches stay bounded with 20,000 of the
// workspace's events in the log.
func TestShowDispatchedEventDoesNotScanTheWorkspacesLog(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ws := createWorkspace(t, db)
	ids := bulkInsert(t, db, []uuid.UUID{ws}, 20000)
	dispatchNow(t, db, ids...)
	_, err := db.Owner.Exec(ctx, `ANALYZE outbox_dispatched`)
	require.NoError(t, err)

	op := db.OperatorPool(t)
	ops := NewOps(op)
	e, err := ops.Show(ctx, ws, ids[12345])
	require.NoError(t, err)
	require.Equal(t, StatusDispatched, e.Status)

	var plan []struct {
		Plan struct {
			SharedHit  int64 `json:"Shared Hit Blocks"`
			SharedRead int64 `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	require.NoError(t, postgres.InTx(ctx, op, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
		var raw []byte
		if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+showQuery, ws, ids[12345]).Scan(&raw); err != nil {
			return err
		}
		return json.Unmarshal(raw, &plan)
	}))
	require.Len(t, plan, 1)
	blocks := plan[0].Plan.SharedHit + plan[0].Plan.SharedRead
	t.Logf("show of a dispatched event among 20,000 of its workspace's: %d buffers", blocks)
	require.Less(t, blocks, int64(60), "show reads the workspace's log instead of probing by id")
}

package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Transactor implements port.Transactor over a pool.
type Transactor struct {
	Pool *pgxpool.Pool
}

// InTx runs fn in one RLS transaction (see InTx).
func (t Transactor) InTx(ctx context.Context, workspaceID, userID uuid.UUID, fn func(ctx context.Context) error) error {
	return InTx(ctx, t.Pool, Scope{WorkspaceID: workspaceID, UserID: userID}, func(ctx context.Context, _ pgx.Tx) error {
		return fn(ctx)
	})
}

// mustTx returns the transaction of ctx, or an error naming the operation: repositories
// never fall back to the pool.
func mustTx(ctx context.Context, op string) (pgx.Tx, Scope, error) {
	tx, scope, err := TxFromContext(ctx)
	if err != nil {
		return nil, Scope{}, fmt.Errorf("%s: %w", op, err)
	}
	return tx, scope, nil
}

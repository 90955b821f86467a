package commandstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/infra/postgres"
)

type principalKey struct{}

// withPrincipal marks ctx as running a command of integration id.
func withPrincipal(ctx context.Context, id uuid.UUID) context.Context {
	return context.WithValue(ctx, principalKey{}, id)
}

// Guard is the bus middleware that closes the window between a command's authentication and
// its transaction: for a command the consumer runs (its context names the integration), it
// locks the integration's row (FOR SHARE) in the command's transaction and refuses the
// command with COMMAND_UNAUTHENTICATED unless the integration is live and is the actor. A
// revocation (which locks the row FOR UPDATE) therefore waits for the commands running, and
// no command of the integration runs after it committed; a command delivered again after a
// revocation is refused, not replayed. Any other invocation goes straight to next. It must
// come after postgres.TxMiddleware and before the idempotency middleware.
func Guard() bus.Middleware {
	return func(ctx context.Context, inv bus.Invocation, next bus.Next) (bus.Outcome, error) {
		id, ok := ctx.Value(principalKey{}).(uuid.UUID)
		if !ok {
			return next(ctx)
		}
		tx, _, err := postgres.TxFromContext(ctx)
		if err != nil {
			return bus.Outcome{}, fmt.Errorf("commandstream.Guard %s: must run inside the RLS transaction: %w", inv.Name, err)
		}
		var live bool
		err = tx.QueryRow(ctx, `SELECT revoked_at IS NULL FROM integrations WHERE id = $1 AND user_id = $2 FOR SHARE`,
			id, inv.Actor.UserID).Scan(&live)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !live) {
			return bus.Outcome{}, ErrUnauthenticated.WithMessage("the integration is revoked")
		}
		if err != nil {
			return bus.Outcome{}, fmt.Errorf("commandstream.Guard %s: %w", inv.Name, postgres.TranslateError(err))
		}
		return next(ctx)
	}
}

type refusalKey struct{}

// withRefusal marks ctx's command as refused with err unless its idempotency record answers it.
func withRefusal(ctx context.Context, err error) context.Context {
	return context.WithValue(ctx, refusalKey{}, err)
}

// Expiry is the bus middleware that refuses a command the consumer found expired
// (COMMAND_EXPIRED) once the idempotency middleware has looked its record up: a command that
// ran and is delivered again is answered from its record; any other is refused, and the
// record claimed for it rolls back with the transaction. It must come after the idempotency
// middleware. Any other invocation goes straight to next.
func Expiry() bus.Middleware {
	return func(ctx context.Context, inv bus.Invocation, next bus.Next) (bus.Outcome, error) {
		if err, ok := ctx.Value(refusalKey{}).(error); ok {
			return bus.Outcome{}, err
		}
		return next(ctx)
	}
}

package commandstream

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/testwait"
)

type guardCmd struct{}

func (guardCmd) CommandName() string { return "GuardTest" }

// The guard, in the command's transaction as app_user: a command of a live integration runs,
// one of a revoked integration or run as another user is refused, an HTTP command passes,
// and a revocation waits for the integration's command in progress.
func TestGuardChecksTheIntegrationInTheTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ws, user, integ := uuid.New(), uuid.New(), uuid.New()
	_, err := db.Owner.Exec(ctx, `
		WITH w AS (INSERT INTO workspaces (id, name) VALUES ($1, 'ws')),
		     u AS (INSERT INTO users (id, kind) VALUES ($2, 'integration'))
		SELECT 1`, ws, user)
	require.NoError(t, err)
	_, err = db.Owner.Exec(ctx, `INSERT INTO integrations (id, workspace_id, user_id, name, secret_sealed, secret_key_id)
		VALUES ($1, $2, $3, 'ERP', '\x00', 'k')`, integ, ws, user)
	require.NoError(t, err)

	b := bus.New(postgres.TxMiddleware(db.App), Guard())
	ran := 0
	started, release := make(chan struct{}, 1), make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // a failure below must not leave the command holding its connection
	block := false
	h := bus.HandlerFunc[guardCmd, int](func(context.Context, guardCmd) (int, error) {
		ran++
		if block {
			started <- struct{}{}
			<-release
		}
		return ran, nil
	})
	run := func(ctx context.Context, actor uuid.UUID) error {
		_, err := bus.Execute(ctx, b, h, bus.Request[guardCmd]{Command: guardCmd{}, Actor: bus.Actor{WorkspaceID: ws, UserID: actor}})
		return err
	}

	require.NoError(t, run(withPrincipal(ctx, integ), user))
	require.ErrorIs(t, run(withPrincipal(ctx, integ), uuid.New()), ErrUnauthenticated, "another actor")
	require.ErrorIs(t, run(withPrincipal(ctx, uuid.New()), user), ErrUnauthenticated, "another integration")
	require.NoError(t, run(ctx, uuid.New()), "not a message: the guard lets it through")
	require.Equal(t, 2, ran)

	// A revocation waits for the command in progress, and the next command is refused.
	block = true
	errc := make(chan error, 1)
	go func() { errc <- run(withPrincipal(ctx, integ), user) }()
	testwait.Recv(t, started, "the command in progress")
	revoked := make(chan error, 1)
	go func() {
		revoked <- postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
			_, err := postgres.NewIntegrations().Revoke(ctx, integ, time.Now())
			return err
		})
	}()
	select {
	case err := <-revoked:
		t.Fatalf("the revocation did not wait for the command in progress: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	unblock()
	require.NoError(t, testwait.Recv(t, errc, "the command"))
	require.NoError(t, testwait.Recv(t, revoked, "the revocation"))
	block = false
	require.ErrorIs(t, run(withPrincipal(ctx, integ), user), ErrUnauthenticated)
	require.Equal(t, 3, ran)
}

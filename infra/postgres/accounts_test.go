package postgres_test

import (
	"context"
	"crypto/sha256"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// seedAccount creates, as the owner, a user with one refresh-token family holding one live
// token, and returns the user id and the token's hash.
func seedAccount(t *testing.T, db *pgtest.DB) (user uuid.UUID, tokenHash []byte) {
	t.Helper()
	user = uuid.New()
	sum := sha256.Sum256([]byte(user.String()))
	_, err := db.Owner.Exec(context.Background(), `
		WITH u AS (INSERT INTO users (id, email, password_hash) VALUES ($1, $2, 'hash-of-' || $2) RETURNING id),
		     f AS (INSERT INTO refresh_token_families (id, user_id) SELECT gen_random_uuid(), id FROM u RETURNING id, user_id)
		INSERT INTO refresh_tokens (token_hash, family_id, user_id, expires_at) SELECT $3, id, user_id, now() + interval '1 day' FROM f`,
		user, user.String()+"@example.test", sum[:])
	require.NoError(t, err)
	return user, sum[:]
}

// Accounts and sessions are scoped to one user: without a user a transaction sees and
// changes nothing of them, and with one it sees and changes only that user's rows.
func TestRLSAccountTablesScopedToTheirUser(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	a, _ := seedAccount(t, db)
	b, _ := seedAccount(t, db)
	userCol := map[string]string{"users": "id", "refresh_token_families": "user_id", "refresh_tokens": "user_id"}

	for _, table := range accountTables {
		col, ident := userCol[table], pgx.Identifier{table}.Sanitize()
		err := postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
			var n int
			require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM "+ident).Scan(&n))
			require.Zero(t, n, "%s: rows visible without a user", table)
			tag, err := tx.Exec(ctx, "UPDATE "+ident+" SET "+col+" = "+col)
			require.NoError(t, err)
			require.Zero(t, tag.RowsAffected(), "%s: update without a user", table)
			tag, err = tx.Exec(ctx, "DELETE FROM "+ident)
			require.NoError(t, err)
			require.Zero(t, tag.RowsAffected(), "%s: delete without a user", table)
			return nil
		})
		require.NoError(t, err, table)

		err = postgres.InTx(ctx, db.App, postgres.Scope{UserID: a}, func(ctx context.Context, tx pgx.Tx) error {
			var own, other int
			require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FILTER (WHERE "+col+" = $1), count(*) FILTER (WHERE "+col+" <> $1) FROM "+ident, a).
				Scan(&own, &other))
			require.Equal(t, 1, own, "%s: own rows", table)
			require.Zero(t, other, "%s: another user's rows visible", table)
			tag, err := tx.Exec(ctx, "DELETE FROM "+ident+" WHERE "+col+" = $1", b)
			require.NoError(t, err)
			require.Zero(t, tag.RowsAffected(), "%s: deleted another user's rows", table)
			return nil
		})
		require.NoError(t, err, table)
	}

	// Writing a row for another user is refused.
	err := postgres.InTx(ctx, db.App, postgres.Scope{UserID: a}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO refresh_token_families (id, user_id) VALUES (gen_random_uuid(), $1)`, b)
		return postgres.TranslateError(err)
	})
	require.ErrorIs(t, err, domain.ErrForbidden)
	err = postgres.InTx(ctx, db.App, postgres.Scope{UserID: a}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO users (id, email, password_hash) VALUES (gen_random_uuid(), 'x@example.test', 'x')`)
		return postgres.TranslateError(err)
	})
	require.ErrorIs(t, err, domain.ErrForbidden)
}

// The auth lookups return only the row asked for, and only the columns the flow needs.
func TestAuthFunctionsAreNarrow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	a, _ := seedAccount(t, db)
	seedAccount(t, db)

	rows, err := db.App.Query(ctx, `SELECT * FROM auth_user_by_email($1)`, a.String()+"@EXAMPLE.test")
	require.NoError(t, err)
	var cols []string
	for _, f := range rows.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	rows.Close()
	require.Equal(t, []string{"id", "email", "password_hash", "created_at"}, cols)

	var n int
	var id uuid.UUID
	require.NoError(t, db.App.QueryRow(ctx, `SELECT id FROM auth_user_by_email($1)`, a.String()+"@EXAMPLE.test").Scan(&id))
	require.Equal(t, a, id)
	require.NoError(t, db.App.QueryRow(ctx, `SELECT count(*) FROM auth_user_by_email('%')`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, db.App.QueryRow(ctx, `SELECT count(*) FROM auth_use_refresh_token('\x00', now())`).Scan(&n))
	require.Zero(t, n)
}

// The auth flows as the service runs them, as app_user: register under the new user's
// scope; login and refresh start without a user, and act as the user found from there on.
func TestAccountsFlowsUnderRLS(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	acc := postgres.Accounts{}
	now := time.Now()
	hash := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

	// Register.
	user := domain.User{ID: uuid.New(), Email: "ada@example.test", PasswordHash: "h", CreatedAt: now}
	ws := domain.Workspace{ID: uuid.New(), Name: "Acme", CreatedAt: now}
	var family uuid.UUID
	err := postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws.ID, UserID: user.ID}, func(ctx context.Context, _ pgx.Tx) error {
		require.NoError(t, acc.CreateUser(ctx, user))
		require.NoError(t, acc.CreateWorkspace(ctx, ws, user.ID))
		var err error
		family, err = acc.NewFamily(ctx, user.ID)
		require.NoError(t, err)
		require.NoError(t, acc.Insert(ctx, hash("expired"), family, user.ID, now.Add(-time.Second)))
		return acc.Insert(ctx, hash("t1"), family, user.ID, now.Add(time.Hour))
	})
	require.NoError(t, err)
	other := uuid.New()
	err = postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: uuid.New(), UserID: other}, func(ctx context.Context, _ pgx.Tx) error {
		return acc.CreateUser(ctx, domain.User{ID: other, Email: "ADA@example.test", PasswordHash: "h", CreatedAt: now})
	})
	require.ErrorIs(t, err, domain.ErrEmailTaken)

	// Login.
	err = postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, _ pgx.Tx) error {
		_, err := acc.UserByEmail(ctx, "nobody@example.test")
		require.ErrorIs(t, err, domain.ErrNotFound)
		got, err := acc.UserByEmail(ctx, "ada@example.test")
		require.NoError(t, err)
		require.Equal(t, user.ID, got.ID)
		require.Equal(t, "h", got.PasswordHash)
		f, err := acc.NewFamily(ctx, got.ID)
		require.NoError(t, err)
		return acc.Insert(ctx, hash("login"), f, got.ID, now.Add(time.Hour))
	})
	require.NoError(t, err)
	// A transaction of one user never turns into another's.
	err = postgres.InTx(ctx, db.App, postgres.Scope{UserID: uuid.New()}, func(ctx context.Context, _ pgx.Tx) error {
		_, err := acc.UserByEmail(ctx, "ada@example.test")
		return err
	})
	require.Error(t, err)

	// Refresh: first use rotates, a second use is reported and revokes the family.
	use := func(token string) (uuid.UUID, uuid.UUID, port.RefreshUse) {
		var f, u uuid.UUID
		var out port.RefreshUse
		err := postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, _ pgx.Tx) error {
			var err error
			f, u, out, err = acc.Use(ctx, hash(token), now)
			if err != nil || out == port.RefreshInvalid {
				return err
			}
			if out == port.RefreshReused {
				return acc.RevokeFamily(ctx, f, "reused")
			}
			return acc.Insert(ctx, hash(token+"'"), f, u, now.Add(time.Hour))
		})
		require.NoError(t, err)
		return f, u, out
	}
	_, _, out := use("expired")
	require.Equal(t, port.RefreshInvalid, out)
	f, u, out := use("t1")
	require.Equal(t, port.RefreshOK, out)
	require.Equal(t, family, f)
	require.Equal(t, user.ID, u)
	_, _, out = use("t1")
	require.Equal(t, port.RefreshReused, out)
	_, _, out = use("t1'")
	require.Equal(t, port.RefreshInvalid, out, "the family is revoked")
	_, _, out = use("unknown")
	require.Equal(t, port.RefreshInvalid, out)
	_, _, out = use("login")
	require.Equal(t, port.RefreshOK, out, "another family is unaffected")

	var revoked int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM refresh_token_families WHERE revoked_at IS NOT NULL AND id = $1`, family).Scan(&revoked))
	require.Equal(t, 1, revoked)
}

// Concurrent uses of one refresh token: exactly one is the first use.
func TestUseRefreshTokenConcurrently(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, hash := seedAccount(t, db)

	const n = 8
	outcomes := make(chan port.RefreshUse, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			err := postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, _ pgx.Tx) error {
				_, _, out, err := postgres.Accounts{}.Use(ctx, hash, time.Now())
				outcomes <- out
				return err
			})
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	close(outcomes)
	count := map[port.RefreshUse]int{}
	for o := range outcomes {
		count[o]++
	}
	require.Equal(t, map[port.RefreshUse]int{port.RefreshOK: 1, port.RefreshReused: n - 1}, count)
}

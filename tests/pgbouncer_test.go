package tests

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/internal/servicetest"
)

// TestPgBouncerTransactionPooling: with DATABASE_URL through PgBouncer in transaction pooling
// mode (DATABASE_POOL_MODE=transaction, the reconciler's session lock on DATABASE_SESSION_URL),
// store verification, a first publication and an AI task succeed end to end; a workspace sees
// only its rows through the pooler; no transaction-local setting outlives its transaction on a
// server session another client gets next; neither the service nor PgBouncer reports a
// prepared statement that does not exist.
func TestPgBouncerTransactionPooling(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PgBouncer and the service")
	}
	t.Parallel()
	bouncer := startPgBouncer(t)
	env := servicetest.StartAll(t, func(c *config.Config) {
		c.DatabaseSessionURL = c.DatabaseURL
		c.DatabaseURL = bouncer.url(t, c.DatabaseURL)
		c.DatabasePoolMode = config.PoolModeTransaction
		c.ReconcileInterval = 200 * time.Millisecond // the session lock is taken often
	})

	acct := env.Register("bouncer@example.com")
	storeID := seedVerifiedStore(t, env, acct, "bouncer")
	productID := seedProduct(t, env, acct)
	pub := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/products/" + productID + "/publications",
		Token: acct.AccessToken, Header: seedKey(), Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	op := env.WaitOperation(acct, seedField(t, pub, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	ai := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/ai-tasks", Token: acct.AccessToken,
		Header: seedKey(), Body: map[string]any{"kind": "text", "product_id": productID, "input": map[string]any{"prompt": "a short description"}}})
	require.Equal(t, http.StatusAccepted, ai.Status, "%s", ai.Body)
	op = env.WaitOperation(acct, seedField(t, ai, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)

	// Another workspace, through the same pooler, sees none of the first one's rows.
	other := env.Register("bouncer-other@example.com")
	otherProduct := seedProduct(t, env, other)
	got := env.Do(servicetest.Request{Method: "GET", Path: seedWS(other) + "/products/" + productID, Token: other.AccessToken})
	assert.Equal(t, http.StatusNotFound, got.Status, "%s", got.Body)
	got = env.Do(servicetest.Request{Method: "GET", Path: seedWS(acct) + "/products/" + otherProduct, Token: acct.AccessToken})
	assert.Equal(t, http.StatusNotFound, got.Status, "%s", got.Body)

	// Straight through the pooler as app_user: scoped transactions see their workspace's rows
	// only, and unscoped statements between them (on whichever server session PgBouncer
	// hands out, few of them for many clients) see no setting left by an earlier transaction.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: env.Config.DatabaseURL, MaxConns: 8, TransactionPooling: true})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				acc := acct
				if (g+i)%2 == 1 {
					acc = other
				}
				ws := uuid.MustParse(acc.WorkspaceID)
				var products, foreign int
				err := postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
					return tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE workspace_id <> $1) FROM products`, ws).Scan(&products, &foreign)
				})
				if err != nil {
					errs <- err
					return
				}
				if products != 1 || foreign != 0 {
					errs <- fmt.Errorf("workspace %s saw %d products, %d of another workspace", ws, products, foreign)
					return
				}
				var setting *string
				var visible int
				if err := pool.QueryRow(ctx, `SELECT current_setting('app.workspace_id', true), (SELECT count(*) FROM products)`).Scan(&setting, &visible); err != nil {
					errs <- err
					return
				}
				if (setting != nil && *setting != "") || visible != 0 {
					errs <- fmt.Errorf("outside a transaction: app.workspace_id %v, %d products visible", *setting, visible)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	assert.NotContains(t, env.Logs(), "prepared statement")
	assert.NotContains(t, bouncer.log(), "prepared statement")
}

// pgBouncer is a PgBouncer process of one test.
type pgBouncer struct {
	port int
	out  *syncBuf
}

// url returns direct (a PostgreSQL URL) pointed at the pooler instead.
func (b pgBouncer) url(t *testing.T, direct string) string {
	u, err := url.Parse(direct)
	require.NoError(t, err)
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	return u.String()
}

func (b pgBouncer) log() string { return b.out.String() }

// startPgBouncer starts Debian's pgbouncer on a free port with a configuration of its own
// under t.TempDir() (transaction pooling, trust, every database of the test PostgreSQL at
// 127.0.0.1:5432, five server sessions per database and user): it skips without pgbouncer,
// except in CI, and stops it when t ends. PgBouncer refuses to run as root: as root it runs
// as the postgres user.
func startPgBouncer(t *testing.T) pgBouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
		if _, serr := os.Stat(bin); serr != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("pgbouncer not found, and CI requires the PgBouncer test: run `make pgbouncer`")
			}
			t.Skip("pgbouncer not found: the PgBouncer test is skipped here (it runs in CI; `make pgbouncer` installs it)")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // readable by the postgres user
		require.NoError(t, os.Chmod(d, 0o755))
	}
	users := filepath.Join(dir, "users.txt")
	require.NoError(t, os.WriteFile(users, []byte(`"app_user" ""`+"\n"+`"root" ""`+"\n"), 0o644))
	ini := filepath.Join(dir, "pgbouncer.ini")
	require.NoError(t, os.WriteFile(ini, []byte(fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = 5
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
`, port, users)), 0o644))

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, ini)
	out := &syncBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root, PgBouncer needs the postgres user")
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not listen on %d: %s", port, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return pgBouncer{port: port, out: out}
}

// syncBuf is a bytes.Buffer safe for a process's output and the test's reads.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

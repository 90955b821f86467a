// Package pgtest gives each test its own migrated PostgreSQL database, so tests can commit,
// LISTEN and run in parallel. Databases are copied from a template migrated once per set of
// migrations (named by their hash), then dropped when the test ends.
//
// The server is the one named by TEST_DATABASE_URL (a superuser; default
// postgres://root@127.0.0.1:5432/postgres). Tests connect as app_user for everything RLS
// applies to; the owner pool exists only for setup and for assertions that must see every row.
//
// Connections are bounded: a test's App pool holds at most AppConns, its Owner pool at most
// OwnerConns, and New itself uses one administrator connection at a time. A test that needs
// more concurrency than AppConns queues on the pool. When the test ends its pools are closed,
// waiting at most CloseWait for connections still in use (a goroutine the test left blocked):
// then the test fails saying so, and the database is dropped anyway, which ends those
// sessions. A test can therefore not hang in its clean-up.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/sql"
)

// DefaultAdminURL is used when TEST_DATABASE_URL is unset.
const DefaultAdminURL = "postgres://root@127.0.0.1:5432/postgres?sslmode=disable"

// AppRole is the service's non-owner role, created by the migrations.
const AppRole = "app_user"

// OperatorRole is the operators' role, created by the migrations.
const OperatorRole = "listing_operator"

// Bounds of the pools New opens for each test (see the package documentation).
const (
	AppConns   = 8
	OwnerConns = 3
)

// CloseWait bounds how long a test's clean-up waits for its pools' connections to be
// released before it drops the database under them.
const CloseWait = 10 * time.Second

// DB is one isolated, migrated database.
type DB struct {
	Name string
	// AppURL connects as app_user: RLS applies.
	AppURL string
	// OperatorURL connects as listing_operator (see OperatorPool).
	OperatorURL string
	// OwnerURL connects as the administrator: RLS does not apply. Setup and assertions only.
	OwnerURL string
	// App is a pool on AppURL.
	App *pgxpool.Pool
	// Owner is a pool on OwnerURL.
	Owner *pgxpool.Pool
}

// RecordPath is the file, relative to the module's root (the checkout), to which New appends
// the name of every database it creates and of every template it builds, before creating
// it: `make clean` drops the databases of this record, and so leaves alone another
// checkout's on the same server.
const RecordPath = "var/pgtest-created"

// Record kinds, the first word of a line of RecordPath.
const (
	RecordTest     = "test"
	RecordTemplate = "template"
)

// record appends "kind name" to the checkout's RecordPath. A checkout that cannot be found
// (no go.mod above the working directory) or written records nothing: the database is
// still dropped when the test ends, as always.
func record(kind, name string) {
	root, err := moduleRoot()
	if err != nil {
		return
	}
	path := filepath.Join(root, RecordPath)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(kind + " " + name + "\n") // one write with O_APPEND: lines do not interleave
}

// moduleRoot is the nearest directory above the working directory that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("pgtest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// New creates an isolated database for t, migrated to the latest version, and drops it when
// t ends. It skips t under -short.
func New(t testing.TB) *DB {
	t.Helper()
	if testing.Short() {
		t.Skip("pgtest: database test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admin := AdminURL()
	tpl, err := ensureTemplate(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: template: %v", err)
	}
	name := "listing_test_" + randomHex(6)
	record(RecordTest, name)
	if err := withAdmin(ctx, admin, func(conn *pgx.Conn) error {
		return retryInUse(ctx, func() error {
			_, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
				pgx.Identifier{name}.Sanitize(), pgx.Identifier{tpl}.Sanitize()))
			return err
		})
	}); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	db := &DB{Name: name, OwnerURL: withDatabase(admin, name, ""), AppURL: withDatabase(admin, name, AppRole),
		OperatorURL: withDatabase(admin, name, OperatorRole)}
	t.Cleanup(func() {
		closePool(t, db.App, "app pool")
		closePool(t, db.Owner, "owner pool")
		dropDatabase(admin, name)
	})
	if db.App, err = postgres.Connect(ctx, postgres.PoolConfig{URL: db.AppURL, MaxConns: AppConns}); err != nil {
		t.Fatalf("pgtest: app pool: %v", err)
	}
	if db.Owner, err = postgres.Connect(ctx, postgres.PoolConfig{URL: db.OwnerURL, MaxConns: OwnerConns}); err != nil {
		t.Fatalf("pgtest: owner pool: %v", err)
	}
	return db
}

// SingleConnApp opens a pool of one connection on AppURL, closed when t ends (before the
// database is dropped): every call through it uses the same session, so a test can see what
// a transaction left on its connection.
func (db *DB) SingleConnApp(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return openPool(t, db.AppURL, 1, "single-connection app pool")
}

// OperatorPool opens a pool on OperatorURL, closed when t ends (before the database is
// dropped).
func (db *DB) OperatorPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return openPool(t, db.OperatorURL, 4, "operator pool")
}

func openPool(t testing.TB, url string, conns int32, what string) *pgxpool.Pool {
	t.Helper()
	pool, err := postgres.Connect(context.Background(), postgres.PoolConfig{URL: url, MaxConns: conns})
	if err != nil {
		t.Fatalf("pgtest: %s: %v", what, err)
	}
	t.Cleanup(func() { closePool(t, pool, what) })
	return pool
}

// closePool closes pool, waiting at most CloseWait for the connections in use. A connection
// still in use after that belongs to a goroutine the test left blocked: the test fails with
// how many, and the clean-up goes on (dropping the database ends those sessions).
func closePool(t testing.TB, pool *pgxpool.Pool, what string) {
	if pool == nil {
		return
	}
	closed := make(chan struct{})
	go func() {
		pool.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(CloseWait):
		t.Errorf("pgtest: %s: %d connection(s) still in use %s after the test ended: something the test "+
			"started is blocked (release it in t.Cleanup or bound it with a context); dropping the database under it",
			what, pool.Stat().AcquiredConns(), CloseWait)
	}
}

// AdminURL is the administrator URL of the test server.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// withDatabase is postgres.WithDatabase for the test server's URL: a URL that does not parse
// is a broken test set-up.
func withDatabase(base, database, user string) string {
	u, err := postgres.WithDatabase(base, database, user)
	if err != nil {
		panic("pgtest: bad TEST_DATABASE_URL: " + err.Error())
	}
	return u
}

func withAdmin(ctx context.Context, admin string, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return fn(conn)
}

// templateLockID serializes template creation across test processes.
const templateLockID = 0x6c697374696e67 // "listing"

// ensureTemplate returns the name of a template database migrated with the current
// migrations, creating it under an advisory lock when missing.
func ensureTemplate(ctx context.Context, admin string) (string, error) {
	hash, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "listing_tpl_" + hash
	err = withAdmin(ctx, admin, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockID); err != nil {
			return err
		}
		defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLockID)

		var ready bool
		err := conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&ready)
		if err == nil && ready {
			return nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Missing or half-made: build it again. Templates of other migration sets are left
		// alone: another checkout's tests may be using theirs right now
		// (`make clean-testdb CLEAN_FLAGS=-shared` removes them).
		if err == nil {
			if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
				return err
			}
		}
		record(RecordTemplate, name)
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return err
		}
		if _, err := postgres.Migrate(ctx, withDatabase(admin, name, ""), false); err != nil {
			return err
		}
		_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" IS_TEMPLATE true")
		return err
	})
	return name, err
}

func migrationsHash() (string, error) {
	entries, err := fs.ReadDir(sql.Migrations, ".")
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(sql.Migrations, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// retryInUse retries fn while the template is briefly in use by another session (55006).
func retryInUse(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dropDatabase drops the test database name (its sessions ended by force), within a minute.
func dropDatabase(admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = withAdmin(ctx, admin, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return err
	})
}

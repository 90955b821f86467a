package pgtest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	migrations "github.com/listingkit/listing/sql"
)

// Migration is a database of its own for a test of a migration: created empty, brought to a
// version of the migrations by MigrateTo, seeded by the test as that version's schema was,
// then migrated on with UpTo or Up. It is dropped when the test ends.
type Migration struct {
	// URL connects as the administrator (RLS does not apply): seeding and assertions.
	URL      string
	db       *sql.DB
	provider *goose.Provider
}

// MigrateTo creates an empty database for t and applies the migrations up to and including
// version. It skips t under -short.
func MigrateTo(t testing.TB, version int64) *Migration {
	t.Helper()
	if testing.Short() {
		t.Skip("pgtest: database test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := AdminURL()
	name := "listing_test_mig_" + randomHex(6)
	record(RecordTest, name)
	if err := withAdmin(ctx, admin, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		return err
	}); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	m := &Migration{URL: withDatabase(admin, name, "")}
	t.Cleanup(func() {
		if m.db != nil {
			_ = m.db.Close()
		}
		dropDatabase(admin, name)
	})
	cfg, err := pgx.ParseConfig(m.URL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	m.db = stdlib.OpenDB(*cfg)
	if m.provider, err = goose.NewProvider(goose.DialectPostgres, m.db, migrations.Migrations); err != nil {
		t.Fatalf("pgtest: migrations: %v", err)
	}
	m.UpTo(t, version)
	return m
}

// UpTo applies the migrations up to and including version and returns how long they took
// (a migration's locks are held that long).
func (m *Migration) UpTo(t testing.TB, version int64) time.Duration {
	t.Helper()
	ctx, cancel := migrationContext()
	defer cancel()
	start := time.Now()
	if _, err := m.provider.UpTo(ctx, version); err != nil {
		t.Fatalf("pgtest: migrate to %d: %v", version, err)
	}
	return time.Since(start)
}

// Up applies the rest of the migrations.
func (m *Migration) Up(t testing.TB) {
	t.Helper()
	ctx, cancel := migrationContext()
	defer cancel()
	if _, err := m.provider.Up(ctx); err != nil {
		t.Fatalf("pgtest: migrate up: %v", err)
	}
}

// DownTo rolls the migrations back to version (0: all of them).
func (m *Migration) DownTo(t testing.TB, version int64) {
	t.Helper()
	ctx, cancel := migrationContext()
	defer cancel()
	if _, err := m.provider.DownTo(ctx, version); err != nil {
		t.Fatalf("pgtest: migrate down to %d: %v", version, err)
	}
}

// Conn opens a connection as the administrator, closed when t ends.
func (m *Migration) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, m.URL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// migrationContext bounds a migration of a test database: one stuck on a lock fails the test
// in minutes, not at go test's -timeout.
func migrationContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Minute)
}

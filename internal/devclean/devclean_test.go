package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/redistest"
)

func randomHex(t *testing.T) string {
	b := make([]byte, 4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

func databaseExists(t *testing.T, conn *pgx.Conn, name string) bool {
	var ok bool
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok))
	return ok
}

// TestCleanDatabases drops the named database and those of the prefix, templates included,
// leaves the one a session uses and every other database.
func TestCleanDatabases(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx := context.Background()
	admin, _, err := maintenanceURL(pgtest.AdminURL(), "TEST_DATABASE_URL")
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })

	h := randomHex(t)
	exact, idle, tpl, busy := "devclean_"+h+"_dev", "devclean_"+h+"_t_idle", "devclean_"+h+"_t_tpl", "devclean_"+h+"_t_busy"
	other := "devclean_" + h + "_other"
	all := []string{exact, idle, tpl, busy, other}
	for _, n := range all {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{n}.Sanitize())
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, n := range all {
			_, _ = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{n}.Sanitize()+" IS_TEMPLATE false")
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
		}
	})
	_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{tpl}.Sanitize()+" IS_TEMPLATE true")
	require.NoError(t, err)
	u := strings.Replace(admin, "/postgres", "/"+busy, 1)
	session, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	t.Cleanup(func() { _ = session.Close(ctx) })

	r := Clean(ctx, Plan{Databases: []DatabaseSet{{AdminURL: admin, Names: []string{exact, "postgres"},
		Prefixes: []string{"devclean_" + h + "_t_"}}}})
	require.Empty(t, r.Errs)
	require.ElementsMatch(t, []string{"database " + exact, "database " + idle, "database " + tpl}, r.Removed)
	require.Len(t, r.Left, 2)
	require.Contains(t, r.Left[0], "postgres")
	require.Contains(t, r.Left[1], busy)
	require.Contains(t, r.Left[1], "1 session(s)")

	require.False(t, databaseExists(t, conn, exact))
	require.False(t, databaseExists(t, conn, idle))
	require.False(t, databaseExists(t, conn, tpl))
	require.True(t, databaseExists(t, conn, busy), "a database in use is left")
	require.True(t, databaseExists(t, conn, other), "a database outside the plan is left")
	require.True(t, databaseExists(t, conn, "postgres"))

	r = Clean(ctx, Plan{Databases: []DatabaseSet{{AdminURL: admin, Prefixes: []string{""}}}})
	require.Len(t, r.Errs, 1, "an empty prefix would match every database")
}

// TestCleanKeys deletes the keys under each prefix (glob characters taken literally) and no
// other key.
func TestCleanKeys(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.NewClient(t)

	h := randomHex(t)
	p1, p2 := "dc"+h, "dc["+h+"]*"
	gone := []string{p1 + ":a", p1 + ":q:wait", p2 + ":x"}
	kept := []string{p1 + "x:a", p1, "dc" + h[:1] + ":z", "dc" + h + "]:y"}
	for _, k := range append(append([]string{}, gone...), kept...) {
		require.NoError(t, rdb.Set(ctx, k, "1", 0).Err())
	}
	t.Cleanup(func() { rdb.Del(ctx, append(gone, kept...)...) })

	r := Clean(ctx, Plan{Redis: rdb, KeyPrefixes: []string{p1, p2, ""}})
	require.Len(t, r.Errs, 1, "an empty prefix would match every key")
	require.Equal(t, []string{"2 Redis key(s) " + p1 + ":*", "1 Redis key(s) " + p2 + ":*"}, r.Removed)
	for _, k := range gone {
		require.Zero(t, rdb.Exists(ctx, k).Val(), k)
	}
	for _, k := range kept {
		require.Equal(t, int64(1), rdb.Exists(ctx, k).Val(), k)
	}
}

// TestCleanDirs removes directories inside the root (and the parents they leave empty) and
// nothing outside it, even through a symbolic link.
func TestCleanDirs(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	outside := t.TempDir()
	write := func(p string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	}
	write(filepath.Join(root, "var", "storage", "objects", "a.png"))
	write(filepath.Join(root, "bin", "app"))
	write(filepath.Join(root, "keep", "file"))
	write(filepath.Join(outside, "storage", "b.png"))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "link")))

	r := Clean(context.Background(), Plan{Root: root, Dirs: []string{
		"./var/storage", "bin", "absent",
		filepath.Join(outside, "storage"), "../" + filepath.Base(outside), ".", "link/storage",
	}})
	require.Empty(t, r.Errs)
	require.Equal(t, []string{"./var/storage", "bin"}, r.Removed)
	require.Len(t, r.Left, 4)
	for _, l := range r.Left {
		require.Contains(t, l, "checkout")
	}

	require.NoDirExists(t, filepath.Join(root, "var"), "var/ was left empty, so it goes")
	require.NoDirExists(t, filepath.Join(root, "bin"))
	require.FileExists(t, filepath.Join(root, "keep", "file"))
	require.FileExists(t, filepath.Join(outside, "storage", "b.png"))
	require.DirExists(t, root)
}

func TestSafetyChecks(t *testing.T) {
	for _, h := range []string{"127.0.0.1", "127.0.0.1:5432", "localhost", "[::1]:6379", "::1", "/var/run/postgresql", ""} {
		require.True(t, loopbackHost(h), h)
	}
	for _, h := range []string{"10.0.0.5", "db.example.com:5432", "0.0.0.0"} {
		require.False(t, loopbackHost(h), h)
	}
	_, _, err := maintenanceURL("postgres://root@db.example.com:5432/listing", "X")
	require.ErrorContains(t, err, "not on this machine")
	admin, db, err := maintenanceURL("postgres://root:pw@127.0.0.1:5433/mydb?sslmode=disable", "X")
	require.NoError(t, err)
	require.Equal(t, "mydb", db)
	require.Equal(t, "postgres://root:pw@127.0.0.1:5433/postgres?sslmode=disable", admin)

	t.Setenv("APP_ENV", "production")
	_, _, err = planFromEnv(map[string]bool{"files": true}, false, t.TempDir())
	require.ErrorContains(t, err, "production")
}

// TestCleanLeavesAnotherCheckoutsDatabasesAndKeys: by default make clean drops the test
// databases this checkout's record names and the keys of the prefixes it configured; another
// checkout's test database on the same server, the shared defaults (the listing database, the
// templates, the default key prefixes) stay unless -shared.
func TestCleanLeavesAnotherCheckoutsDatabasesAndKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx := context.Background()
	admin, _, err := maintenanceURL(pgtest.AdminURL(), "TEST_DATABASE_URL")
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	rdb := redistest.NewClient(t)

	h := randomHex(t)
	mine, theirs, tpl := "listing_test_dc"+h+"mine", "listing_test_dc"+h+"theirs", "listing_tpl_dc"+h
	for _, n := range []string{mine, theirs, tpl} {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{n}.Sanitize())
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, n := range []string{mine, theirs, tpl} {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
		}
	})
	// This checkout's record (as pgtest writes it) names its test database and template.
	root := t.TempDir()
	record := filepath.Join(root, pgtest.RecordPath)
	require.NoError(t, os.MkdirAll(filepath.Dir(record), 0o755))
	require.NoError(t, os.WriteFile(record, []byte("test "+mine+"\ntemplate "+tpl+"\n"), 0o644))

	// This checkout's own queue prefix; the stream prefix stays the shared default.
	prefix := "devclean-" + h
	t.Setenv("BULLMQ_PREFIX", prefix)
	t.Setenv("STREAM_PREFIX", "")
	t.Setenv("MIGRATE_DATABASE_URL", "")
	ours, shared := prefix+":q:wait", "listing:devclean-"+h+":probe"
	require.NoError(t, rdb.Set(ctx, ours, "1", 0).Err())
	require.NoError(t, rdb.Set(ctx, shared, "1", 0).Err())
	t.Cleanup(func() { rdb.Del(ctx, ours, shared) })

	plan, closeFn, err := planFromEnv(map[string]bool{"database": true, "testdbs": true, "redis": true}, false, root)
	require.NoError(t, err)
	t.Cleanup(closeFn)
	r := Clean(ctx, plan)
	require.Empty(t, r.Errs)
	require.ElementsMatch(t, []string{"database " + mine, "1 Redis key(s) " + prefix + ":*"}, r.Removed)
	left := strings.Join(r.Left, "\n")
	require.Contains(t, left, "database listing (the shared default")
	require.Contains(t, left, "1 template database(s)")
	require.Contains(t, left, "Redis keys listing:* (STREAM_PREFIX's shared default")

	require.False(t, databaseExists(t, conn, mine))
	require.True(t, databaseExists(t, conn, theirs), "another checkout's test database stays")
	require.True(t, databaseExists(t, conn, tpl), "a template stays without -shared")
	require.Zero(t, rdb.Exists(ctx, ours).Val())
	require.EqualValues(t, 1, rdb.Exists(ctx, shared).Val(), "keys under a shared default prefix stay")
	b, err := os.ReadFile(record)
	require.NoError(t, err)
	require.Equal(t, "template "+tpl+"\n", string(b), "the record keeps what still exists")
}

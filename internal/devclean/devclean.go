// Command devclean removes what `make run` and `make test` of this checkout left behind on a
// development machine; `make clean` runs it. What it removes, each named by the same
// configuration the service reads (infra/config, so an overridden variable is honoured):
//
//   - the development database of MIGRATE_DATABASE_URL, unless it is the shared default
//     `listing`;
//   - the test databases this checkout created, as recorded by infra/postgres/pgtest in
//     var/pgtest-created when it creates them (those of interrupted runs; a finished test
//     drops its own);
//   - the Redis keys under BULLMQ_PREFIX and STREAM_PREFIX, unless they are the shared
//     defaults (`bull`, `listing`);
//   - STORAGE_DIR (default ./var/storage), bin/ and tests/bullmqnode/node_modules.
//
// With -shared it also removes the shared defaults other checkouts on the machine use: the
// `listing` database, every test and template database (`listing_test_*`, `listing_tpl_*`)
// and the database of an interrupted `make demo` (`listing_demo_*`), and the keys under the
// default prefixes. It says what it removed and what it left, and why.
//
// It never removes what it cannot tell is the project's: it refuses to run when APP_ENV is
// production or when the database or Redis is not on a loopback address; it drops a database
// only when no session uses it (stop `make run` first; a test database in use belongs to a
// test running now) and reports the ones it left; it removes directories only inside the
// working directory (the checkout), so a STORAGE_DIR elsewhere is reported, not removed. The
// PostgreSQL roles (cluster-wide, shared by every database of the project) stay.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/redistest"
)

// Plan is what one run removes.
type Plan struct {
	// Databases are dropped, per server.
	Databases []DatabaseSet
	// Redis is the client of the keys below; nil skips them.
	Redis redis.UniversalClient
	// KeyPrefixes: every key "<prefix>:…" is deleted. An empty prefix is refused.
	KeyPrefixes []string
	// Root is the directory Dirs must lie in (the checkout), without symbolic links.
	Root string
	// Dirs are removed with everything in them, when they lie inside Root.
	Dirs []string
	// Skipped are what the plan leaves on purpose, reported as left.
	Skipped []string
}

// DatabaseSet names databases of one PostgreSQL server.
type DatabaseSet struct {
	// AdminURL connects to the server's maintenance database as a role that may drop them.
	AdminURL string
	// Names are dropped by exact name.
	Names []string
	// Prefixes: every database whose name starts with one of them is dropped.
	Prefixes []string
	// Record, when set, is the checkout's record of the databases it created
	// (pgtest.RecordPath): after the run it keeps only the names that still exist.
	Record string
}

// readRecord reads a record of pgtest.RecordPath: the test databases and the templates it
// names, each once. A missing record names nothing.
func readRecord(path string) (tests, templates []string, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		kind, name, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || seen[line] {
			continue
		}
		seen[line] = true
		switch kind {
		case pgtest.RecordTest:
			tests = append(tests, name)
		case pgtest.RecordTemplate:
			templates = append(templates, name)
		}
	}
	return tests, templates, nil
}

// pruneRecord rewrites the record at path keeping the lines whose database still exists.
func pruneRecord(ctx context.Context, conn *pgx.Conn, path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		_, name, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
			return err
		}
		if exists && !slices.Contains(kept, line) {
			kept = append(kept, line)
		}
	}
	if len(kept) == 0 {
		return os.Remove(path)
	}
	return os.WriteFile(path, []byte(strings.Join(kept, "\n")+"\n"), 0o644)
}

// Report says what a run did.
type Report struct {
	Removed []string // what is gone
	Left    []string // what was left, and why
	Errs    []error  // what failed
}

func (r *Report) removed(format string, args ...any) {
	r.Removed = append(r.Removed, fmt.Sprintf(format, args...))
}
func (r *Report) left(format string, args ...any) {
	r.Left = append(r.Left, fmt.Sprintf(format, args...))
}

// Print writes the report, one line per item.
func (r *Report) Print(w io.Writer) {
	for _, s := range r.Removed {
		fmt.Fprintln(w, "removed:", s)
	}
	for _, s := range r.Left {
		fmt.Fprintln(w, "left:   ", s)
	}
	for _, err := range r.Errs {
		fmt.Fprintln(w, "failed: ", err)
	}
	if len(r.Removed)+len(r.Left)+len(r.Errs) == 0 {
		fmt.Fprintln(w, "nothing to remove")
	}
}

// Clean carries out p and reports what it did; it goes on after a failure.
func Clean(ctx context.Context, p Plan) Report {
	var r Report
	for _, set := range p.Databases {
		cleanDatabases(ctx, set, &r)
	}
	if p.Redis != nil {
		for _, prefix := range p.KeyPrefixes {
			cleanKeys(ctx, p.Redis, prefix, &r)
		}
	}
	for _, dir := range p.Dirs {
		cleanDir(p.Root, dir, &r)
	}
	for _, s := range p.Skipped {
		r.left("%s", s)
	}
	return r
}

// protected are never dropped, whatever a plan says.
var protected = map[string]bool{"postgres": true, "template0": true, "template1": true}

func cleanDatabases(ctx context.Context, p DatabaseSet, r *Report) {
	conn, err := pgx.Connect(ctx, p.AdminURL)
	if err != nil {
		r.Errs = append(r.Errs, fmt.Errorf("connect to PostgreSQL as the administrator: %w", err))
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var names []string
	for _, n := range p.Names {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", n).Scan(&exists); err != nil {
			r.Errs = append(r.Errs, fmt.Errorf("look up database %s: %w", n, err))
			continue
		}
		if exists {
			names = append(names, n)
		}
	}
	for _, prefix := range p.Prefixes {
		if prefix == "" {
			r.Errs = append(r.Errs, errors.New("an empty database prefix is refused"))
			continue
		}
		rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY datname", prefix)
		if err == nil {
			var more []string
			more, err = pgx.CollectRows(rows, pgx.RowTo[string])
			names = append(names, more...)
		}
		if err != nil {
			r.Errs = append(r.Errs, fmt.Errorf("list databases %s*: %w", prefix, err))
		}
	}
	for _, n := range names {
		if protected[n] {
			r.left("database %s (a system database)", n)
			continue
		}
		dropDatabase(ctx, conn, n, r)
	}
	if p.Record != "" {
		if err := pruneRecord(ctx, conn, p.Record); err != nil {
			r.Errs = append(r.Errs, fmt.Errorf("update %s: %w", p.Record, err))
		}
	}
}

// dropDatabase drops one database unless a session uses it. A template is made an ordinary
// database first (PostgreSQL refuses to drop a template), and made a template again when
// the drop fails, so that a failure leaves it as it was.
func dropDatabase(ctx context.Context, conn *pgx.Conn, name string, r *Report) {
	id := pgx.Identifier{name}.Sanitize()
	var sessions int
	var template bool
	err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = $1), datistemplate
		FROM pg_database WHERE datname = $1`, name).Scan(&sessions, &template)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return // dropped meanwhile
	case err != nil:
		r.Errs = append(r.Errs, fmt.Errorf("inspect database %s: %w", name, err))
		return
	case sessions > 0:
		r.left("database %s (%d session(s) use it: stop what runs on it, then run make clean again)", name, sessions)
		return
	}
	if template {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+id+" IS_TEMPLATE false"); err != nil {
			r.Errs = append(r.Errs, fmt.Errorf("database %s: %w", name, err))
			return
		}
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id); err != nil {
		if template {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ALTER DATABASE "+id+" IS_TEMPLATE true")
		}
		r.left("database %s (%v)", name, err)
		return
	}
	r.removed("database %s", name)
}

func cleanKeys(ctx context.Context, rdb redis.UniversalClient, prefix string, r *Report) {
	if prefix == "" {
		r.Errs = append(r.Errs, errors.New("an empty Redis key prefix is refused"))
		return
	}
	pattern := globEscape(prefix) + ":*"
	n, err := countKeys(ctx, rdb, pattern)
	if err == nil && n > 0 {
		err = redistest.DeleteKeys(ctx, rdb, pattern)
	}
	if err != nil {
		r.Errs = append(r.Errs, fmt.Errorf("redis keys %s:*: %w", prefix, err))
		return
	}
	if n > 0 {
		r.removed("%d Redis key(s) %s:*", n, prefix)
	}
}

func countKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) (int, error) {
	n := 0
	count := func(ctx context.Context, c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			n++
		}
		return iter.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex // ForEachMaster calls its function concurrently
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return count(ctx, c)
		})
		return n, err
	}
	return n, count(ctx, rdb)
}

// globEscape escapes the characters Redis's MATCH patterns give a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func cleanDir(root, dir string, r *Report) {
	abs, err := inside(root, dir)
	if err != nil {
		r.left("%s (%v)", dir, err)
		return
	}
	if _, err := os.Lstat(abs); errors.Is(err, os.ErrNotExist) {
		return
	}
	if err := os.RemoveAll(abs); err != nil {
		r.Errs = append(r.Errs, fmt.Errorf("remove %s: %w", dir, err))
		return
	}
	r.removed("%s", dir)
	// The parents this run's directories were made in (var/ of var/storage) go too, when
	// empty and still inside root.
	for parent := filepath.Dir(abs); parent != root; parent = filepath.Dir(parent) {
		if _, err := inside(root, parent); err != nil || os.Remove(parent) != nil {
			break
		}
	}
}

// inside returns dir made absolute (relative to root) when it lies strictly inside root,
// following no symbolic link out of it.
func inside(root, dir string) (string, error) {
	abs := dir
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(root, dir)
	}
	abs = filepath.Clean(abs)
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", errors.New("outside the checkout: remove it yourself if it is yours")
	}
	// A parent that is a symbolic link could lead out of root.
	if real, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		if rel, err := filepath.Rel(root, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "", errors.New("reached through a symbolic link out of the checkout: remove it yourself if it is yours")
		}
	}
	return abs, nil
}

// loopbackHost reports whether host (of a URL, or an address host:port, or a Unix socket
// directory) names this machine.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "" || host == "localhost" || strings.HasPrefix(host, "/") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

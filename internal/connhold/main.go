// Command connhold runs a command while it holds connections of the test server, and reports
// the command's peak number of PostgreSQL connections: it checks that a test run fits beside
// other clients (make test-loaded).
//
//	go run ./internal/connhold -hold 40 -- make test
//
// It opens -hold connections as -role (a non-superuser, so that they take the slots other
// clients would) and keeps them idle while the command runs. The command's connections are
// told apart by application_name: the command runs with PGAPPNAME set to a name of its own,
// which every pgx and libpq connection it opens reports unless its URL names another. Every
// -every it samples pg_stat_activity; at the end it prints the peak of the command's
// connections and of the server's, and exits with the command's status.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

func main() {
	hold := flag.Int("hold", 40, "connections to hold while the command runs")
	role := flag.String("role", pgtest.AppRole, "role of the held connections (a non-superuser takes the slots other clients use)")
	database := flag.String("database", "postgres", "database of the held connections")
	every := flag.Duration("every", 200*time.Millisecond, "sampling interval of pg_stat_activity")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: connhold [flags] -- command [args...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	code, err := run(*hold, *role, *database, *every, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "connhold:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(hold int, role, database string, every time.Duration, args []string) (int, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	admin := pgtest.AdminURL()
	heldURL, err := postgres.WithDatabase(admin, database, role)
	if err != nil {
		return 2, err
	}
	tag := "connhold-" + randomHex(4)

	held := make([]*pgx.Conn, 0, hold)
	defer func() {
		for _, c := range held {
			_ = c.Close(context.Background())
		}
	}()
	for i := range hold {
		cfg, err := pgx.ParseConfig(heldURL)
		if err != nil {
			return 2, err
		}
		cfg.RuntimeParams["application_name"] = tag + "-held"
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return 2, fmt.Errorf("holding connection %d of %d: %w", i+1, hold, err)
		}
		held = append(held, c)
	}
	sampler, err := pgx.Connect(ctx, admin)
	if err != nil {
		return 2, err
	}
	defer sampler.Close(context.Background())
	fmt.Fprintf(os.Stderr, "connhold: holding %d connections as %s; running %q with PGAPPNAME=%s\n", hold, role, args, tag)

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "PGAPPNAME="+tag)
	if err := cmd.Start(); err != nil {
		return 2, err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var peakCmd, peakAll int
	var peakAt time.Time
	started := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var cmdErr error
loop:
	for {
		select {
		case cmdErr = <-waited:
			break loop
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM) // the command's own clean stop
			cmdErr = <-waited
			break loop
		case <-tick.C:
			var mine, all int
			if err := sampler.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE application_name = $1), count(*)
				FROM pg_stat_activity WHERE backend_type = 'client backend'`, tag).Scan(&mine, &all); err != nil {
				continue
			}
			if mine > peakCmd {
				peakCmd, peakAt = mine, time.Now()
			}
			peakAll = max(peakAll, all)
		}
	}
	fmt.Fprintf(os.Stderr, "connhold: %s: the command's peak: %d connections (at %s); the server's peak: %d client connections, %d of them held here\n",
		time.Since(started).Round(time.Second), peakCmd, peakAt.Sub(started).Round(time.Second), peakAll, hold)
	var exit *exec.ExitError
	if errors.As(cmdErr, &exit) {
		return exit.ExitCode(), nil
	}
	if cmdErr != nil {
		return 1, cmdErr
	}
	return 0, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

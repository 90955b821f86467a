package tests

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// cliRun runs the app binary with args and a minimal environment (development defaults, plus
// trailing KEY=VALUE items of args) and returns its stdout, stderr and exit status.
func cliRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for len(args) > 0 && strings.Contains(args[len(args)-1], "=") { // trailing KEY=VALUE: environment
		env, args = append(env, args[len(args)-1]), args[:len(args)-1]
	}
	cmd := exec.Command(seedBinary(t), args...)
	cmd.Env = env
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), errb.String(), exit.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errb.String(), 0
}

// TestCLIUsage: no subcommand prints the usage and exits 2; help exits 0; every subcommand's
// -h prints its own flags on stdout and exits 0, without log lines; a bad flag exits 2.
func TestCLIUsage(t *testing.T) {
	t.Parallel()
	_, stderr, code := cliRun(t)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "usage: app <subcommand>")

	stdout, _, code := cliRun(t, "help")
	require.Equal(t, 0, code)
	for _, sub := range []string{"migrate", "serve", "dispatch", "work", "commands", "cleanup", "outbox", "console", "all"} {
		require.Contains(t, stdout, "\n  "+sub+" ", "help lists %s", sub)
	}
	_, stderr, code = cliRun(t, "bogus")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `unknown subcommand "bogus"`)

	flags := map[string][]string{
		"migrate": {"-create-database"}, "serve": {"-addr"}, "all": {"-addr"}, "console": {"-addr"},
		"dispatch": {"-admin-addr"}, "work": {"-admin-addr"}, "commands": {"-admin-addr"}, "cleanup": {"-every", "-admin-addr"},
		"outbox list": {"-workspace", "-status", "-limit"}, "outbox show": {"-workspace", "-id"},
		"outbox redrive": {"-workspace", "-id", "-all", "-by", "-reason"}, "outbox purge": {"-all", "-by", "-reason"},
		"outbox stats": nil,
	}
	for sub, want := range flags {
		stdout, stderr, code := cliRun(t, append(strings.Fields(sub), "-h")...)
		require.Equal(t, 0, code, "%s -h: %s", sub, stderr)
		require.Contains(t, stdout, "usage: app "+sub+" [flags]", sub)
		for _, f := range want {
			require.Regexp(t, `(?m)^  `+regexp.QuoteMeta(f)+`( |$)`, stdout, "%s -h lists %s", sub, f)
		}
		require.Empty(t, stderr, "%s -h logs nothing", sub)
	}
	require.NotContains(t, must(cliRun(t, "outbox", "stats", "-h")), "-workspace", "each outbox command lists its own flags")
	// Help needs no valid configuration; a run does.
	stdout, _, code = cliRun(t, "serve", "-h", "APP_ENV=production")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "-addr")
	_, stderr, code = cliRun(t, "serve", "APP_ENV=production")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "required in production")

	for _, args := range [][]string{{"outbox", "help"}, {"outbox", "-h"}} {
		stdout, _, code := cliRun(t, args...)
		require.Equal(t, 0, code, args)
		for _, c := range []string{"stats", "list", "show", "redrive", "purge"} {
			require.Contains(t, stdout, "\n  "+c+" ", "outbox help lists %s", c)
		}
	}
	for _, args := range [][]string{{"outbox"}, {"outbox", "bogus"}, {"migrate", "-bogus"}, {"serve", "stray"},
		{"outbox", "list", "-workspace", "not-an-id"}} {
		_, stderr, code := cliRun(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.NotContains(t, stderr, "memory limit", "%v: a usage error prints no log line", args)
	}
}

func must(stdout, _ string, _ int) string { return stdout }

// TestOutboxCLIJSON: every key the operators' tool prints is snake_case, and an empty list
// is [], never null.
func TestOutboxCLIJSON(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := "5b0a3c1e-0000-4000-8000-000000000001"
	_, err := db.Owner.Exec(t.Context(), `INSERT INTO workspaces (id, name) VALUES ($1, 'ops')`, ws)
	require.NoError(t, err)
	_, err = db.Owner.Exec(t.Context(), `INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type,
		aggregate_id, event_payload, status, attempt_count, last_error)
		VALUES (gen_random_uuid(), $1, 'store.verification_requested', 'store-verification', 'store', 'x', '{}', 'dead_letter', 20, 'refused')`, ws)
	require.NoError(t, err)
	snake := regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				require.Regexp(t, snake, k, "key %q at %s", k, path)
				walk(path+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"[]", x)
			}
		}
	}
	for _, args := range [][]string{
		{"stats"},
		{"list", "-workspace", ws},
		{"list", "-workspace", ws, "-status", "pending"},
		{"redrive", "-workspace", ws, "-id", "5b0a3c1e-0000-4000-8000-0000000000ff", "-by", "ops", "-reason", "none such"},
	} {
		stdout, stderr, ok := appOutbox(t, db, args...)
		require.True(t, ok, "%v: %s", args, stderr)
		require.NotContains(t, stdout, "null", "%v: empty lists are [], never null", args)
		var v any
		require.NoError(t, json.Unmarshal([]byte(stdout), &v), stdout)
		walk(args[0], v)
	}
	stdout, _, _ := appOutbox(t, db, "list", "-workspace", ws, "-status", "pending")
	require.JSONEq(t, `{"items": []}`, stdout)
	stdout, _, _ = appOutbox(t, db, "stats")
	require.Contains(t, stdout, `"oldest_created_at"`)

	// A delivered event lives in the log, not in the live table: stats counts it there.
	_, err = db.Owner.Exec(t.Context(), `INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type,
		aggregate_id, event_payload, metadata, attempt_count, created_at, dispatched_at)
		VALUES (gen_random_uuid(), $1, 'store.verification_requested', 'store-verification', 'store', 'x', '{}', '{}', 1,
			now() - interval '2 seconds', now() - interval '1 second')`, ws)
	require.NoError(t, err)
	stdout, stderr, ok := appOutbox(t, db, "stats")
	require.True(t, ok, stderr)
	var stats struct {
		Delivered struct {
			LastHour      int64            `json:"last_hour"`
			ByDestination map[string]int64 `json:"by_destination"`
		} `json:"delivered"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &stats), stdout)
	require.EqualValues(t, 1, stats.Delivered.LastHour, "the log's last hour: %s", stdout)
	require.Equal(t, map[string]int64{"store-verification": 1}, stats.Delivered.ByDestination)
}

// TestEverySubcommandStopsCleanlyOnSignal: each long-running subcommand, run as a real child
// process, logs one start-up line naming its roles and addresses, and exits 0 after a clean
// shutdown on SIGINT and on SIGTERM. `all` warns once per development key and once about
// FETCH_ALLOW_PRIVATE, and logs durations as strings.
func TestEverySubcommandStopsCleanlyOnSignal(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	prefix := seedPrefix()
	seedRedis(t, prefix)
	type run struct {
		args []string
		want []string // in the start-up line
	}
	runs := []run{
		{[]string{"all"}, []string{`"roles":["migrate","api","dispatch","reconcile","work","cleanup","console","commands"]`, `"api":"http://127.0.0.1:`,
			`"openapi":"http://127.0.0.1:`, `"metrics":"http://127.0.0.1:`, `"console":"http://127.0.0.1:`,
			`"marketplace_sandbox":"http://127.0.0.1:`, `"ai_sandbox":"http://127.0.0.1:`}},
		{[]string{"serve"}, []string{`"roles":["api"]`, `"openapi":"http://127.0.0.1:`}},
		{[]string{"dispatch", "-admin-addr", "127.0.0.1:0"}, []string{`"roles":["dispatch","reconcile"]`, `"admin":"http://127.0.0.1:`}},
		{[]string{"work"}, []string{`"roles":["work"]`, `"marketplace_sandbox":"http://127.0.0.1:`}},
		{[]string{"console"}, []string{`"roles":["console"]`, `"console":"http://127.0.0.1:`}},
		{[]string{"commands", "-admin-addr", "127.0.0.1:0"}, []string{`"roles":["commands"]`, `"admin":"http://127.0.0.1:`}},
		{[]string{"cleanup", "-every", "1h"}, []string{`"roles":["cleanup"]`, `"every":"1h0m0s"`}},
	}
	for i, r := range runs {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
			env := seedEnv(db.AppURL, prefix, map[string]string{
				"LOG_FORMAT": "json", "MIGRATE_DATABASE_URL": db.OwnerURL, "FETCH_ALLOW_PRIVATE": "true",
				"HTTP_ADDR": "127.0.0.1:0", "SANDBOX_MARKETPLACE_ADDR": "127.0.0.1:0", "SANDBOX_AI_ADDR": "127.0.0.1:0",
			})
			p := seedStartProc(t, strings.Join(r.args, " ")+" "+sig.String(), env, r.args...)
			p.waitLog(t, `"msg":"started"`)
			var line string
			for _, l := range strings.Split(p.out.String(), "\n") {
				if strings.Contains(l, `"msg":"started"`) {
					line = l
				}
			}
			for _, w := range r.want {
				require.Contains(t, line, w, "%v", r.args)
			}
			require.NoError(t, p.cmd.Process.Signal(sig))
			select {
			case <-p.done:
			case <-time.After(60 * time.Second):
				require.FailNow(t, "no exit after the signal", "%v %s", r.args, sig)
			}
			require.Equal(t, 0, p.cmd.ProcessState.ExitCode(), "%v exits 0 on %s: %s", r.args, sig, p.out.String())
			require.Contains(t, p.out.String(), `"msg":"stopped"`)
			if i == 0 {
				out := p.out.String()
				for _, key := range []string{"AUTH_TOKEN_KEYS", "FINGERPRINT_KEYS", "CREDENTIALS_KEYS", "UPLOAD_SIGNING_KEY", "FETCH_ALLOW_PRIVATE=true"} {
					require.Equal(t, 1, strings.Count(out, `"msg":"`+key), "one warning about %s: %s", key, out)
				}
				require.Contains(t, out, `"lease":"30s"`, "durations are strings")
				require.NotRegexp(t, `"lease":\d`, out)
			}
		}
	}
}

package tests

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/internal/servicetest"
)

// readmeSnippet returns the shell block of the README's section "Try it".
func readmeSnippet(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	s := string(raw)
	i := strings.Index(s, "\n## Try it\n")
	require.GreaterOrEqual(t, i, 0, "README.md has no section \"Try it\"")
	s = s[i:]
	j := strings.Index(s, "```sh\n")
	require.GreaterOrEqual(t, j, 0, "the section \"Try it\" has no ```sh block")
	s = s[j+len("```sh\n"):]
	k := strings.Index(s, "```")
	require.GreaterOrEqual(t, k, 0, "unterminated ```sh block")
	return s[:k]
}

// TestReadmeTryIt runs the README's "Try it" as a reader pastes it into bash (with curl, jq,
// redis-cli and openssl, from the checkout's root), against the whole service with the
// development sandboxes and the command consumer, as `make run` starts it, with its
// development defaults: no FETCH_ALLOW_PRIVATE, and no network but loopback (step 7 fetches
// the marketplace sandbox's sample image, which the default FETCH_ALLOW_PREFIXES allows).
// What differs, on purpose: the addresses of the API and of the marketplace sandbox (free
// ports of the test's own: B= and SB=), the streams' prefix, and the Redis the snippet's
// redis-cli talks to (REDIS_URL). Every operation the walkthrough starts must be printed as
// succeeded, the replay and the command's reply must be shown, and nothing may fail.
func TestReadmeTryIt(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs PostgreSQL and Redis")
	}
	for _, tool := range []string{"bash", "curl", "jq", "redis-cli", "openssl"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the README's Try it needs %s (make jq installs jq)", tool)
	}
	snippet := "\n" + readmeSnippet(t) // every line starts after a newline
	const api, sandbox = "http://127.0.0.1:8080", "http://127.0.0.1:8091"
	require.Contains(t, snippet, "\nB="+api, "the walkthrough no longer targets make run's address")
	require.Contains(t, snippet, "\nSB="+sandbox, "the walkthrough no longer names make run's marketplace sandbox")
	require.Contains(t, snippet, `$SB/_sandbox/files/mug.png`, "the walkthrough's material transfer no longer fetches the sandbox's sample")
	require.NotContains(t, snippet, "FETCH_ALLOW_PRIVATE")

	// The marketplace sandbox on a free port of the test's own (StartAll's is chosen at start,
	// after the configuration the default FETCH_ALLOW_PREFIXES derives from).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sandboxAddr := l.Addr().String()
	require.NoError(t, l.Close())
	env := servicetest.StartAll(t, func(c *config.Config) {
		c.FetchAllowPrivate = false
		c.FetchAllowPrefixes = nil
		c.SandboxMarketplaceAddr = sandboxAddr
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = env.API.Commands.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	script := strings.Replace(snippet, "\nB="+api, "\nB="+env.URL, 1)
	script = strings.Replace(script, "\nSB="+sandbox, "\nSB=http://"+sandboxAddr, 1)
	require.Contains(t, script, "listing:commands", "the walkthrough no longer sends a command")
	require.Contains(t, script, "listing:events", "the walkthrough no longer reads the integration events")
	// Every integration stream (listing:commands, :command-replies, :events) takes the test's prefix.
	script = strings.ReplaceAll(script, "listing:", env.Config.StreamPrefix+":")
	script = strings.ReplaceAll(script, "redis-cli ", "redis-cli -u "+env.Config.RedisURL+" ")

	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = ".." // the checkout's root, as the README says
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	done := make(chan error, 1)
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the walkthrough did not finish in 3 minutes; so far:\n%s\n%s", out.String(), errOut.String())
	}
	printed := out.String()
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", printed, errOut.String())
	require.Empty(t, errOut.String(), "stdout:\n%s", printed)

	require.Contains(t, printed, `"email":"ada@example.com"`, "register should answer the user")
	require.Regexp(t, `(?i)idempotent-replayed: true`, printed, "the replay of step 1 must be marked")
	require.Contains(t, printed, `{"title":"Mug XL","revision":2}`, "the draft save")
	require.Contains(t, printed, `{"product_revision":2,"status":"pending"}`, "the listing update's answer")
	require.Contains(t, printed, `{"type":"listing.command.accepted"}`, "the command's reply")
	require.Equal(t, 2, strings.Count(printed, `{"type":"publication","status":"succeeded"`),
		"the publications of step 2 and of the command; the walkthrough printed:\n%s", printed)
	for _, op := range []string{"store.verification", "publication", "product_sync", "ai_task",
		"media.processing", "material_transfer", "listing_update"} {
		require.Contains(t, printed, `{"type":"`+op+`","status":"succeeded"`, "operation %s; the walkthrough printed:\n%s", op, printed)
	}
	// Step 10: the integration events of the workspace, by type (the last ones may still be on
	// their way: only types that were dispatched well before are required).
	for _, typ := range []string{"operation.status_changed", "store.verified", "publication.published", "product_sync.completed", "media.ready"} {
		require.Regexp(t, `"`+regexp.QuoteMeta(typ)+`":[1-9]`, printed, "integration event %s; the walkthrough printed:\n%s", typ, printed)
	}
	require.NotContains(t, printed, `"failed"`, printed)
	require.NotContains(t, printed, `"code"`, "an error answer: %s", printed)
}

package tests

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/internal/servicetest"
)

// readmeBlock returns the first ```sh block of the README's section titled title.
func readmeBlock(t *testing.T, title string) string {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	s := string(raw)
	i := strings.Index(s, "\n## "+title+"\n")
	require.GreaterOrEqual(t, i, 0, "README.md has no section %q", title)
	s = s[i+1:]
	if end := strings.Index(s, "\n## "); end >= 0 {
		s = s[:end]
	}
	j := strings.Index(s, "```sh\n")
	require.GreaterOrEqual(t, j, 0, "the section %q has no ```sh block", title)
	s = s[j+len("```sh\n"):]
	k := strings.Index(s, "```")
	require.GreaterOrEqual(t, k, 0, "unterminated ```sh block")
	return s[:k]
}

// TestReadmeTenLines runs the README's first example ("Ten lines") as a reader pastes it into
// bash, against the whole service (its API on a free port instead of make run's): it is at
// most ten lines, registers, connects a store and prints the store and its operation, then
// the operation a worker finished. Its `sleep 2` may be too short on a loaded machine: the
// operation may then still be pending or running, and must then succeed all the same.
func TestReadmeTenLines(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs PostgreSQL and Redis")
	}
	for _, tool := range []string{"bash", "curl", "jq"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the README's first example needs %s (make jq installs jq)", tool)
	}
	block := readmeBlock(t, "Ten lines")
	require.LessOrEqual(t, strings.Count(strings.TrimSpace(block), "\n")+1, 10, "the first example is ten lines at most:\n%s", block)
	const api = "http://127.0.0.1:8080/v1"
	require.Contains(t, block, "B="+api, "the example no longer targets make run's API")
	env := servicetest.StartAll(t)
	script := strings.Replace(block, "B="+api, "B="+env.URL+"/v1", 1)

	// The example runs in a process group of its own, killed whole (bash, curl, sleep) after a
	// minute; Run returns once its output is closed, so the buffers are read after it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = ".."
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); ctx.Err() != nil {
		t.Fatalf("the example did not finish in a minute; so far:\n%s\n%s", out.String(), errOut.String())
	} else {
		require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	require.Empty(t, errOut.String(), "stdout:\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, "%s", out.String())
	require.Equal(t, `{"store":"pending_verification","operation":"pending"}`, lines[0])
	m := regexp.MustCompile(`^\{"type":"store\.verification","status":"(pending|running|succeeded)"\}$`).FindStringSubmatch(lines[1])
	require.NotNil(t, m, lines[1])
	if m[1] != "succeeded" {
		t.Logf("the example's operation was still %s after its sleep 2", m[1])
		var opID string
		require.NoError(t, env.DB.Owner.QueryRow(t.Context(),
			`SELECT id::text FROM operations WHERE type = 'store.verification' ORDER BY created_at DESC LIMIT 1`).Scan(&opID))
		require.Eventually(t, func() bool {
			return env.Count(`SELECT count(*) FROM operations WHERE id = $1 AND status = 'succeeded'`, opID) == 1
		}, 30*time.Second, 50*time.Millisecond, "the example's store verification never succeeded")
	}
}

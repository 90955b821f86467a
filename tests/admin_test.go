package tests

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// TestEveryProcessIsObservable: `dispatch`, `work`, `commands` and `cleanup -every` answer /healthz,
// /readyz and /metrics on ADMIN_ADDR, and every series of ours — there and on the API — is
// named listing_….
func TestEveryProcessIsObservable(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	prefix := seedPrefix()
	seedRedis(t, prefix)
	_, api := seedStartServe(t, db.AppURL, prefix)
	processes := map[string][]string{"dispatch": {"dispatch"}, "work": {"work"}, "commands": {"commands"}, "cleanup": {"cleanup", "-every", "1h"}}
	bases := map[string]string{"serve": api}
	for name, args := range processes {
		addr := seedFreeAddr(t)
		env := seedEnv(db.AppURL, prefix, map[string]string{"ADMIN_ADDR": addr,
			"SANDBOX_MARKETPLACE_ADDR": seedFreeAddr(t), "SANDBOX_AI_ADDR": seedFreeAddr(t)})
		p := seedStartProc(t, name, env, args...)
		seedWaitHTTP(t, p, "http://"+addr+"/healthz")
		bases[name] = "http://" + addr
	}
	for name, base := range bases {
		if name != "serve" {
			resp, err := http.Get(base + "/readyz")
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s /readyz: %s", name, body)
			require.Contains(t, string(body), `"postgres":"ok"`, name)
			if name == "commands" {
				require.Contains(t, string(body), `"redis":"ok"`, name)
			}
		}
		resp, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, name)
		ours := 0
		for _, line := range strings.Split(string(body), "\n") {
			metric, ok := strings.CutPrefix(line, "# TYPE ")
			if !ok {
				continue
			}
			metric, _, _ = strings.Cut(metric, " ")
			if strings.HasPrefix(metric, "go_") || strings.HasPrefix(metric, "process_") || strings.HasPrefix(metric, "promhttp_") {
				continue
			}
			require.True(t, strings.HasPrefix(metric, "listing_"), "%s serves %s: every series of ours is listing_…", name, metric)
			ours++
		}
		require.Positive(t, ours, "%s serves metrics of its own", name)
		if name == "commands" {
			require.Contains(t, string(body), `listing_command_messages_reclaimed_total 0`)
		}
		if name == "dispatch" {
			// The integration event stream's retention and lag, so loss by trimming shows first.
			require.Contains(t, string(body), `listing_stream_retention_max_length{stream="`+prefix+`:events"} 1e+06`)
			require.Contains(t, string(body), `listing_stream_length{stream="`+prefix+`:events"}`)
			require.Contains(t, string(body), `listing_stream_length{stream="`+prefix+`:commands"}`)
			require.Contains(t, string(body), `listing_stream_retention_max_length{stream="`+prefix+`:command-replies"} 100000`)
		}
	}
}

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/redistest"
	"github.com/listingkit/listing/internal/servicetest"
)

// TestStoreRateLimitAcrossTwoWorkers: a marketplace that allows one shop's api key 10
// requests a second (burst 20, answering 429 beyond) and 60 publications to that shop's
// store, worked by two worker runtimes (each with its own Redis and PostgreSQL connections,
// as two `work` processes) under STORE_RATE_LIMITS=sandbox=8/16: the budget a little under
// the marketplace's limit, as docs/operations.md says to set it (a job takes its tokens when
// it begins; its calls land a commit later). The store's budget is one bucket in Redis that
// both draw from: the marketplace answers at most one 429, all 60 succeed, every task but one
// that met a 429 ran once (attempts = 1: a job over budget waited without starting its task
// or spending an attempt), and the waits were counted.
//
// A publication to a second store of the same workspace, requested after the 60, draws from
// a bucket of its own and, with fair share on (the default), from slots of its own (fair
// share keeps a workspace's slots per store): either way it finishes in a fraction of the
// first store's drain, not behind the first store's held backlog.
func TestStoreRateLimitAcrossTwoWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("drains 120 rate-limited marketplace calls (about 15 s)")
	}
	t.Parallel()
	for name, slots := range map[string]string{"fair share on": "", "fair share off": "off"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drain, quietTook := storeLimitRun(t, slots)
			require.Less(t, quietTook, drain/4, "the quiet store's publication is not held back by the busy store's budget")
		})
	}
}

// storeLimitRun runs TestStoreRateLimitAcrossTwoWorkers with FAIR_SHARE_SLOTS=fairSlots and
// returns the busy store's drain and the quiet store's commit → finish, in seconds.
func storeLimitRun(t *testing.T, fairSlots string) (drain, quietTook float64) {
	limit, budget := domain.RateLimit{PerSecond: 10, Burst: 20}, domain.RateLimit{PerSecond: 8, Burst: 16}
	sb, err := marketplace.New(marketplace.Config{Rate: limit})
	require.NoError(t, err)
	srv, err := sandbox.Start("", sb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })

	env := servicetest.Start(t, func(c *config.Config) {
		c.BullMQPrefix = "t" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
		c.StreamPrefix = c.BullMQPrefix // the stores' buckets: <prefix>:rate:…
		c.PlatformBaseURL = srv.URL
		c.SandboxAIAddr = "127.0.0.1:0"
		c.StoreRateLimits = config.RateLimits{"sandbox": budget}
		c.JobAttempts = 3
		c.FairShareSlots = fairSlots
	})
	logs := &servicetest.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	run := func(name string, r interface{ Run(context.Context) error }) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil && ctx.Err() == nil {
				log.Error("runtime stopped", "runtime", name, "error", err)
			}
		}()
	}
	var cleanups []func()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		_ = redistest.DeleteKeys(context.Background(), env.API.Redis, env.Config.BullMQPrefix+":*")
		if t.Failed() {
			t.Logf("service logs:\n%s", logs.String())
		}
	})
	d, cleanupDispatch, err := listing.InitializeDispatch(ctx, env.Config, listing.NewQueues(env.Config), listing.NewRegistry(), log)
	require.NoError(t, err)
	cleanups = append(cleanups, cleanupDispatch)
	run("dispatch", d)
	regs := []*prometheus.Registry{listing.NewRegistry(), listing.NewRegistry()}
	for i, reg := range regs {
		w, cleanupWork, err := listing.InitializeWork(ctx, env.Config, listing.NewQueues(env.Config), reg, log.With("worker", i))
		require.NoError(t, err)
		require.Nil(t, w.Externals.MarketplaceSandbox, "both workers call the one marketplace")
		cleanups = append(cleanups, cleanupWork)
		run(fmt.Sprintf("work %d", i), w)
	}

	acct := env.Register("store-limit@example.com")
	busyStore := storeLimitStore(t, env, acct, "busy", "sk_test_busy")
	quietStore := storeLimitStore(t, env, acct, "quiet", "sk_test_quiet")
	products := make([]string, 61)
	for i := range products {
		products[i] = seedProduct(t, env, acct)
	}

	// The 60 publications to the busy store, six requests at a time.
	pubs := make([]string, 60)
	errs := make(chan error, len(pubs))
	next := make(chan int)
	var senders sync.WaitGroup
	for range 6 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range next {
				body, _ := json.Marshal(map[string]any{"store_id": busyStore})
				r, err := seedSend(env.URL, "POST", seedWS(acct)+"/products/"+products[i]+"/publications", acct.AccessToken, seedKey(), body)
				if err == nil && r.Status != http.StatusAccepted {
					err = fmt.Errorf("publication %d: %d %s", i, r.Status, r.Body)
				}
				if err == nil {
					var out struct{ Publication struct{ ID string } }
					err = json.Unmarshal(r.Body, &out)
					pubs[i] = out.Publication.ID
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range pubs {
		next <- i
	}
	close(next)
	senders.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	quiet := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/products/" + products[60] + "/publications",
		Token: acct.AccessToken, Header: seedKey(), Body: map[string]any{"store_id": quietStore}})
	require.Equal(t, http.StatusAccepted, quiet.Status, "%s", quiet.Body)
	quietPub := seedField(t, quiet, "publication", "id")

	unfinished := func() int {
		return env.Count("SELECT count(*) FROM publications WHERE workspace_id = $1 AND status IN ('pending', 'running')", acct.WorkspaceID)
	}
	seedEventually(t, 2*time.Minute, func() bool { return unfinished() == 0 }, "publications unfinished: %d", unfinished())

	// The busy store's drain, from its first publication's commit to its last's end, and the
	// quiet store's publication, from its commit to its end.
	require.NoError(t, env.DB.Owner.QueryRow(context.Background(), `
		SELECT extract(epoch FROM max(updated_at) - min(created_at))::float8 FROM publications WHERE store_id = $1`,
		busyStore).Scan(&drain))
	require.NoError(t, env.DB.Owner.QueryRow(context.Background(), `
		SELECT extract(epoch FROM updated_at - created_at)::float8 FROM publications WHERE id = $1`,
		quietPub).Scan(&quietTook))
	stats := sb.Stats()
	waits := 0.0
	for _, reg := range regs {
		waits += storeLimitCounter(t, reg, "listing_store_rate_waits_total")
	}
	ranAgain := env.Count("SELECT count(*) FROM publications WHERE workspace_id = $1 AND attempts <> 1", acct.WorkspaceID)
	t.Logf("FAIR_SHARE_SLOTS=%q: busy store: 60 publications (120 calls) drained in %.2f s; quiet store: one publication in %.2f s; "+
		"%d answered 429, %.0f waits, %d tasks ran more than once", fairSlots, drain, quietTook, stats.RateLimited, waits, ranAgain)

	require.Equal(t, 61, env.Count("SELECT count(*) FROM publications WHERE workspace_id = $1 AND status = 'succeeded'", acct.WorkspaceID),
		"every publication succeeded")
	for _, id := range append(pubs, quietPub) {
		require.Equal(t, 1, sb.ProductsWithRef(id), "publication %s created once", id)
	}
	require.LessOrEqual(t, stats.RateLimited, 1, "429s answered by the marketplace")
	require.LessOrEqual(t, ranAgain, stats.RateLimited,
		"a task runs again only after a 429 (a snooze); waiting for the budget starts nothing and spends no attempt")
	require.Positive(t, waits, "jobs waited for the store's budget (else the limit was never reached)")
	require.GreaterOrEqual(t, drain, 12.0, "120 calls at 8/s after a burst of 16 take at least 13 s")
	return drain, quietTook
}

// storeLimitStore creates a verified store of the sandbox platform with apiKey (a shop of its
// own at the marketplace) and returns its id.
func storeLimitStore(t *testing.T, env *servicetest.Env, acct servicetest.Account, shop, apiKey string) string {
	t.Helper()
	resp := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/stores", Token: acct.AccessToken, Header: seedKey(),
		Body: map[string]any{"platform": "sandbox", "shop_id": shop, "name": "Shop " + shop,
			"credentials": map[string]string{"api_key": apiKey}}})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	op := env.WaitOperation(acct, seedField(t, resp, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	return seedField(t, resp, "store", "id")
}

// storeLimitCounter sums the counter name's series in reg.
func storeLimitCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

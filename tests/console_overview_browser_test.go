package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/infra/ratelimit"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/servicetest"
)

// The console's overview, failures, queues and operation pages in a real browser (headless
// Debian chromium), served by the real `app console` binary as listing_operator, over what a
// run with a failure and a long product sync leaves in the database and Redis: a material
// transfer that failed PLATFORM_UNAVAILABLE after its last look (its operation, task, status
// and request events in the log, its two failed jobs in BullMQ), operations that succeeded,
// and a product sync still running at 40 of 100 products. The overview's charts are drawn
// from the samples the console writes when it starts; the failures page lists the failure
// with its code without any id typed; its job on the queues page links to its operation;
// the product sync's operation shows a progress bar. Screenshots of each page are saved in
// CONSOLE_SCREENSHOTS when set (screenshots).
func TestConsoleOverviewInBrowser(t *testing.T) {
	browser := chromiumPath(t)
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	prefix := seedPrefix()
	rdb := seedRedis(t, prefix)
	bcfg := bullmq.Config{Client: rdb, Prefix: prefix}

	ws := uuid.New()
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.Owner.Exec(ctx, q, args...)
		require.NoError(t, err)
	}
	exec(`INSERT INTO workspaces (id, name) VALUES ($1, 'Acme')`, ws)
	// logged adds a delivered event to the log, committed at.
	logged := func(typ, dest, aggType, aggID, payload string, at time.Time) {
		t.Helper()
		exec(`INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload,
				metadata, attempt_count, created_at, dispatched_at)
			VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6, '{}', 1, $7::timestamptz, $7::timestamptz + interval '30 milliseconds')`,
			ws, typ, dest, aggType, aggID, payload, at)
	}
	opEvent := func(op uuid.UUID, status string, started *time.Time) string {
		p := map[string]any{"operation_id": op, "type": "material_transfer", "status": status}
		if started != nil {
			p["started_at"] = started.UTC().Format(time.RFC3339Nano)
		}
		return mustJSON(t, p)
	}
	// transfer adds a material transfer accepted at, finished after took (0: still pending).
	transfer := func(at time.Time, status, code string, took time.Duration) (op, task uuid.UUID) {
		t.Helper()
		op, task = uuid.New(), uuid.New()
		msg := ""
		if code != "" {
			msg = "the marketplace answered 500 three times, and its last look found nothing"
		}
		exec(`INSERT INTO operations (id, workspace_id, type, status, resource_type, resource_id, error_code, error_message, created_at, updated_at)
			VALUES ($1, $2, 'material_transfer', $3, 'media', gen_random_uuid(), $4, $5, $6, $6::timestamptz + $7::interval)`,
			op, ws, status, code, msg, at, took.String())
		exec(`INSERT INTO material_transfers (id, workspace_id, operation_id, status, source_url, media_id, attempts, error_code,
				error_message, created_at, updated_at)
			VALUES ($1, $2, $3, $4, 'https://example.com/a.png', gen_random_uuid(), 3, $5, $6, $7, $7::timestamptz + $8::interval)`,
			task, ws, op, status, code, msg, at, took.String())
		logged("operation.status_changed", "stream", "operation", op.String(), opEvent(op, "pending", nil), at)
		logged("material_transfer.requested", "material-transfer", "material_transfer", task.String(),
			fmt.Sprintf(`{"transfer_id":%q,"operation_id":%q}`, task, op), at)
		if status == "succeeded" || status == "failed" {
			started := at.Add(took / 3)
			logged("operation.status_changed", "stream", "operation", op.String(), opEvent(op, status, &started), at.Add(took))
		}
		return op, task
	}
	now := time.Now()
	// Eight minutes of traffic, the last ended more than a minute ago (the sampler's lag).
	for m := 9; m >= 2; m-- {
		for i := range 3 + m%3 {
			at := now.Add(-time.Duration(m)*time.Minute + time.Duration(i)*7*time.Second)
			transfer(at, "succeeded", "", time.Duration(400+100*i)*time.Millisecond)
		}
	}
	failedAt := now.Add(-4 * time.Minute)
	failedOp, failedTask := transfer(failedAt, "failed", "PLATFORM_UNAVAILABLE", 20*time.Second)
	logged("material_transfer.requested", "material-transfer", "material_transfer", failedTask.String(),
		fmt.Sprintf(`{"transfer_id":%q,"operation_id":%q,"last_look":{"code":"PLATFORM_UNAVAILABLE","message":"m"}}`, failedTask, failedOp),
		failedAt.Add(15*time.Second))
	for range 4 {
		transfer(now.Add(-30*time.Second), "pending", "", 0)
	}
	// The product sync, running, 40 of its 100 products synced.
	syncOp := uuid.New()
	exec(`INSERT INTO operations (id, workspace_id, type, status, resource_type, resource_id, progress, progress_at, created_at, updated_at)
		VALUES ($1, $2, 'product_sync', 'running', 'product_sync', gen_random_uuid(), '{"done": 40, "total": 100}', now(), $3, $3)`,
		syncOp, ws, now.Add(-90*time.Second))

	// The failed transfer's two jobs in BullMQ: its attempt, and its last look, both failed.
	const queue = "material-transfer"
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bcfg}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	attemptJob, lookJob := uuid.NewString(), uuid.NewString()
	envelope := func(id, extra string) []byte {
		return fmt.Appendf(nil, `{"event_id":%q,"workspace_id":%q,"event_type":"material_transfer.requested","payload":{"transfer_id":%q,"operation_id":%q%s}}`,
			id, ws, failedTask, failedOp, extra)
	}
	_, err = pub.Add(ctx, queue, []bullmq.Job{{ID: attemptJob, Name: "material_transfer.requested", Data: envelope(attemptJob, "")}})
	require.NoError(t, err)
	w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: bcfg, Queue: queue, DrainDelay: 100 * time.Millisecond},
		func(context.Context, *bullmq.Job) (any, error) {
			return nil, bullmq.Unrecoverable(fmt.Errorf("PLATFORM_UNAVAILABLE: the marketplace answered 500"))
		})
	require.NoError(t, err)
	wctx, stopWorker := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() { worked <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-worked })
	failedJobs := func(n int64) func() bool {
		return func() bool {
			c, err := bullmq.QueueCounts(ctx, bcfg, queue)
			return err == nil && c[bullmq.StateFailed] == n
		}
	}
	seedEventually(t, 15*time.Second, failedJobs(1), "the attempt's job never failed")
	_, err = pub.Add(ctx, queue, []bullmq.Job{{ID: lookJob, Name: "material_transfer.requested",
		Data: envelope(lookJob, `,"last_look":{"code":"PLATFORM_UNAVAILABLE","message":"the marketplace answered 500"}`)}})
	require.NoError(t, err)
	seedEventually(t, 15*time.Second, failedJobs(2), "the last look's job never failed")

	// Three jobs waited for their store's rate limit just now (what `work` logs).
	waits := ratelimit.WaitLog{Client: rdb, Prefix: listing.RatePrefix(config.Config{StreamPrefix: prefix})}
	for range 3 {
		require.NoError(t, waits.Add(ctx, "sandbox", time.Now()))
	}

	// The console, as the real binary; it samples the last ten minutes as it starts.
	const secret = "ada-overview-secret-0123456789"
	addr := seedFreeAddr(t)
	base := "http://" + addr
	proc := seedStartProc(t, "console", seedEnv(db.AppURL, prefix, map[string]string{
		"CONSOLE_ADDR":          addr,
		"CONSOLE_TOKENS":        "ada:" + secret,
		"OPERATOR_DATABASE_URL": db.OperatorURL,
	}), "console")
	seedWaitHTTP(t, proc, base+"/signin")
	seedEventually(t, 30*time.Second, func() bool {
		var n int
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM overview_outbox_samples`).Scan(&n))
		return n >= 8
	}, "the console never sampled the last minutes")

	bctx := newBrowser(t, browser)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	textOf := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(css(sel)))
		require.NoError(t, err)
		return v
	}
	shot := screenshots(t, bctx)

	// Sign in: the form says what to paste.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`#token`))))
	require.Contains(t, textOf(`main`), "CONSOLE_TOKENS")
	shot("signin")
	require.NoError(t, chromedp.Do(bctx, chromedp.SendKeys(css(`#token`), secret), chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`#flows-now`))))

	// The overview: the flows now, and charts with lines.
	text := textOf(`#flows-now`)
	require.Contains(t, text, "material_transfer")
	row, err := chromedp.Run(bctx, chromedp.Text(css(`#flows-now tr:has(a[href="/?flow=material_transfer"])`)))
	require.NoError(t, err)
	require.Regexp(t, `material_transfer\s+4\s+0\s+\S+\s+0\s+0\s+1`, row, "4 waiting, none held, running or queued, 1 failed in the hour")
	// The largest backlogs: Acme's four waiting transfers, linked to its page; the rate-limit
	// waits the workers logged (under the prefix `work` uses) per platform.
	backlog, err := chromedp.Run(bctx, chromedp.Text(css(`#backlog-`+ws.String())))
	require.NoError(t, err)
	require.Regexp(t, `Acme\s+material_transfer\s+4\s+0\s+\S+\s+0`, backlog)
	require.Regexp(t, `sandbox\s+[0-3]\s+3`, textOf(`#rate-waits`), "three waits in the last hour")
	for _, chart := range []string{"throughput-chart", "latency-chart", "depth-chart", "reconciliations-chart", "owed-chart"} {
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll('#%s polyline, #%s circle').length`, chart, chart)))
		require.NoError(t, err, chart)
		require.NotZero(t, n, "chart %s has no line", chart)
	}
	bars, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#delivered-chart rect').length`))
	require.NoError(t, err)
	require.NotZero(t, bars, "the outbox's deliveries have bars")
	shot("overview")
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"/?flow=material_transfer"), chromedp.WaitVisible(css(`#latency-chart`))))
	label, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#throughput-chart').getAttribute('aria-label')`))
	require.NoError(t, err)
	require.Equal(t, "Operations per minute, material_transfer", label)
	shot("overview-material-transfer")

	// Failures: the failed operation with its code, no id typed.
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(css(`header a[href="/failures"]`)), chromedp.WaitVisible(css(`#failures`))))
	text = textOf(`main`)
	require.Contains(t, text, failedOp.String())
	require.Contains(t, text, "PLATFORM_UNAVAILABLE")
	shot("failures")

	// Queues: the attempt's job and its last look's, one failure, linked to the operation.
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(css(`header a[href="/queues"]`)), chromedp.WaitVisible(css(`#q-`+queue))))
	group := textOf(`section[aria-labelledby="q-` + queue + `"] article.failure`)
	require.Contains(t, group, "One failure of operation "+failedOp.String()+": 2 failed jobs")
	require.Contains(t, group, "last look before failing PLATFORM_UNAVAILABLE")
	shot("queues")
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(css(`#job-`+queue+`-`+attemptJob+` a[href="/operations?id=`+failedOp.String()+`"]`)),
		chromedp.WaitVisible(css(`#operation`))))
	text = textOf(`main`)
	require.Contains(t, text, "PLATFORM_UNAVAILABLE")
	require.Contains(t, text, ws.String())

	// The workspace's page lists the product sync; its operation shows the bar.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"/workspaces/"+ws.String()),
		chromedp.WaitVisible(css(`a[href="/operations?id=`+syncOp.String()+`"]`))))
	shot("workspace")
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(css(`a[href="/operations?id=`+syncOp.String()+`"]`)),
		chromedp.WaitVisible(css(`#progress progress`))))
	value, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelector('#progress progress').value`))
	require.NoError(t, err)
	require.EqualValues(t, 40, value)
	require.Contains(t, textOf(`#progress`), "40 of 100 (40%)")
	shot("product-sync")
}

// TestConsoleAfterARun: the same pages over what the service itself left, not rows a test
// wrote: the whole service runs in this process (servicetest.StartAll) and `app console`
// beside it, as the real binary. A publication the marketplace fails (HTTP 500 on every
// attempt, then its last look finds nothing) and a product sync of 400 pages, slowed to 300
// ms a page, still running: the overview charts the minute the service worked in (once the
// console sampled it), the failures page lists the publication with its code without any id
// typed, its failed jobs on the queues page are one failure linked to its operation, and the
// sync's operation shows how far it is as a bar. Its screenshots are named run-*.
func TestConsoleAfterARun(t *testing.T) {
	browser := chromiumPath(t)
	t.Parallel()
	env := servicetest.StartAll(t)
	ctx := context.Background()
	acct := env.Register("console-run@example.com")
	ws := "/v1/workspaces/" + acct.WorkspaceID
	storeID := seedVerifiedStore(t, env, acct, "shop-1")
	sb := env.Work.Externals.MarketplaceSandbox

	// The publication: every attempt answered 500; its last look finds no product.
	product := seedProduct(t, env, acct)
	sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointCreateProduct, Status: http.StatusInternalServerError,
		Count: env.Config.JobAttempts})
	resp := env.Do(servicetest.Request{Method: "POST", Path: ws + "/products/" + product + "/publications", Token: acct.AccessToken,
		Header: idemKey(), Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	failedOp := seedField(t, resp, "operation", "id")
	failed := env.WaitOperation(acct, failedOp)
	require.Equal(t, "failed", failed["status"], "%v", failed)
	code, _ := failed["error"].(map[string]any)["code"].(string)
	require.NotEmpty(t, code, "%v", failed)

	// The product sync: 400 pages of 50 at 300 ms each, two minutes at least.
	sb.Seed("sk_test_seed", 20_000)
	sb.SetLatency(300 * time.Millisecond)
	resp = env.Do(servicetest.Request{Method: "POST", Path: ws + "/stores/" + storeID + "/product-syncs", Token: acct.AccessToken,
		Header: idemKey(), Body: map[string]any{}})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	syncOp := seedField(t, resp, "operation", "id")
	// syncProgress is the sync's progress.done as the API shows it (0: none yet); the sync
	// must not have ended.
	syncProgress := func() float64 {
		o := env.Do(servicetest.Request{Method: "GET", Path: ws + "/operations/" + syncOp, Token: acct.AccessToken}).JSON(t)["operation"].(map[string]any)
		require.Contains(t, []any{"pending", "running"}, o["status"], "the sync is still under way: %v", o)
		p, _ := o["progress"].(map[string]any)
		done, _ := p["done"].(float64)
		return done
	}
	seedEventually(t, 30*time.Second, func() bool { return syncProgress() > 0 }, "the sync never reported progress")

	// The console, as the real binary, on the service's database and queues.
	const secret = "ada-run-secret-0123456789"
	addr := seedFreeAddr(t)
	base := "http://" + addr
	proc := seedStartProc(t, "console", seedEnv(env.DB.AppURL, env.Config.BullMQPrefix, map[string]string{
		"CONSOLE_ADDR":          addr,
		"CONSOLE_TOKENS":        "ada:" + secret,
		"OPERATOR_DATABASE_URL": env.DB.OperatorURL,
	}), "console")
	seedWaitHTTP(t, proc, base+"/signin")
	// The console samples a minute ten seconds after it ends: the publication's minute is
	// charted within 70 s of its failure.
	seedEventually(t, 100*time.Second, func() bool {
		var n int
		require.NoError(t, env.DB.Owner.QueryRow(ctx,
			`SELECT count(*) FROM overview_flow_samples WHERE flow = 'publication' AND failed > 0`).Scan(&n))
		return n > 0
	}, "the console never sampled the publication's minute")

	bctx := newBrowser(t, browser)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	textOf := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(css(sel)))
		require.NoError(t, err)
		return v
	}
	shot := screenshots(t, bctx)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`#token`)),
		chromedp.SendKeys(css(`#token`), secret), chromedp.Submit(css(`#token`)), chromedp.WaitVisible(css(`#flows-now`))))

	// The overview: the publication failed in the last hour, the sync running, and charts.
	row, err := chromedp.Run(bctx, chromedp.Text(css(`#flows-now tr:has(a[href="/?flow=publication"])`)))
	require.NoError(t, err)
	require.Regexp(t, `publication\s+0\s+0\s+\S+\s+0\s+\S+\s+1\b`, row, "none waiting or running, 1 failed in the hour")
	row, err = chromedp.Run(bctx, chromedp.Text(css(`#flows-now tr:has(a[href="/?flow=product_sync"])`)))
	require.NoError(t, err)
	require.Regexp(t, `product_sync\s+0\s+0\s+\S+\s+1\s`, row, "the sync running")
	for _, chart := range []string{"throughput-chart", "latency-chart", "owed-chart"} {
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll('#%s polyline, #%s circle').length`, chart, chart)))
		require.NoError(t, err, chart)
		require.NotZero(t, n, "chart %s has no line", chart)
	}
	shot("run-overview")

	// Failures: the publication with its code, no id typed.
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(css(`header a[href="/failures"]`)), chromedp.WaitVisible(css(`#failures`))))
	text := textOf(`#failures`)
	require.Contains(t, text, failedOp)
	require.Contains(t, text, code)
	shot("run-failures")

	// Queues: its attempt's job and its last look's, one failure linked to the operation.
	const queue = "listing-publish"
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(css(`header a[href="/queues"]`)), chromedp.WaitVisible(css(`#q-`+queue))))
	group := textOf(`section[aria-labelledby="q-` + queue + `"] article.failure`)
	require.Contains(t, group, "One failure of operation "+failedOp+": 2 failed jobs")
	require.Contains(t, group, code)
	require.NotContains(t, group, "message nacked")
	shot("run-queues")
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(css(`section[aria-labelledby="q-`+queue+`"] div.job a[href="/operations?id=`+failedOp+`"]`)),
		chromedp.WaitVisible(css(`#operation`))))
	require.Contains(t, textOf(`main`), code)

	// The sync's operation, from its workspace's page: a bar of the products synced so far.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"/workspaces/"+acct.WorkspaceID),
		chromedp.WaitVisible(css(`a[href="/operations?id=`+syncOp+`"]`))))
	shot("run-workspace")
	before := syncProgress()
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(css(`a[href="/operations?id=`+syncOp+`"]`)),
		chromedp.WaitVisible(css(`#progress progress`))))
	// The marketplace does not say how many products it holds: the bar runs without an end,
	// beside the count so far.
	m := regexp.MustCompile(`(\d+) done \(total unknown\)`).FindStringSubmatch(textOf(`#progress`))
	require.NotNil(t, m, textOf(`#progress`))
	done, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, done, before, "the page shows at least the progress the API showed before it")
	require.Less(t, done, 20_000.0)
	shot("run-product-sync")
	require.Positive(t, syncProgress(), "the sync was still running while it was looked at")
}

// screenshots returns shot: shot(name) saves a screenshot of the whole page bctx shows as
// name.png in the directory CONSOLE_SCREENSHOTS names, or, when it is unset, in the test's
// temporary directory (removed when the test ends).
func screenshots(t *testing.T, bctx context.Context) func(name string) {
	dir := os.Getenv("CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { t.Logf("screenshots in %s", dir) })
	}
	return func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
	}
}

// newBrowser starts headless chromium at path for the test; its context ends with the test
// or after 90 s.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	bctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelBrowser(); cancelAlloc() })
	return bctx
}

// mustJSON is v as JSON text.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

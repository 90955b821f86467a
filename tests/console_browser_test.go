package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// chromiumPath returns Debian's chromium, found as chromium on PATH (CHROMIUM overrides
// the name or path). Without it the test
// skips, except in CI (CI set, as .ci/run sets it), where it fails: `make browser-deps`
// installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	// The name the Makefile's BROWSER_CHECK looks for, so that make test warns exactly when
	// these tests skip.
	name := os.Getenv("CHROMIUM")
	if name == "" {
		name = "chromium"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium (%s) not found, and CI requires the browser test: run `make browser-deps`", name)
		}
		t.Skipf("chromium (%s) not found: the browser test is skipped here (it runs in CI; `make browser-deps` installs it)", name)
	}
	return path
}

// flakyPublisher fails every publish while broken, then hands messages to next.
type flakyPublisher struct {
	broken atomic.Bool
	next   message.Publisher
}

func (p *flakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.broken.Load() {
		return errors.New("store-verification publisher down: dial tcp 127.0.0.1:1: connection refused")
	}
	return p.next.Publish(topic, msgs...)
}

func (p *flakyPublisher) Close() error { return nil }

// The operator console in a real browser (headless Debian chromium through chromedp), served
// by the real `app console` binary as listing_operator: without a token it shows nothing; an
// operator signs in through the form, sees the dead letter that a failing destination left in
// a workspace the operator has nothing to do with, redrives it with a reason and sees it
// dispatched; the job then fails in its worker and the queues page shows the failed job's
// reason.
func TestConsoleInBrowser(t *testing.T) {
	browser := chromiumPath(t)
	t.Parallel()
	started := time.Now()
	db := pgtest.New(t)
	ctx := context.Background()
	prefix := seedPrefix()
	rdb := seedRedis(t, prefix)
	bcfg := bullmq.Config{Client: rdb, Prefix: prefix}
	const queue = "store-verification"

	// A workspace of some tenant, and one event of its store verification.
	ws, eventID := uuid.New(), uuid.New()
	_, err := db.Owner.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'Someone else''s shop')`, ws)
	require.NoError(t, err)
	_, err = db.Owner.Exec(ctx, `INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload)
		VALUES ($1, $2, 'store.verification_requested', $3, 'store', $4, $5)`,
		eventID, ws, queue, uuid.NewString(), fmt.Sprintf(`{"store_id":%q}`, uuid.NewString()))
	require.NoError(t, err)

	// The dispatcher (as app_user) with one attempt per event and a destination that is down.
	bp, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bcfg}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bp.Close() })
	flaky := &flakyPublisher{next: bp}
	flaky.broken.Store(true)
	d, err := outbox.NewDispatcher(outbox.DispatcherConfig{MaxAttempts: 1, PollInterval: 100 * time.Millisecond, MetricsInterval: -1},
		db.App, outbox.PublisherMap{queue: flaky}, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	dctx, stopDispatch := context.WithCancel(ctx)
	dispatched := make(chan error, 1)
	go func() { dispatched <- d.Run(dctx) }()
	t.Cleanup(func() { stopDispatch(); <-dispatched })
	status := func() string {
		var s string
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT status FROM outbox_all_events WHERE id = $1`, eventID).Scan(&s))
		return s
	}
	require.Eventually(t, func() bool { return status() == outbox.StatusDeadLetter }, 15*time.Second, 50*time.Millisecond)
	flaky.broken.Store(false) // the destination is fixed; only a redrive sends the event again

	// Its worker fails the job with a reason the operator must see.
	reason := "store verification failed: the platform answered 401 for shop " + eventID.String()[:8]
	w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: bcfg, Queue: queue, DrainDelay: 100 * time.Millisecond},
		func(context.Context, *bullmq.Job) (any, error) { return nil, bullmq.Unrecoverable(errors.New(reason)) })
	require.NoError(t, err)
	wctx, stopWorker := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() { worked <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-worked })

	// The console, as the real binary.
	const secret = "ada-browser-secret-0123456789"
	addr := seedFreeAddr(t)
	base := "http://" + addr
	proc := seedStartProc(t, "console", seedEnv(db.AppURL, prefix, map[string]string{
		"CONSOLE_ADDR":          addr,
		"CONSOLE_TOKENS":        "ada:" + secret,
		"OPERATOR_DATABASE_URL": db.OperatorURL,
	}), "console")
	seedWaitHTTP(t, proc, base+"/signin")

	// Without a token: nothing but the sign-in form, in the browser and for a script.
	resp, err := http.Get(base + "/outbox")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NotContains(t, string(body), eventID.String())

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 60*time.Second)
	defer cancelTimeout()

	var url, text string
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	textOf := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(css(sel)))
		require.NoError(t, err)
		return v
	}
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"/outbox"), chromedp.WaitVisible(css(`#token`))))
	url, err = chromedp.Run(bctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, base+"/signin", url)
	text = textOf(`body`)
	require.NotContains(t, text, eventID.String())
	require.NotContains(t, text, ws.String())

	// Sign in through the form.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.SendKeys(css(`#token`), secret),
		chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`#operator`)),
	))
	require.Equal(t, "ada", textOf(`#operator`))

	// The dead letter of the other workspace, with its error; redrive it with a reason.
	row := `#dl-` + eventID.String()
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(css(`a[href="/outbox"]`)), chromedp.WaitVisible(css(row))))
	text = textOf(row)
	require.Contains(t, text, ws.String())
	require.Contains(t, text, "store-verification publisher down")
	require.NoError(t, chromedp.Do(bctx,
		chromedp.SendKeys(css(row+` form[action="/outbox/redrive"] input[name="reason"]`), "destination back up"),
		chromedp.Click(css(row+` form[action="/outbox/redrive"] button`)),
		chromedp.WaitVisible(css(`#event-status`)),
	))
	seedEventually(t, 20*time.Second, func() bool {
		require.NoError(t, chromedp.Do(bctx, chromedp.Reload(), chromedp.WaitVisible(css(`#event-status`))))
		text = textOf(`#event-status`)
		return text == outbox.StatusDispatched
	}, "the redriven event was never shown dispatched")
	var by string
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT redriven_by FROM outbox_redrives WHERE event_id = $1 AND reason = 'destination back up'`,
		eventID).Scan(&by))
	require.Equal(t, "ada", by)

	// Its job failed in the worker: the queues page shows why.
	seedEventually(t, 20*time.Second, func() bool {
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"/queues"), chromedp.WaitVisible(css(`#q-`+queue))))
		text = textOf(`body`)
		return strings.Contains(text, reason)
	}, "the failed job's reason never showed on the queues page")
	require.Contains(t, text, eventID.String(), "the job id is the outbox event id")
	if dir := os.Getenv("CONSOLE_SCREENSHOTS"); dir != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dir+"/redriven-job-failed.png", png, 0o644))
	}
	t.Logf("browser test took %s", time.Since(started).Round(time.Millisecond))
}

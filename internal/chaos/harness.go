package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
)

// harness is one chaos run.
type harness struct {
	o   options
	log *slog.Logger

	rndMu sync.Mutex
	rnd   *mrand.Rand

	bin        string
	dbName     string
	ownerURL   string
	appURL     string
	owner      *pgxpool.Pool
	redis      *redisServer
	market     *marketplace.Sandbox
	ai         *aiprovider.Sandbox
	apiBase    string
	marketBase string
	aiBase     string
	pngURL     string
	serve      *proc
	dispatch   []*proc
	work       []*proc

	prefix    string                   // the children's BULLMQ_PREFIX
	chaosDone map[string]*atomic.Int64 // chaos actions performed, by name
	ledger    ledger                   // what the clients were told
}

// random returns a uniform float in [0, 1) from the run's seeded source.
func (h *harness) random() float64 {
	h.rndMu.Lock()
	defer h.rndMu.Unlock()
	return h.rnd.Float64()
}

func (h *harness) intn(n int) int {
	h.rndMu.Lock()
	defer h.rndMu.Unlock()
	return h.rnd.IntN(n)
}

// restartDelay is how long a killed process or Redis stays down: 0.3 s to -restart-delay.
func (h *harness) restartDelay() time.Duration {
	lo := 300 * time.Millisecond
	if h.o.restartDelay <= lo {
		return h.o.restartDelay
	}
	return lo + time.Duration(h.random()*float64(h.o.restartDelay-lo))
}

func (h *harness) run(ctx context.Context) (bool, error) {
	o := h.o
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return false, err
	}
	h.log.Info("chaos run", "dir", o.dir, "seed", o.seed, "duration", o.duration, "clients", o.clients,
		"chaos", o.chaos, "chaos_every", o.chaosEvery, "bound", o.bound(0))
	if err := h.build(ctx); err != nil {
		return false, err
	}
	cleanup, err := h.setup(ctx)
	defer cleanup()
	if err != nil {
		return false, err
	}
	accts, err := h.register(ctx)
	if err != nil {
		return false, err
	}
	clients := make([]*client, o.clients)
	for i := range clients {
		clients[i] = h.newClient(i, accts[i%len(accts)])
	}
	if err := h.warmUp(ctx, clients); err != nil {
		return false, err
	}

	// Load and chaos.
	loadCtx, stopLoad := context.WithTimeout(ctx, o.duration)
	defer stopLoad()
	chaosCtx, stopChaos := context.WithCancel(loadCtx)
	var chaosWG, loadWG sync.WaitGroup
	chaosWG.Add(2)
	go func() { defer chaosWG.Done(); h.chaosLoop(chaosCtx) }()
	go func() { defer chaosWG.Done(); h.ignoreKeyLoop(chaosCtx) }()
	progressCtx, stopProgress := context.WithCancel(ctx)
	go h.progress(progressCtx)
	start := time.Now()
	tokens := h.pace(loadCtx)
	for _, c := range clients {
		loadWG.Add(1)
		go func() { defer loadWG.Done(); c.loop(loadCtx, ctx, tokens) }()
	}
	<-loadCtx.Done()
	stopChaos()
	chaosWG.Wait()
	h.market.SetIgnoreIdempotencyKey(true) // the settling phase relies on the lookup alone
	if err := h.allUp(ctx); err != nil {
		stopProgress()
		return false, err
	}
	chaosStopped := time.Now()
	h.log.Info("chaos stopped; every process and Redis are up; waiting for the clients' last requests",
		"load", chaosStopped.Sub(start).Round(time.Second))
	loadWG.Wait()
	stopProgress()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	clientsDone := time.Now()

	set, err := h.settle(ctx, chaosStopped)
	if err != nil {
		return false, err
	}
	rep, err := h.collect(ctx, chaosStopped, clientsDone, set)
	if err != nil {
		return false, err
	}
	rep.print(os.Stdout, h)
	if !rep.ok() || o.keep {
		h.dbName = "" // keep it for investigation
	}
	return rep.ok(), nil
}

// build builds bin/app without the race detector.
func (h *harness) build(ctx context.Context) error {
	h.bin = filepath.Join("bin", "app")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", h.bin, "./cmd/app")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/app: %v: %s", err, out)
	}
	abs, err := filepath.Abs(h.bin)
	h.bin = abs
	return err
}

// setup creates the database, the Redis, the sandboxes and the children. The returned
// cleanup undoes whatever was done, also after an error.
func (h *harness) setup(ctx context.Context) (func(), error) {
	o := h.o
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}

	// The scratch database, migrated as `app migrate` does in development.
	h.dbName = "listing_chaos_" + randomHex(5)
	var err error
	if h.ownerURL, err = withDatabase(o.adminURL, h.dbName, ""); err != nil {
		return cleanup, err
	}
	h.appURL, _ = withDatabase(o.adminURL, h.dbName, "app_user")
	if _, err := postgres.Migrate(ctx, h.ownerURL, true); err != nil {
		return cleanup, fmt.Errorf("migrate %s: %w", h.dbName, err)
	}
	undo = append(undo, func() {
		if h.dbName == "" {
			return
		}
		if err := dropDatabase(o.adminURL, h.dbName); err != nil {
			h.log.Warn("drop database", "db", h.dbName, "err", err)
		}
	})
	if h.owner, err = pgxpool.New(ctx, h.ownerURL+"&pool_max_conns=2"); err != nil {
		return cleanup, err
	}
	undo = append(undo, h.owner.Close)

	// The Redis of the run.
	port := o.redisPort
	if port == 0 {
		if port, err = freePort(); err != nil {
			return cleanup, err
		}
	}
	redisDir, _ := filepath.Abs(filepath.Join(o.dir, "redis"))
	if err := os.MkdirAll(redisDir, 0o755); err != nil {
		return cleanup, err
	}
	h.redis = &redisServer{port: port, dir: redisDir}
	if err := h.redis.start(ctx); err != nil {
		return cleanup, err
	}
	undo = append(undo, h.redis.shutdown)

	// The sandboxes, in this process.
	if h.market, err = marketplace.New(marketplace.Config{}); err != nil {
		return cleanup, err
	}
	h.market.SetLatency(o.sandboxLatency)
	if h.ai, err = aiprovider.New(aiprovider.Config{APIKeys: []string{"sk-chaos"}}); err != nil {
		return cleanup, err
	}
	for _, s := range []struct {
		h   http.Handler
		url *string
	}{{h.market, &h.marketBase}, {h.ai, &h.aiBase}, {pngHandler(), &h.pngURL}} {
		srv, err := sandbox.Start("", s.h)
		if err != nil {
			return cleanup, err
		}
		undo = append(undo, func() { _ = srv.Close() })
		*s.url = srv.URL
	}
	h.pngURL += "/image.png"

	// The children.
	apiPort, err := freePort()
	if err != nil {
		return cleanup, err
	}
	storage, _ := filepath.Abs(filepath.Join(o.dir, "storage"))
	h.apiBase = "http://127.0.0.1:" + strconv.Itoa(apiPort)
	h.prefix = "chaos" + randomHex(4)
	env := map[string]string{
		"APP_ENV":              "development",
		"DATABASE_URL":         h.appURL,
		"DATABASE_MAX_CONNS":   strconv.Itoa(o.maxConns),
		"REDIS_URL":            h.redis.url(),
		"BULLMQ_PREFIX":        h.prefix,
		"HTTP_ADDR":            "127.0.0.1:" + strconv.Itoa(apiPort),
		"PUBLIC_BASE_URL":      h.apiBase,
		"LOG_FORMAT":           "text",
		"LOG_LEVEL":            "info",
		"AUTH_RATE_PER_MINUTE": "100000",
		"ACCESS_TOKEN_TTL":     "2h",
		"PLATFORM_BASE_URL":    h.marketBase,
		"AI_BASE_URL":          h.aiBase,
		"AI_API_KEY":           "sk-chaos",
		"STORAGE_DIR":          storage,
		"S3_BUCKET":            "",
		"FETCH_ALLOW_PRIVATE":  "true",
		"CLEANUP_INTERVAL":     "10m",
		"JOB_LOCK_DURATION":    o.lock.String(),
		// Short call time-outs: the call fences (two time-outs) stay short.
		"PLATFORM_TIMEOUT":     o.platformTimeout().String(),
		"AI_TIMEOUT":           o.platformTimeout().String(),
		"FETCH_TIMEOUT":        o.platformTimeout().String(),
		"JOB_STALLED_INTERVAL": o.stalledInterval.String(),
		"JOB_MAX_STALLS":       strconv.Itoa(o.maxStalls),
		"JOB_ATTEMPTS":         strconv.Itoa(o.jobAttempts),
		"WORKER_CONCURRENCY":   strconv.Itoa(o.concurrency),
		"OUTBOX_LEASE":         o.lease.String(),
		"RECONCILE_AFTER":      o.after.String(),
		"RECONCILE_INTERVAL":   o.interval.String(),
		"RECONCILE_MAX":        strconv.Itoa(o.reconcileMax),
	}
	h.serve = h.newProc("serve", env, "serve")
	h.dispatch = []*proc{h.newProc("dispatch-1", env, "dispatch"), h.newProc("dispatch-2", env, "dispatch")}
	h.work = []*proc{h.newProc("work-1", env, "work"), h.newProc("work-2", env, "work")}
	for _, p := range h.procs() {
		if err := p.start(); err != nil {
			return cleanup, err
		}
		go p.supervise()
		undo = append(undo, p.stop)
	}
	h.chaosDone = map[string]*atomic.Int64{}
	for name := range chaosActions {
		h.chaosDone[name] = &atomic.Int64{}
	}
	if err := h.waitReady(ctx, 60*time.Second); err != nil {
		return cleanup, err
	}
	// A child that cannot start (a setting it refuses) would only be restarted forever.
	time.Sleep(3 * time.Second)
	for _, p := range h.procs() {
		if p.unexpected.Load() > 0 {
			return cleanup, fmt.Errorf("%s exits on its own at start; see %s", p.name, p.logPath)
		}
	}
	h.log.Info("service up", "api", h.apiBase, "db", h.dbName, "redis", h.redis.url(), "prefix", env["BULLMQ_PREFIX"],
		"marketplace", h.marketBase, "logs", o.dir)
	return cleanup, nil
}

func (h *harness) procs() []*proc {
	return append(append([]*proc{h.serve}, h.dispatch...), h.work...)
}

// waitReady waits until serve answers /readyz with 200.
func (h *harness) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(h.apiBase + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("serve not ready after %s (see %s)", timeout, h.serve.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// allUp waits until Redis answers and every child runs again (the last chaos action may
// still have something down), and the API is ready.
func (h *harness) allUp(ctx context.Context) error {
	deadline := time.Now().Add(h.o.restartDelay + 30*time.Second)
	for {
		up := true
		if pong, err := h.redis.cli("ping"); err != nil || pong != "PONG" {
			up = false
		}
		for _, p := range h.procs() {
			up = up && p.running()
		}
		if up {
			return h.waitReady(ctx, 30*time.Second)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the service did not come back up after the chaos")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// progress logs a line every 10 s.
func (h *harness) progress(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		chaos := map[string]int64{}
		for k, v := range h.chaosDone {
			chaos[k] = v.Load()
		}
		var open int
		_ = h.owner.QueryRow(ctx, `SELECT count(*) FROM operations WHERE status NOT IN ('succeeded', 'failed')`).Scan(&open)
		h.log.Info("progress", "accepted", h.ledger.accepted(), "not_terminal", open, "chaos", fmt.Sprint(chaos),
			"ignore_key", h.market.Stats().IgnoreIdempotencyKey)
	}
}

// pngHandler serves a small PNG, the source of material transfers.
func pngHandler() http.Handler {
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	for x := range 16 {
		for y := range 16 {
			img.Set(x, y, color.RGBA{uint8(x * 16), uint8(y * 16), 128, 255})
		}
	}
	var buf bytes.Buffer
	_ = png.Encode(&buf, img)
	raw := buf.Bytes()
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(raw)
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// withDatabase returns base naming another database and, when user is set, another user
// (without password: the local server trusts local connections).
func withDatabase(base, database, user string) (string, error) {
	s, err := postgres.WithDatabase(base, database, user)
	if err != nil {
		return "", fmt.Errorf("bad -admin-url: %w", err)
	}
	u, _ := url.Parse(s)
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func dropDatabase(admin, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

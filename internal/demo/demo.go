// Package demo is the walkthrough of `make demo`: it starts a throwaway instance of the
// service (`app all` as a child process, on a database, ports, a Redis key prefix and a
// storage directory of its own, with the development sandboxes and FETCH_ALLOW_PRIVATE=true),
// drives every flow of the README over HTTP — register, log in, store, product, publication,
// product sync, AI task, draft save with If-Match, media upload of a real image, material
// transfer from a file server it serves on 127.0.0.1, listing update — printing each step's
// result and its operation's final state, and then stops and removes everything it started,
// also when a step fails or ctx is cancelled (Ctrl-C).
//
// It shares nothing with `make run` (another database, other ports, another Redis prefix),
// so both can run at once, and each run starts from nothing, so it can run again and again.
package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/infra/postgres"
)

// Config says where the demo finds the binary, the image and the shared servers.
type Config struct {
	// App is the path of the app binary (required).
	App string
	// Image is the path of the PNG the media and material-transfer steps send (required).
	Image string
	// PostgresURL connects as a superuser to an existing database of the PostgreSQL the demo
	// uses: the demo creates its own database there (through `app all`'s migration) and drops
	// it at the end. Default postgres://root@127.0.0.1:5432/postgres?sslmode=disable.
	PostgresURL string
	// RedisURL is the Redis of the queues; the demo's keys live under a prefix of its own and
	// are deleted at the end. Default redis://127.0.0.1:6379/0.
	RedisURL string
	// Out receives the walkthrough (required).
	Out io.Writer
	// OperationTimeout bounds the wait for one operation. Default 60s.
	OperationTimeout time.Duration
	// StartTimeout bounds the wait for the instance to be ready. Default 60s.
	StartTimeout time.Duration
	// OnStep, when set, is called after each step is printed.
	OnStep func(Step)
}

func (c *Config) setDefaults() {
	if c.PostgresURL == "" {
		c.PostgresURL = "postgres://root@127.0.0.1:5432/postgres?sslmode=disable"
	}
	if c.RedisURL == "" {
		c.RedisURL = "redis://127.0.0.1:6379/0"
	}
	if c.OperationTimeout <= 0 {
		c.OperationTimeout = 60 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 60 * time.Second
	}
}

// Result is what a run did.
type Result struct {
	// Steps are the steps that ran, in order.
	Steps []Step
}

// Step is one call of the walkthrough.
type Step struct {
	Name string
	// Status is the HTTP status of the call.
	Status int
	// Operation is the final status of the operation the call started ("" when none).
	Operation string
}

// Run performs the walkthrough against a fresh instance and removes the instance, whatever
// happens. It returns an error when a step did not go as the README says (a status other
// than the documented one, an operation that did not succeed) or when cleaning up failed.
func Run(ctx context.Context, cfg Config) (_ Result, err error) {
	cfg.setDefaults()
	if cfg.App == "" || cfg.Image == "" || cfg.Out == nil {
		return Result{}, errors.New("demo: App, Image and Out are required")
	}
	image, err := os.ReadFile(cfg.Image)
	if err != nil {
		return Result{}, fmt.Errorf("demo: the image: %w", err)
	}
	inst, err := start(ctx, cfg)
	if inst != nil {
		defer func() {
			inst.failed = err != nil && ctx.Err() == nil // then stop prints the instance's log
			if cerr := inst.stop(cfg); cerr != nil {
				fmt.Fprintf(cfg.Out, "cleaning up failed: %v\n", cerr)
				err = errors.Join(err, cerr)
			}
		}()
	}
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(cfg.Out, "interrupted while starting")
			err = ctx.Err()
		}
		return Result{}, err
	}
	w := &walk{cfg: cfg, base: inst.base, out: cfg.Out, http: &http.Client{Timeout: 30 * time.Second}, ctx: ctx}
	err = w.run(inst, image)
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(cfg.Out, "\ninterrupted after %d steps\n", len(w.result.Steps))
		err = ctx.Err()
	case err != nil:
		fmt.Fprintf(cfg.Out, "\nFAILED: %v\n", err)
	default:
		fmt.Fprintf(cfg.Out, "\nall %d steps done; every operation succeeded\n", len(w.result.Steps))
	}
	return w.result, err
}

// instance is the running service and everything started for it.
type instance struct {
	id, dbName, prefix, base string
	dir                      string
	cmd                      *exec.Cmd
	exited                   chan struct{}
	log                      *os.File
	files                    *http.Server
	filesURL                 string
	failed                   bool
}

// start prepares and starts the instance. A non-nil instance must be stopped, also with an
// error.
func start(ctx context.Context, cfg Config) (*instance, error) {
	id := randomHex(4)
	inst := &instance{id: id, dbName: "listing_demo_" + id, prefix: "demo-" + id, exited: make(chan struct{})}
	var err error
	if inst.dir, err = os.MkdirTemp("", "listing-demo-"); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if inst.log, err = os.Create(filepath.Join(inst.dir, "app.log")); err != nil {
		_ = os.RemoveAll(inst.dir)
		return nil, fmt.Errorf("demo: %w", err)
	}
	if err := inst.serveFiles(cfg.Image); err != nil {
		return inst, err
	}
	addrs := map[string]string{}
	for _, k := range []string{"HTTP_ADDR", "CONSOLE_ADDR", "SANDBOX_MARKETPLACE_ADDR", "SANDBOX_AI_ADDR"} {
		if addrs[k], err = freeAddr(); err != nil {
			return inst, err
		}
	}
	inst.base = "http://" + addrs["HTTP_ADDR"]
	owner, err := postgres.WithDatabase(cfg.PostgresURL, inst.dbName, "")
	if err != nil {
		return inst, err
	}
	app, _ := postgres.WithDatabase(cfg.PostgresURL, inst.dbName, "app_user")
	operator, _ := postgres.WithDatabase(cfg.PostgresURL, inst.dbName, "listing_operator")
	env := map[string]string{
		"APP_ENV": "development", "MIGRATE_DATABASE_URL": owner, "DATABASE_URL": app, "OPERATOR_DATABASE_URL": operator,
		"REDIS_URL": cfg.RedisURL, "REDIS_CLUSTER_ADDRS": "", "BULLMQ_PREFIX": inst.prefix, "QUEUE_TRANSPORT": "bullmq",
		"PUBLIC_BASE_URL": inst.base, "STORAGE_DIR": filepath.Join(inst.dir, "storage"), "S3_BUCKET": "",
		"PLATFORM_BASE_URL": "", "AI_BASE_URL": "", "FETCH_ALLOW_PRIVATE": "true", "LOG_FORMAT": "json", "LOG_LEVEL": "info",
		"CONSOLE_TOKENS": "", "ADMIN_ADDR": "",
	}
	for k, v := range addrs {
		env[k] = v
	}
	inst.cmd = exec.Command(cfg.App, "all")
	inst.cmd.Env = environ(env)
	inst.cmd.Stdout, inst.cmd.Stderr = inst.log, inst.log
	// A process group of its own: a Ctrl-C reaches the demo, which stops the instance itself;
	// should the demo die without stopping it, the instance gets SIGTERM (Linux).
	inst.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	fmt.Fprintf(cfg.Out, "listing demo: a throwaway instance at %s\n", inst.base)
	fmt.Fprintf(cfg.Out, "  database %s, Redis prefix %s, storage and log in %s\n", inst.dbName, inst.prefix, inst.dir)
	began := time.Now()
	if err := inst.cmd.Start(); err != nil {
		return inst, fmt.Errorf("demo: starting %s all: %w", cfg.App, err)
	}
	go func() { _ = inst.cmd.Wait(); close(inst.exited) }()
	if err := inst.waitReady(ctx, cfg.StartTimeout); err != nil {
		return inst, err
	}
	fmt.Fprintf(cfg.Out, "  `app all` is ready after %s: %s\n\n", time.Since(began).Round(10*time.Millisecond), inst.startupLine())
	return inst, nil
}

// serveFiles serves the image on 127.0.0.1, as the material transfer's source.
func (inst *instance) serveFiles(image string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: file server: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /mug.png", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, image) })
	inst.files = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	inst.filesURL = "http://" + ln.Addr().String()
	go func() { _ = inst.files.Serve(ln) }()
	return nil
}

// waitReady waits until /readyz answers 200.
func (inst *instance) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(inst.base + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-inst.exited:
			return fmt.Errorf("demo: `app all` exited before it was ready (%s)", inst.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: `app all` not ready after %s", timeout)
		}
	}
}

// startupLine summarizes the instance's start-up log line: its roles.
func (inst *instance) startupLine() string {
	raw, _ := os.ReadFile(inst.log.Name())
	for _, line := range strings.Split(string(raw), "\n") {
		var l struct {
			Msg   string   `json:"msg"`
			Roles []string `json:"roles"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "started" {
			return "roles " + strings.Join(l.Roles, ", ")
		}
	}
	return "no start-up line logged"
}

// stop ends the child (SIGTERM, SIGKILL after 30 s), drops the database, deletes the Redis
// keys and removes the directory. The log is printed first when the run failed.
func (inst *instance) stop(cfg Config) error {
	var errs []error
	if inst.cmd != nil && inst.cmd.Process != nil {
		select {
		case <-inst.exited:
			fmt.Fprintf(cfg.Out, "the instance had exited by itself (%s)\n", inst.cmd.ProcessState)
		default:
			fmt.Fprint(cfg.Out, "stopping the instance… ")
			_ = inst.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-inst.exited:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-inst.cmd.Process.Pid, syscall.SIGKILL)
				<-inst.exited
			}
			code := inst.cmd.ProcessState.ExitCode()
			fmt.Fprintf(cfg.Out, "stopped (exit %d)\n", code)
			if code != 0 {
				errs = append(errs, fmt.Errorf("`app all` exited %d after SIGTERM, not 0", code))
			}
		}
	}
	if inst.files != nil {
		_ = inst.files.Close()
	}
	if inst.failed && inst.log != nil {
		raw, _ := os.ReadFile(inst.log.Name())
		fmt.Fprintf(cfg.Out, "--- the instance's log (last lines) ---\n%s--- end of log ---\n", tail(string(raw), 40))
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dropDatabase(cctx, cfg.PostgresURL, inst.dbName); err != nil {
		errs = append(errs, err)
	}
	if err := deleteKeys(cctx, cfg.RedisURL, inst.prefix); err != nil {
		errs = append(errs, err)
	}
	if inst.log != nil {
		_ = inst.log.Close()
	}
	if err := os.RemoveAll(inst.dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		fmt.Fprintf(cfg.Out, "removed database %s, Redis keys %s:*, and %s\n", inst.dbName, inst.prefix, inst.dir)
	}
	return errors.Join(errs...)
}

func dropDatabase(ctx context.Context, admin, name string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("demo: dropping %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("demo: dropping %s: %w", name, err)
	}
	return nil
}

func deleteKeys(ctx context.Context, redisURL, prefix string) error {
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return fmt.Errorf("demo: REDIS_URL: %w", err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, prefix+":*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("demo: deleting Redis keys: %w", err)
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := rdb.Del(ctx, keys[:n]...).Err(); err != nil {
			return fmt.Errorf("demo: deleting Redis keys: %w", err)
		}
		keys = keys[n:]
	}
	return nil
}

// walk is one walkthrough over HTTP.
type walk struct {
	cfg    Config
	ctx    context.Context
	base   string
	out    io.Writer
	http   *http.Client
	token  string
	ws     string // /v1/workspaces/{id}
	result Result
}

// call is one HTTP exchange.
type call struct {
	method, path string
	body         any // JSON, or []byte sent as is
	header       map[string]string
	key          bool   // send a new Idempotency-Key
	keyValue     string // send this Idempotency-Key
	want         int
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (w *walk) do(c call) (reply, error) {
	var body io.Reader
	ct := "application/json"
	switch b := c.body.(type) {
	case nil:
	case []byte:
		body, ct = bytes.NewReader(b), "application/octet-stream"
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return reply{}, err
		}
		body = bytes.NewReader(raw)
	}
	target := c.path
	if !strings.HasPrefix(target, "http") {
		target = w.base + c.path
	}
	req, err := http.NewRequestWithContext(w.ctx, c.method, target, body)
	if err != nil {
		return reply{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", ct)
	}
	if w.token != "" && strings.HasPrefix(target, w.base+"/v1/") {
		req.Header.Set("Authorization", "Bearer "+w.token)
	}
	if c.key {
		c.keyValue = uuid.NewString()
	}
	if c.keyValue != "" {
		req.Header.Set("Idempotency-Key", c.keyValue)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %w", c.method, c.path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %w", c.method, c.path, err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	if c.want != 0 && r.status != c.want {
		return r, fmt.Errorf("%s %s: %d, want %d: %s", c.method, c.path, r.status, c.want, strings.TrimSpace(string(raw)))
	}
	return r, nil
}

// step prints one line: the step's number and name, the call, its status and what came of it.
func (w *walk) step(name string, c call, r reply, note string, operation string) {
	st := Step{Name: name, Status: r.status, Operation: operation}
	w.result.Steps = append(w.result.Steps, st)
	if w.cfg.OnStep != nil {
		defer w.cfg.OnStep(st)
	}
	path := c.path
	if w.ws != "" {
		path = strings.Replace(path, w.ws, "…", 1)
	}
	if u, err := url.Parse(path); err == nil && u.Host != "" {
		path = "(the upload URL)"
	}
	path = uuidRE.ReplaceAllStringFunc(path, func(id string) string { return id[:4] + "…" })
	fmt.Fprintf(w.out, "%2d. %-21s %-4s %-38s %d  %s\n", len(w.result.Steps), name, c.method, path, r.status, note)
}

// wait polls the operation until it is finished and returns it.
func (w *walk) wait(op map[string]any) (map[string]any, time.Duration, error) {
	id, _ := op["id"].(string)
	began := time.Now()
	deadline := began.Add(w.cfg.OperationTimeout)
	for {
		r, err := w.do(call{method: "GET", path: w.ws + "/operations/" + id, want: http.StatusOK})
		if err != nil {
			return nil, 0, err
		}
		cur, _ := r.body["operation"].(map[string]any)
		switch cur["status"] {
		case "succeeded":
			return cur, time.Since(began), nil
		case "failed":
			return cur, time.Since(began), fmt.Errorf("operation %s (%s) failed: %v", id, cur["type"], cur["error"])
		}
		if time.Now().After(deadline) {
			return cur, time.Since(began), fmt.Errorf("operation %s (%s) still %s after %s", id, cur["type"], cur["status"], w.cfg.OperationTimeout)
		}
		select {
		case <-w.ctx.Done():
			return nil, 0, w.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// started runs a call that starts asynchronous work, waits for its operation and prints the
// step with the operation's final state. It returns the resource named name.
func (w *walk) started(name string, c call, resource string, describe func(res, op map[string]any) string) (map[string]any, error) {
	r, err := w.do(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	op, _ := r.body["operation"].(map[string]any)
	final, took, err := w.wait(op)
	if err != nil {
		w.step(name, c, r, fmt.Sprintf("operation %v", final["status"]), fmt.Sprint(final["status"]))
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	res, _ := r.body[resource].(map[string]any)
	note := fmt.Sprintf("%s %s → operation %s succeeded in %s", resource, short(res["id"]), op["type"], took.Round(10*time.Millisecond))
	if describe != nil {
		if d := describe(res, final); d != "" {
			note += "; " + d
		}
	}
	w.step(name, c, r, note, "succeeded")
	return res, nil
}

// get reads a resource back.
func (w *walk) get(path, name string) (map[string]any, error) {
	r, err := w.do(call{method: "GET", path: w.ws + path, want: http.StatusOK})
	if err != nil {
		return nil, err
	}
	v, _ := r.body[name].(map[string]any)
	return v, nil
}

func (w *walk) run(inst *instance, image []byte) error {
	// The API's documentation: / leads to /docs, the OpenAPI document as a page.
	c := call{method: "GET", path: "/", want: http.StatusOK}
	r, err := w.do(c)
	if err != nil {
		return fmt.Errorf("docs: %w", err)
	}
	w.step("API documentation", c, r, fmt.Sprintf("%s/docs (%d endpoints), the document at %s/openapi.yaml",
		w.base, strings.Count(string(r.raw), `<section class="op" id="`)-strings.Count(string(r.raw), `id="schema-`), w.base), "")

	// An account, its workspace, a session.
	email := "ada-" + inst.id + "@example.com"
	password := "correct horse battery staple"
	c = call{method: "POST", path: "/v1/auth/register", body: map[string]any{"email": email, "password": password,
		"workspace_name": "Acme"}, want: http.StatusCreated}
	if r, err = w.do(c); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	wsID, _ := r.body["workspace"].(map[string]any)["id"].(string)
	w.step("register", c, r, fmt.Sprintf("user %s, workspace %s", email, short(wsID)), "")
	c = call{method: "POST", path: "/v1/auth/login", body: map[string]any{"email": email, "password": password}, want: http.StatusOK}
	if r, err = w.do(c); err != nil {
		return fmt.Errorf("log in: %w", err)
	}
	w.token, _ = r.body["access_token"].(string)
	w.ws = "/v1/workspaces/" + wsID
	w.step("log in", c, r, fmt.Sprintf("access token for %v s, refresh token", r.body["expires_in"]), "")

	// 3. A store, verified against the marketplace sandbox; its replay.
	storeBody := map[string]any{"platform": "sandbox", "shop_id": "shop-1", "name": "My shop",
		"credentials": map[string]string{"api_key": "sk_test_123"}}
	key := uuid.NewString()
	c = call{method: "POST", path: w.ws + "/stores", body: storeBody, keyValue: key, want: http.StatusCreated}
	store, err := w.started("store", c, "store", nil)
	if err != nil {
		return err
	}
	storeID, _ := store["id"].(string)
	if store, err = w.get("/stores/"+storeID, "store"); err != nil {
		return err
	}
	if store["status"] != "verified" {
		return fmt.Errorf("store: %v, want verified", store["status"])
	}
	w.note("the store is %v (shop name %q)", store["status"], store["shop_name"])
	c = call{method: "POST", path: w.ws + "/stores", body: storeBody, keyValue: key, want: http.StatusCreated}
	if r, err = w.do(c); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if r.header.Get("Idempotent-Replayed") != "true" {
		return errors.New("replay: no Idempotent-Replayed: true")
	}
	w.step("same request again", c, r, "Idempotent-Replayed: true, the same store: nothing done twice", "")

	// 4. A product.
	c = call{method: "POST", path: w.ws + "/products", body: map[string]any{"title": "Mug", "price": "9.90", "currency": "EUR"},
		want: http.StatusCreated}
	if r, err = w.do(c); err != nil {
		return fmt.Errorf("product: %w", err)
	}
	product, _ := r.body["product"].(map[string]any)
	productID, _ := product["id"].(string)
	w.step("product", c, r, fmt.Sprintf("product %s, revision %v, ETag %s", short(productID), product["revision"], r.header.Get("ETag")), "")

	// 5. Its first publication to the store.
	c = call{method: "POST", path: w.ws + "/products/" + productID + "/publications", body: map[string]any{"store_id": storeID},
		key: true, want: http.StatusAccepted}
	pub, err := w.started("publish", c, "publication", nil)
	if err != nil {
		return err
	}
	pubID, _ := pub["id"].(string)
	if pub, err = w.get("/publications/"+pubID, "publication"); err != nil {
		return err
	}
	w.note("platform product %v", pub["external_product_id"])

	// 6. A full sync of the store's online products.
	c = call{method: "POST", path: w.ws + "/stores/" + storeID + "/product-syncs", body: map[string]any{}, key: true, want: http.StatusAccepted}
	sync, err := w.started("product sync", c, "sync", nil)
	if err != nil {
		return err
	}
	if sync, err = w.get("/product-syncs/"+fmt.Sprint(sync["id"]), "sync"); err != nil {
		return err
	}
	w.note("%v page(s), %v product(s) synced", sync["pages_done"], sync["items_synced"])

	// 7. An AI task.
	c = call{method: "POST", path: w.ws + "/ai-tasks", body: map[string]any{"kind": "text", "product_id": productID,
		"input": map[string]any{"prompt": "a short description"}}, key: true, want: http.StatusAccepted}
	task, err := w.started("AI task", c, "ai_task", nil)
	if err != nil {
		return err
	}
	if task, err = w.get("/ai-tasks/"+fmt.Sprint(task["id"]), "ai_task"); err != nil {
		return err
	}
	out, _ := json.Marshal(task["output"])
	w.note("output %s", ellipsis(string(out), 70))

	// 8. A draft save with If-Match (no Idempotency-Key: the revision guards it).
	c = call{method: "PUT", path: w.ws + "/products/" + productID + "/draft", header: map[string]string{"If-Match": `"1"`},
		body: map[string]any{"title": "Mug XL", "price": "12.50", "currency": "EUR"}, want: http.StatusOK}
	if r, err = w.do(c); err != nil {
		return fmt.Errorf("draft save: %w", err)
	}
	product, _ = r.body["product"].(map[string]any)
	w.step("draft save (If-Match)", c, r, fmt.Sprintf("revision %v, ETag %s", product["revision"], r.header.Get("ETag")), "")
	c.want = http.StatusPreconditionFailed
	if r, err = w.do(c); err != nil {
		return fmt.Errorf("stale draft save: %w", err)
	}
	w.step("stale If-Match", c, r, fmt.Sprintf("%v: the revision moved on", r.body["code"]), "")

	// 9. Media: describe it, PUT the bytes to the upload URL, complete it.
	c = call{method: "POST", path: w.ws + "/media", body: map[string]any{"filename": "mug.png", "content_type": "image/png",
		"size": len(image)}, want: http.StatusCreated}
	if r, err = w.do(c); err != nil {
		return fmt.Errorf("media: %w", err)
	}
	media, _ := r.body["media"].(map[string]any)
	mediaID, _ := media["id"].(string)
	upload, _ := r.body["upload"].(map[string]any)
	w.step("media", c, r, fmt.Sprintf("media %s (%d bytes), upload URL issued", short(mediaID), len(image)), "")
	headers := map[string]string{}
	if h, ok := upload["headers"].(map[string]any); ok {
		for k, v := range h {
			headers[k] = fmt.Sprint(v)
		}
	}
	method, _ := upload["method"].(string)
	uploadURL, _ := upload["url"].(string)
	c = call{method: method, path: uploadURL, body: image, header: headers}
	if r, err = w.do(c); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	if r.status/100 != 2 {
		return fmt.Errorf("upload: %d: %s", r.status, r.raw)
	}
	w.step("upload the bytes", c, r, "the image is uploaded", "")
	c = call{method: "POST", path: w.ws + "/media/" + mediaID + "/complete", body: map[string]any{}, key: true, want: http.StatusAccepted}
	if _, err := w.started("complete the upload", c, "media", nil); err != nil {
		return err
	}
	if media, err = w.get("/media/"+mediaID, "media"); err != nil {
		return err
	}
	variants, _ := media["variants"].([]any)
	w.note("media %v: %vx%v %v, %d variant(s)", media["status"], media["width"], media["height"], media["sniffed_type"], len(variants))

	// 10. A material transfer from the demo's file server (a private address: FETCH_ALLOW_PRIVATE=true).
	c = call{method: "POST", path: w.ws + "/material-transfers", body: map[string]any{"source_url": inst.filesURL + "/mug.png"},
		key: true, want: http.StatusAccepted}
	transfer, err := w.started("material transfer", c, "transfer", nil)
	if err != nil {
		return err
	}
	if transfer, err = w.get("/material-transfers/"+fmt.Sprint(transfer["id"]), "transfer"); err != nil {
		return err
	}
	w.note("%v bytes copied from %s into media %s", transfer["bytes"], inst.filesURL+"/mug.png", short(transfer["media_id"]))

	// 11. A listing update: push the saved draft (revision 2) to the platform product.
	c = call{method: "POST", path: w.ws + "/publications/" + pubID + "/updates", body: map[string]any{}, key: true, want: http.StatusAccepted}
	if _, err := w.started("listing update", c, "update", func(res, op map[string]any) string {
		if r, ok := op["result"].(map[string]any); ok {
			return fmt.Sprintf("revision %v %v", res["product_revision"], r["outcome"])
		}
		return ""
	}); err != nil {
		return err
	}

	// The operations, as a client lists them.
	c = call{method: "GET", path: w.ws + "/operations?limit=100", want: http.StatusOK}
	if r, err = w.do(c); err != nil {
		return fmt.Errorf("operations: %w", err)
	}
	items, _ := r.body["items"].([]any)
	byStatus := map[string]int{}
	for _, it := range items {
		op, _ := it.(map[string]any)
		byStatus[fmt.Sprint(op["status"])]++
	}
	w.step("operations", c, r, fmt.Sprintf("%d operations, %d succeeded", len(items), byStatus["succeeded"]), "")
	if len(byStatus) != 1 || byStatus["succeeded"] == 0 {
		return fmt.Errorf("operations: %v, want every one succeeded", byStatus)
	}
	return nil
}

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// note prints a detail under the last step.
func (w *walk) note(format string, args ...any) {
	fmt.Fprintf(w.out, "    %s\n", fmt.Sprintf(format, args...))
}

func short(id any) string {
	s := fmt.Sprint(id)
	if len(s) > 8 {
		return s[:8] + "…"
	}
	return s
}

func ellipsis(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func tail(s string, lines int) string {
	all := strings.SplitAfter(s, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "")
}

// environ is this process's environment with env on top (env's keys replace inherited ones).
func environ(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !has(env, k) {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

func has(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("demo: finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

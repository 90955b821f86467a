package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/infra/idem"
)

// Kinds of client requests. Every one but kindProduct is answered with an operation.
const (
	kindStore       = "store"       // POST …/stores: a store and its verification
	kindProduct     = "product"     // POST …/products (idempotent, no operation)
	kindPublication = "publication" // POST …/products/{id}/publications: a first publication
	kindSync        = "sync"        // POST …/stores/{id}/product-syncs
	kindAI          = "ai"          // POST …/ai-tasks
	kindTransfer    = "transfer"    // POST …/material-transfers
)

// weights of the actions a client draws.
var weights = []struct {
	action string
	weight int
}{{kindStore, 5}, {kindPublication, 40}, {kindSync, 10}, {kindAI, 30}, {kindTransfer, 15}}

// ledger is what the clients were told: accepted requests with their operations, requests
// refused (4xx) by code, and requests given up after -request-budget of retries (their
// outcome is unknown to the client: they may have committed).
type ledger struct {
	mu        sync.Mutex
	ops       map[string]string // operation id → kind
	byKind    map[string]int    // accepted requests by kind (products: 201s)
	refused   map[string]int    // "kind status code" → count
	abandoned map[string]int    // kind → requests given up
	retries   int               // requests sent again with the same key
	replayed  int               // answers with Idempotent-Replayed: true
}

func (l *ledger) accept(kind, opID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ops == nil {
		l.ops, l.byKind = map[string]string{}, map[string]int{}
	}
	l.byKind[kind]++
	if opID != "" {
		l.ops[opID] = kind
	}
}

func (l *ledger) refuse(kind string, status int, code string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused == nil {
		l.refused = map[string]int{}
	}
	l.refused[fmt.Sprintf("%s %d %s", kind, status, code)]++
}

func (l *ledger) abandon(kind string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.abandoned == nil {
		l.abandoned = map[string]int{}
	}
	l.abandoned[kind]++
}

func (l *ledger) count(retries, replayed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.retries += retries
	l.replayed += replayed
}

// accepted is the number of accepted requests with an operation.
func (l *ledger) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ops)
}

// account is a registered user and its workspace.
type account struct {
	email, workspace, token string
}

// client is one simulated client: its own stores and products in one account's workspace.
type client struct {
	h        *harness
	n        int
	acct     account
	rnd      *mrand.Rand
	http     *http.Client
	seq      int
	stores   []string // stores[0] was verified during the warm-up
	products []string
}

func (h *harness) newClient(n int, acct account) *client {
	return &client{h: h, n: n, acct: acct, rnd: mrand.New(mrand.NewPCG(h.o.seed, uint64(n))),
		http: &http.Client{Timeout: 30 * time.Second}}
}

var errAbandoned = errors.New("request given up after the retry budget")

// reply is a decoded answer.
type reply struct {
	status int
	body   map[string]any
}

func (r reply) field(object, name string) string {
	o, _ := r.body[object].(map[string]any)
	s, _ := o[name].(string)
	return s
}

func (r reply) code() string { s, _ := r.body["code"].(string); return s }

// send performs one request and retries it, with the same Idempotency-Key and body, on
// network errors, 5xx, 429 and IDEMPOTENCY_REQUEST_IN_PROGRESS, for at most
// -request-budget. key "" sends none.
func (c *client) send(ctx context.Context, method, path, key string, body any) (reply, error) {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return reply{}, err
		}
	}
	deadline := time.Now().Add(c.h.o.requestBudget)
	var retries, replayed int
	defer func() { c.h.ledger.count(retries, replayed) }()
	for attempt := 0; ; attempt++ {
		r, replay, err := c.once(ctx, method, path, key, raw)
		if err == nil && r.status < 500 && r.status != http.StatusTooManyRequests &&
			!(r.status == http.StatusConflict && r.code() == idem.CodeRequestInProgress) {
			if replay {
				replayed++
			}
			return r, nil
		}
		if ctx.Err() != nil {
			return reply{}, ctx.Err()
		}
		if time.Now().After(deadline) {
			return r, errAbandoned
		}
		retries++
		backoff := min(100*time.Millisecond<<min(attempt, 5), 2*time.Second)
		select {
		case <-ctx.Done():
			return reply{}, ctx.Err()
		case <-time.After(backoff/2 + time.Duration(c.rnd.Int64N(int64(backoff/2)+1))):
		}
	}
}

func (c *client) once(ctx context.Context, method, path, key string, raw []byte) (reply, bool, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.h.apiBase+path, bytes.NewReader(raw))
	if err != nil {
		return reply{}, false, err
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.acct.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.acct.token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return reply{}, false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, false, err
	}
	r := reply{status: resp.StatusCode}
	_ = json.Unmarshal(b, &r.body)
	return r, resp.Header.Get("Idempotent-Replayed") == "true", nil
}

// command sends an idempotent request of kind under a fresh key and records its outcome.
// It returns the reply when it was accepted.
func (c *client) command(ctx context.Context, kind, path string, body any) (reply, bool) {
	r, err := c.send(ctx, http.MethodPost, "/v1/workspaces/"+c.acct.workspace+path, uuid.NewString(), body)
	switch {
	case errors.Is(err, errAbandoned):
		c.h.ledger.abandon(kind)
		return r, false
	case err != nil:
		return r, false // the run is being interrupted
	case r.status >= 200 && r.status < 300:
		op := r.field("operation", "id")
		if op == "" && kind != kindProduct {
			c.h.ledger.refuse(kind, r.status, "NO_OPERATION")
			return r, false
		}
		c.h.ledger.accept(kind, op)
		return r, true
	default:
		c.h.ledger.refuse(kind, r.status, r.code())
		return r, false
	}
}

func (c *client) createStore(ctx context.Context) (storeID, opID string, ok bool) {
	c.seq++
	shop := fmt.Sprintf("c%d-s%d", c.n, c.seq)
	r, ok := c.command(ctx, kindStore, "/stores", map[string]any{"platform": "sandbox", "shop_id": shop,
		"name": "Shop " + shop, "credentials": map[string]string{"api_key": "sk_test_" + shop}})
	if !ok {
		return "", "", false
	}
	c.stores = append(c.stores, r.field("store", "id"))
	return r.field("store", "id"), r.field("operation", "id"), true
}

func (c *client) createProduct(ctx context.Context) (string, bool) {
	c.seq++
	r, ok := c.command(ctx, kindProduct, "/products", map[string]any{"title": fmt.Sprintf("Mug %d-%d", c.n, c.seq),
		"description": "A mug", "price": "9.90", "currency": "EUR"})
	if !ok {
		return "", false
	}
	id := r.field("product", "id")
	c.products = append(c.products, id)
	return id, true
}

// store picks one of the client's stores, mostly the verified one.
func (c *client) store() string {
	if c.rnd.IntN(10) < 8 {
		return c.stores[0]
	}
	return c.stores[c.rnd.IntN(len(c.stores))]
}

// act performs one action of the weights.
func (c *client) act(ctx context.Context) {
	total := 0
	for _, w := range weights {
		total += w.weight
	}
	n := c.rnd.IntN(total)
	action := ""
	for _, w := range weights {
		if n -= w.weight; n < 0 {
			action = w.action
			break
		}
	}
	switch action {
	case kindStore:
		c.createStore(ctx)
	case kindPublication:
		if p, ok := c.createProduct(ctx); ok {
			c.command(ctx, kindPublication, "/products/"+p+"/publications", map[string]any{"store_id": c.store()})
		}
	case kindSync:
		c.command(ctx, kindSync, "/stores/"+c.store()+"/product-syncs", map[string]any{})
	case kindAI:
		p := ""
		if len(c.products) > 0 {
			p = c.products[c.rnd.IntN(len(c.products))]
		} else if id, ok := c.createProduct(ctx); ok {
			p = id
		} else {
			return
		}
		c.seq++
		c.command(ctx, kindAI, "/ai-tasks", map[string]any{"kind": "text", "product_id": p,
			"input": map[string]any{"prompt": fmt.Sprintf("a short description, please (%d-%d)", c.n, c.seq)}})
	case kindTransfer:
		c.command(ctx, kindTransfer, "/material-transfers", map[string]any{"source_url": c.h.pngURL})
	}
}

// loop acts until load ends; requests in flight finish (with their retries) under run.
// With -rate, each action first takes a token of tokens.
func (c *client) loop(load, run context.Context, tokens <-chan struct{}) {
	for load.Err() == nil && run.Err() == nil {
		if tokens != nil {
			select {
			case <-tokens:
			case <-load.Done():
				return
			}
		}
		c.act(run)
	}
}

// pace hands out -rate tokens per second until ctx ends (nil without -rate).
func (h *harness) pace(ctx context.Context) <-chan struct{} {
	if h.o.rate <= 0 {
		return nil
	}
	tokens := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Duration(float64(time.Second) / h.o.rate))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			select {
			case tokens <- struct{}{}:
			case <-ctx.Done():
				return
			default: // every client is busy: the token is dropped, the rate is a ceiling
			}
		}
	}()
	return tokens
}

// register registers -accounts accounts (before any chaos).
func (h *harness) register(ctx context.Context) ([]account, error) {
	run := randomHex(3)
	var accts []account
	for i := range h.o.accounts {
		c := &client{h: h, http: &http.Client{Timeout: 30 * time.Second}, rnd: mrand.New(mrand.NewPCG(1, 2))}
		r, err := c.send(ctx, http.MethodPost, "/v1/auth/register", "", map[string]string{
			"email": fmt.Sprintf("chaos-%s-%d@example.com", run, i), "password": "correct horse battery staple",
			"workspace_name": fmt.Sprintf("Chaos %d", i)})
		if err != nil || r.status != http.StatusCreated {
			return nil, fmt.Errorf("register: %d %v %v", r.status, r.body, err)
		}
		accts = append(accts, account{email: fmt.Sprintf("chaos-%s-%d@example.com", run, i),
			workspace: r.field("workspace", "id"), token: r.body["access_token"].(string)})
	}
	return accts, nil
}

// warmUp gives every client a verified store (before any chaos).
func (h *harness) warmUp(ctx context.Context, clients []*client) error {
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, op, ok := c.createStore(ctx)
			if !ok {
				errs[i] = fmt.Errorf("client %d: store not accepted", i)
				return
			}
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				r, err := c.send(ctx, http.MethodGet, "/v1/workspaces/"+c.acct.workspace+"/operations/"+op, "", nil)
				if err != nil {
					errs[i] = err
					return
				}
				switch r.field("operation", "status") {
				case "succeeded":
					return
				case "failed":
					errs[i] = fmt.Errorf("client %d: store verification failed: %v", i, r.body)
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
			errs[i] = fmt.Errorf("client %d: store not verified within 2m", i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	h.log.Info("warm-up done: every client has a verified store", "clients", len(clients))
	return nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/console"
	"github.com/listingkit/listing/infra/postgres"
)

// watchConsole runs, on db and the queues under prefix, what an operator's open overview
// costs the service: the console's sampler (Server.Sample ten seconds after each minute ends,
// as Server.RunSampler calls it; each round timed)
// and the overview fetched every `every` by a signed-in browser, in turn the last hour, the
// last day and one flow's charts (the page reloads itself every 60 s; a shorter period stands
// for several operators). The measured sections call it
// before their measured period when -console is set; stop ends it and prints how many pages
// were drawn and how long they took.
func watchConsole(ctx context.Context, o options, db *scratch, rdb *redis.Client, prefix string) (stop func(), err error) {
	operatorURL, err := withDatabase(db.admin, db.name, "listing_operator")
	if err != nil {
		return nil, err
	}
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: operatorURL, MaxConns: 4})
	if err != nil {
		return nil, fmt.Errorf("console: connect as listing_operator: %w", err)
	}
	cfg := console.Config{Pool: pool, Queues: flows.Queues(), BullMQ: bullmq.Config{Client: rdb, Prefix: prefix},
		Logger: slog.New(slog.DiscardHandler)}
	for _, f := range flows.All() {
		cfg.Flows = append(cfg.Flows, console.Flow{Name: f.Name, Queue: f.Queue, Table: f.Table, Operation: f.Operation,
			RequestEvent: f.Request.EventType()})
	}
	srv, err := console.New(cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	web := httptest.NewServer(srv)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 30 * time.Second}

	wctx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	var draws, samples []time.Duration
	var failures int
	running.Go(func() {
		for {
			now := time.Now()
			t := time.NewTimer(now.Truncate(time.Minute).Add(time.Minute + 10*time.Second).Sub(now))
			select {
			case <-wctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			began := time.Now()
			if err := srv.Sample(wctx); err == nil {
				samples = append(samples, time.Since(began))
			} else if wctx.Err() == nil {
				fmt.Printf("   console: sample: %v\n", err)
			}
		}
	})
	running.Go(func() {
		tick := time.NewTicker(o.console)
		defer tick.Stop()
		pages := []string{"/", "/?range=day", "/?flow=" + cfg.Flows[0].Name}
		for i := 0; ; i++ {
			began := time.Now()
			req, _ := http.NewRequestWithContext(wctx, http.MethodGet, web.URL+pages[i%len(pages)], nil)
			resp, err := client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			switch {
			case wctx.Err() != nil:
				return
			case err != nil || resp.StatusCode != http.StatusOK:
				failures++
			default:
				draws = append(draws, time.Since(began))
			}
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() {
		cancel()
		running.Wait()
		web.Close()
		pool.Close()
		slices.Sort(draws)
		if len(draws) == 0 {
			fmt.Printf("   console: no overview drawn (%d failed)\n", failures)
			return
		}
		fmt.Printf("   console: overview drawn %d times every %s (hour, day, one flow in turn; %d failed), p50 %s, max %s; %d samples taking %v\n",
			len(draws), o.console, failures, ms(percentile(draws, 0.5)), ms(draws[len(draws)-1]), len(samples), samples)
	}, nil
}

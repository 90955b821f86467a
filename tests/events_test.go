package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/cloudevent"
	"github.com/listingkit/listing/infra/eventstream"
	"github.com/listingkit/listing/internal/servicetest"
)

var (
	eventsNPMOnce sync.Once
	eventsNPMErr  error
)

// eventsNodeDir is the Node.js harness holding events-consumer.mjs (ioredis from its lock file).
func eventsNodeDir() string {
	d, _ := filepath.Abs("bullmqnode")
	return d
}

// requireEventsNode skips without node and installs the harness (npm ci) when node_modules
// is missing.
func requireEventsNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the Node.js consumer example needs it (CI has it)")
	}
	eventsNPMOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(eventsNodeDir(), "node_modules", "ioredis", "package.json")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = eventsNodeDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			eventsNPMErr = fmt.Errorf("npm ci in %s: %w\n%s", eventsNodeDir(), err, out)
		}
	})
	require.NoError(t, eventsNPMErr)
}

// nodeEvent is one line of events-consumer.mjs.
type nodeEvent struct {
	Entry       string          `json:"entry"`
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Subject     string          `json:"subject"`
	WorkspaceID string          `json:"workspaceid"`
	Time        string          `json:"time"`
	Data        json.RawMessage `json:"data"`
	Acked       bool            `json:"acked"`
	Lost        bool            `json:"lost"`
	Done        bool            `json:"done"`
	Reason      string          `json:"reason"`
}

// runNodeConsumer runs events-consumer.mjs to its end and returns the entries it printed and
// why it stopped.
func runNodeConsumer(t *testing.T, redisURL string, cfg map[string]any) ([]nodeEvent, string) {
	t.Helper()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "events-consumer.mjs", string(raw))
	cmd.Dir = eventsNodeDir()
	cmd.Env = append(os.Environ(), "REDIS_URL="+redisURL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node events-consumer.mjs: %s", stderr.String())
	var events []nodeEvent
	reason := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var e nodeEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "%s", sc.Text())
		if e.Done {
			reason = e.Reason
			continue
		}
		events = append(events, e)
	}
	require.NotEmpty(t, reason, "the consumer did not finish: %s", out)
	return events, reason
}

// waitOutboxDrained waits until every outbox event was dispatched (so the stream holds them all).
func waitOutboxDrained(t *testing.T, env *servicetest.Env) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if env.Count(`SELECT count(*) FROM outbox_all_events WHERE status <> 'dispatched'`) == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "the outbox did not drain")
	}
}

// publishOverHTTP publishes a new product to storeID and returns the publication's id once
// its operation succeeded.
func publishOverHTTP(t *testing.T, env *servicetest.Env, acct servicetest.Account, storeID string) string {
	t.Helper()
	productID := seedProduct(t, env, acct)
	pub := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/products/" + productID + "/publications",
		Token: acct.AccessToken, Header: idemKey(), Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	op := env.WaitOperation(acct, seedField(t, pub, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	return seedField(t, pub, "publication", "id")
}

// TestIntegrationEventConsumers runs the two consumer examples of docs/events.md against
// the service: a publish made over HTTP reaches a Node.js consumer (plain ioredis, consumer
// group) and a Go consumer (watermill-redisstream's Subscriber, consumer group) as a
// publication.published CloudEvent; a Node.js consumer that stops with entries read but not
// acknowledged, and starts again, gets exactly the entries it had not acknowledged.
func TestIntegrationEventConsumers(t *testing.T) {
	t.Parallel()
	requireEventsNode(t)
	env := servicetest.StartAll(t)
	ctx := context.Background()
	stream := eventstream.Stream(env.Config.StreamPrefix)
	opts, err := redis.ParseURL(env.Config.RedisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	// The groups exist before the first event, so each reads every event of this test.
	for _, g := range []string{"node-example", "go-example", "node-restart"} {
		require.NoError(t, rdb.XGroupCreateMkStream(ctx, stream, g, "$").Err())
	}

	acct := env.Register("events@example.com")
	storeID := seedVerifiedStore(t, env, acct, "events")
	pubID := publishOverHTTP(t, env, acct, storeID)
	subject := "publication/" + pubID

	t.Run("Node.js consumer reads publication.published", func(t *testing.T) {
		events, reason := runNodeConsumer(t, env.Config.RedisURL, map[string]any{"stream": stream, "group": "node-example",
			"consumer": "node-1", "untilType": "publication.published", "untilSubject": subject, "timeoutMs": 30000})
		require.Equal(t, "until", reason, "%v", events)
		last := events[len(events)-1]
		require.Equal(t, "publication.published", last.Type)
		require.Equal(t, subject, last.Subject)
		require.Equal(t, acct.WorkspaceID, last.WorkspaceID)
		_, err := uuid.Parse(last.ID)
		require.NoError(t, err, "the CloudEvent id is the outbox event id")
		_, err = time.Parse(time.RFC3339Nano, last.Time)
		require.NoError(t, err)
		var data map[string]any
		require.NoError(t, json.Unmarshal(last.Data, &data))
		require.Equal(t, pubID, data["publication_id"])
		require.Equal(t, storeID, data["store_id"])
		require.EqualValues(t, 1, data["product_revision"])
		require.NotEmpty(t, data["external_product_id"])
		types := map[string]bool{}
		for _, e := range events {
			require.True(t, e.Acked)
			types[e.Type] = true
		}
		require.True(t, types["store.verified"] && types["operation.status_changed"], "%v", types)
	})

	t.Run("Go consumer reads publication.published", func(t *testing.T) {
		// A Subscriber closes the client it is given: its own.
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: redis.NewClient(opts),
			Unmarshaller: eventstream.Unmarshaller{}, ConsumerGroup: "go-example", Consumer: "go-1"}, watermill.NopLogger{})
		require.NoError(t, err)
		defer sub.Close()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		msgs, err := sub.Subscribe(sctx, stream)
		require.NoError(t, err)
		for {
			select {
			case <-sctx.Done():
				t.Fatal("no publication.published reached the Go consumer")
			case m := <-msgs:
				ev, err := cloudevent.Decode(m.Payload)
				require.NoError(t, err)
				m.Ack()
				require.Equal(t, ev.ID, m.UUID)
				if ev.Type != "publication.published" || ev.Subject != subject {
					continue
				}
				require.Equal(t, eventstream.Source, ev.Source)
				require.Equal(t, acct.WorkspaceID, ev.WorkspaceID)
				var data struct {
					PublicationID string `json:"publication_id"`
				}
				require.NoError(t, json.Unmarshal(ev.Data, &data))
				require.Equal(t, pubID, data.PublicationID)
				return
			}
		}
	})

	t.Run("a restarted consumer resumes without loss or repeat", func(t *testing.T) {
		waitOutboxDrained(t, env)
		cfg := map[string]any{"stream": stream, "group": "node-restart", "consumer": "node-r", "idleMs": 1500, "timeoutMs": 60000}
		// First run: reads 5 entries, acknowledges 3, stops (a crash before XACK of the last 2).
		first, reason := runNodeConsumer(t, env.Config.RedisURL, map[string]any{"stream": stream, "group": "node-restart",
			"consumer": "node-r", "max": 5, "ack": 3})
		require.Equal(t, "max", reason)
		require.Len(t, first, 5)
		acked := map[string]bool{}
		for _, e := range first[:3] {
			require.True(t, e.Acked)
			acked[e.Entry] = true
		}
		require.False(t, first[3].Acked || first[4].Acked)

		// Events keep coming while it is down.
		secondPub := publishOverHTTP(t, env, acct, storeID)
		waitOutboxDrained(t, env)

		second, reason := runNodeConsumer(t, env.Config.RedisURL, cfg)
		require.Equal(t, "idle", reason)
		require.GreaterOrEqual(t, len(second), 3)
		require.Equal(t, []string{first[3].Entry, first[4].Entry}, []string{second[0].Entry, second[1].Entry},
			"the entries read but not acknowledged come first")
		got := map[string]bool{}
		sawSecond := false
		for _, e := range second {
			require.False(t, e.Lost)
			require.False(t, acked[e.Entry], "entry %s was acknowledged before and delivered again", e.Entry)
			require.False(t, got[e.Entry], "entry %s delivered twice", e.Entry)
			require.True(t, e.Acked)
			got[e.Entry] = true
			sawSecond = sawSecond || (e.Type == "publication.published" && e.Subject == "publication/"+secondPub)
		}
		require.True(t, sawSecond, "the event published while the consumer was down")
		all, err := rdb.XRange(ctx, stream, "-", "+").Result()
		require.NoError(t, err)
		for _, e := range all {
			require.True(t, acked[e.ID] || got[e.ID], "entry %s was never delivered", e.ID)
		}
		require.Equal(t, len(all), len(acked)+len(got))
		groups, err := rdb.XInfoGroups(ctx, stream).Result()
		require.NoError(t, err)
		for _, g := range groups {
			if g.Name == "node-restart" {
				require.Zero(t, g.Pending)
				require.Zero(t, g.Lag)
			}
		}
	})
}

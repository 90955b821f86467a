package commandstream_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/cloudevent"
	"github.com/listingkit/listing/infra/commandstream"
	"github.com/listingkit/listing/infra/httpapi"
	"github.com/listingkit/listing/infra/secret"
	"github.com/listingkit/listing/internal/redistest"
)

// The loop's contract over a real Redis, with the endpoints (the executor) and the principal
// lookup at the process edge replaced: what a transient failure, the last delivery and a bad
// entry do to the stream. The service's own executor and lookup are tested end to end in
// tests/commands_test.go.

// executor answers a fixed result per command type and counts calls.
type executor struct {
	calls   atomic.Int64
	results map[string]httpapi.MessageResult
}

func (e *executor) ExecuteMessage(_ context.Context, m httpapi.MessageCommand) httpapi.MessageResult {
	e.calls.Add(1)
	return e.results[m.Type]
}

func (e *executor) MessageProblem(_ context.Context, _ httpapi.MessageCommand, err error) httpapi.MessageResult {
	return httpapi.MessageResult{Status: 400, Body: []byte(`{"code":"` + err.(*domain.Error).Code + `"}`)}
}

// principals knows one integration.
type principals struct {
	integ  domain.Integration
	sealed port.SealedSecret
}

func (p principals) Principal(_ context.Context, ws, id uuid.UUID) (domain.Integration, port.SealedSecret, error) {
	if ws != p.integ.WorkspaceID || id != p.integ.ID {
		return domain.Integration{}, port.SealedSecret{}, domain.ErrIntegrationNotFound
	}
	return p.integ, p.sealed, nil
}

type fixture struct {
	rdb      *redis.Client
	stream   string
	replies  string
	exec     *executor
	reg      *prometheus.Registry
	integ    domain.Integration
	secret   string
	consumer *commandstream.Consumer
}

func setup(t *testing.T, cfg commandstream.Config) *fixture {
	t.Helper()
	rdb := redistest.NewClient(t)
	prefix := "tcs" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	cipher, err := secret.New(secret.Config{})
	require.NoError(t, err)
	f := &fixture{rdb: rdb, stream: prefix + ":commands", replies: prefix + ":command-replies", reg: prometheus.NewRegistry(),
		secret: "lki_test-secret"}
	f.integ = domain.Integration{ID: uuid.New(), WorkspaceID: uuid.New(), UserID: uuid.New(), Name: "ERP"}
	sealed, keyID, err := cipher.Seal([]byte(f.secret), port.IntegrationSecretAD(f.integ.WorkspaceID, f.integ.ID))
	require.NoError(t, err)
	f.exec = &executor{results: map[string]httpapi.MessageResult{
		"listing.publish":      {Status: 202, Body: []byte(`{"publication":{},"operation":{}}`)},
		"listing.verify_store": {Status: 503, Body: []byte(`{"code":"SERVICE_UNAVAILABLE"}`), Retryable: true},
	}}
	cfg.Client, cfg.Stream, cfg.Replies = rdb, f.stream, f.replies
	cfg.Executor, cfg.Cipher, cfg.Registry = f.exec, cipher, f.reg
	cfg.Principals = principals{integ: f.integ, sealed: port.SealedSecret{Ciphertext: sealed, KeyID: keyID}}
	f.consumer, err = commandstream.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = f.consumer.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = rdb.Del(context.Background(), f.stream, f.replies).Err()
	})
	return f
}

func (f *fixture) send(t *testing.T, id, typ string) {
	t.Helper()
	b, err := cloudevent.Encode(cloudevent.Event{SpecVersion: "1.0", ID: id, Type: typ, Source: "/erp", Data: []byte(`{}`),
		Time: time.Now(), WorkspaceID: f.integ.WorkspaceID.String(), IntegrationID: f.integ.ID.String()})
	require.NoError(t, err)
	h := hmac.New(sha256.New, []byte(f.secret))
	h.Write(b)
	require.NoError(t, f.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: f.stream,
		Values: map[string]any{"event": b, "signature": hex.EncodeToString(h.Sum(nil))}}).Err())
}

func (f *fixture) replyTypes(t *testing.T) map[string][]string {
	t.Helper()
	msgs, err := f.rdb.XRange(context.Background(), f.replies, "-", "+").Result()
	require.NoError(t, err)
	out := map[string][]string{}
	for _, m := range msgs {
		ev, err := cloudevent.FromEntry(m.Values)
		require.NoError(t, err)
		out[ev.CorrelationID] = append(out[ev.CorrelationID], ev.Type)
	}
	return out
}

// A transient failure sends no reply and leaves the entry pending; it is delivered again
// after ClaimIdle, and the MaxDeliveries-th delivery answers the failure and acknowledges it.
// Entries behind it are not held up.
func TestTransientFailureIsRetriedThenAnswered(t *testing.T) {
	t.Parallel()
	f := setup(t, commandstream.Config{ClaimIdle: 200 * time.Millisecond, ClaimInterval: 50 * time.Millisecond, MaxDeliveries: 3})
	f.send(t, "c-transient", "listing.verify_store")
	f.send(t, "c-ok", "listing.publish")
	f.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: f.stream, Values: map[string]any{"garbage": "x"}})
	f.send(t, "c-ok-2", "listing.publish")

	require.Eventually(t, func() bool {
		r := f.replyTypes(t)
		return len(r["c-ok"]) == 1 && len(r["c-ok-2"]) == 1
	}, 10*time.Second, 20*time.Millisecond, "entries behind a failing one are answered")
	require.Empty(t, f.replyTypes(t)["c-transient"], "no reply to a transient failure before the last delivery")

	require.Eventually(t, func() bool { return len(f.replyTypes(t)["c-transient"]) == 1 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{commandstream.TypeRejected}, f.replyTypes(t)["c-transient"])
	require.Eventually(t, func() bool {
		p, err := f.rdb.XPending(context.Background(), f.stream, "listing").Result()
		return err == nil && p.Count == 0
	}, 10*time.Second, 20*time.Millisecond)
	// Three deliveries of the failing entry, one of each other: no loop.
	require.Equal(t, int64(3+2), f.exec.calls.Load())
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, int64(3+2), f.exec.calls.Load())
	require.Equal(t, 2.0, count(t, f.reg, "listing.verify_store", "retried"))
	require.Equal(t, 1.0, count(t, f.reg, "listing.verify_store", "rejected"))
	require.Equal(t, 1.0, count(t, f.reg, "unknown", "malformed"))
}

// count is the value of listing_command_messages_total{type, outcome} (0 when absent).
func count(t *testing.T, reg *prometheus.Registry, typ, outcome string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, fam := range families {
		if fam.GetName() != "listing_command_messages_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["type"] == typ && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

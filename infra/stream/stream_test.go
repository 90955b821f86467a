package stream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/stream"
)

func redisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

func newClient(t *testing.T) *redis.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Redis")
	}
	opts, err := redis.ParseURL(redisURL())
	require.NoError(t, err)
	c := redis.NewClient(opts)
	require.NoError(t, c.Ping(context.Background()).Err())
	return c
}

func topic(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	s := "stream-test-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
		if opts, err := redis.ParseURL(redisURL()); err == nil {
			c = redis.NewClient(opts)
		}
		_ = c.Del(context.Background(), s).Err()
		_ = c.Close()
	})
	return s
}

// One Publish call appends every message in order, in one round trip, in the format
// watermill-redisstream's Subscriber reads: UUID, payload and metadata survive.
func TestPublishIsReadByWatermillRedisstream(t *testing.T) {
	t.Parallel()
	pubClient, subClient := newClient(t), newClient(t)
	pub, err := stream.NewPublisher(stream.Config{Client: pubClient, MaxLen: 1000})
	require.NoError(t, err)
	defer pub.Close()
	tp := topic(t)

	const n = 300
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"i":%d}`, i))
		msgs[i].Metadata.Set("event_type", "test.happened")
	}
	var roundTrips int
	pubClient.AddHook(countHook{n: &roundTrips})
	require.NoError(t, pub.Publish(tp, msgs...))
	require.Equal(t, 1, roundTrips, "one pipelined round trip for the whole call")
	require.EqualValues(t, n, subClient.XLen(context.Background(), tp).Val())

	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: subClient, FanOutOldestId: "0"}, watermill.NopLogger{})
	require.NoError(t, err)
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, tp)
	require.NoError(t, err)
	for i := range n {
		select {
		case m := <-ch:
			require.Equal(t, msgs[i].UUID, m.UUID, "in order")
			require.JSONEq(t, string(msgs[i].Payload), string(m.Payload))
			require.Equal(t, "test.happened", m.Metadata.Get("event_type"))
			m.Ack()
		case <-ctx.Done():
			t.Fatalf("only %d of %d messages read", i, n)
		}
	}
}

// A message the marshaller refuses fails the call before anything is sent.
func TestPublishRefusesBeforeSending(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	pub, err := stream.NewPublisher(stream.Config{Client: c})
	require.NoError(t, err)
	defer pub.Close()
	tp := topic(t)
	bad := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	bad.Metadata.Set(redisstream.UUIDHeaderKey, "reserved")
	err = pub.Publish(tp, message.NewMessage(watermill.NewUUID(), []byte(`{}`)), bad)
	require.ErrorContains(t, err, bad.UUID)
	require.Zero(t, c.XLen(context.Background(), tp).Val())
}

// A cancelled context fails the call.
func TestPublishHonoursTheMessageContext(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	pub, err := stream.NewPublisher(stream.Config{Client: c})
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	m.SetContext(ctx)
	require.ErrorIs(t, pub.Publish(topic(t), m), context.Canceled)
}

// countHook counts the round trips that carry XADDs: single commands and pipelines alike
// (not a new connection's handshake).
type countHook struct{ n *int }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xadd" {
			*h.n++
		}
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "xadd" {
			*h.n++
		}
		return next(ctx, cmds)
	}
}

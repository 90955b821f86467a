package bullmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
)

// watermill's universal Pub/Sub suite. Features, honestly:
//   - no consumer groups: subscribers of one queue compete for its jobs;
//   - no guaranteed order: a nacked job goes to the end of wait and jobs run
//     concurrently across subscribers;
//   - persistent: jobs wait in Redis for a subscriber;
//   - at least once, not exactly once;
//   - a new subscriber does not get messages already consumed;
//   - the message context is not carried from publisher to subscriber.
func TestPubSub(t *testing.T) {
	features := tests.Features{
		ConsumerGroups:                      false,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: false,
		Persistent:                          true,
		RequireSingleInstance:               false,
		NewSubscriberReceivesOldMessages:    false,
		ContextPreserved:                    false,
		GenerateTopicFunc: func(tctx tests.TestContext) string {
			return "wm" + string(tctx.TestID)
		},
	}
	prefix := "wm" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	t.Cleanup(func() {
		rdb := newRedis(t)
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Unlink(ctx, iter.Val())
		}
	})
	tests.TestPubSub(t, features, func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newPubSub(t, prefix)
	}, nil)
}

func newPubSub(t *testing.T, prefix string) (message.Publisher, message.Subscriber) {
	rdb := newRedis(t)
	cfg := bullmq.Config{
		Client: rdb,
		Prefix: prefix,
		// Nacks retry at once, as often as the suite nacks.
		Attempts: 1000,
		Backoff:  bullmq.Backoff{Type: bullmq.BackoffFixed, Delay: 0},
	}
	logger := watermill.NopLogger{}
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: cfg}, logger)
	require.NoError(t, err)
	sub, err := bullmq.NewSubscriber(bullmq.SubscriberConfig{
		Config:          cfg,
		DrainDelay:      200 * time.Millisecond,
		ShutdownTimeout: time.Second,
		LockDuration:    5 * time.Second,
		StalledInterval: 2 * time.Second,
	}, logger)
	require.NoError(t, err)
	return pub, sub
}

package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/jobs"
	"github.com/listingkit/listing/infra/outbox"
)

// MemoryQueues do not run watermill's universal Pub/Sub suite: their Publish returns only
// after the subscriber acknowledged (that is what lets the outbox mark an event dispatched
// after its handler ran), and the suite publishes a batch before it reads any of it, which
// then waits for ever (tried: most of its tests hang). The behaviour the transport relies on
// is tested here and end to end in tests/memory_transport_test.go.

// A job queue's publish succeeds only once the Memory transport settled every message: with
// no consumer, or one that did not settle, the outbox is told to deliver again.
func TestMemoryQueuesJobQueuesNeedASettledConsumer(t *testing.T) {
	q := jobs.NewMemoryQueues([]string{"q"})
	t.Cleanup(func() { _ = q.Close() })
	require.Error(t, q.Publish("q", message.NewMessage(uuid.NewString(), nil)), "no consumer")

	var requeued []outbox.JobDelivery
	mem := jobs.NewMemory(q, 3, func(int) time.Duration { return time.Second },
		func(_ context.Context, _ worker.Job, _ time.Duration, next outbox.JobDelivery) error {
			requeued = append(requeued, next)
			return nil
		}, nil)
	msgs, err := mem.Subscriber().Subscribe(context.Background(), "q")
	require.NoError(t, err)
	go func() {
		for m := range msgs {
			d, _ := mem.Delivery(m)
			mem.Settle(context.Background(), m, worker.Job{ID: m.UUID, Attempt: d.Attempt}, errors.New("retry me"))
		}
	}()
	require.NoError(t, q.Publish("q", message.NewMessage(uuid.NewString(), nil)))
	require.Equal(t, []outbox.JobDelivery{{Attempt: 2}}, requeued, "a retry goes back to the outbox as attempt 2")
}

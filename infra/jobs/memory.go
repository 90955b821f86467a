package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/outbox"
)

// MemoryQueues are the in-process queues of the memory transport: a GoChannel whose Publish
// returns once the subscriber acknowledged, so that the outbox marks an event dispatched only
// after its handler ran. The dispatcher publishes to it (every destination is a topic) and
// Memory consumes from it; both must share one value. Publishing to a job queue fails unless
// a consumer settled every message (none subscribed yet, or it stopped on the way): the
// outbox then delivers them again. Other topics (streams) drop what nobody reads.
type MemoryQueues struct {
	ch      *gochannel.GoChannel
	queues  map[string]bool
	settled sync.Map // message UUID → struct{}: settled by Memory, not yet seen by Publish
}

var (
	_ message.Publisher  = (*MemoryQueues)(nil)
	_ message.Subscriber = (*MemoryQueues)(nil)
)

// NewMemoryQueues returns memory queues whose job queues are queues.
func NewMemoryQueues(queues []string) *MemoryQueues {
	q := &MemoryQueues{ch: gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, nil),
		queues: map[string]bool{}}
	for _, name := range queues {
		q.queues[name] = true
	}
	return q
}

// Publish implements message.Publisher.
func (q *MemoryQueues) Publish(topic string, msgs ...*message.Message) error {
	if err := q.ch.Publish(topic, msgs...); err != nil {
		return err
	}
	if !q.queues[topic] {
		return nil
	}
	missing := 0
	for _, m := range msgs {
		if _, ok := q.settled.LoadAndDelete(m.UUID); !ok {
			missing++
		}
	}
	if missing > 0 {
		return fmt.Errorf("memory queue %s: %d of %d jobs not handled (no consumer, or it stopped)", topic, missing, len(msgs))
	}
	return nil
}

// Subscribe implements message.Subscriber.
func (q *MemoryQueues) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	return q.ch.Subscribe(ctx, topic)
}

// Close closes the GoChannel.
func (q *MemoryQueues) Close() error { return q.ch.Close() }

// RequeueFunc hands the outbox event job delivers back to the outbox, to be delivered again
// after `after` as next (outbox.Requeue).
type RequeueFunc func(ctx context.Context, job worker.Job, after time.Duration, next outbox.JobDelivery) error

// Memory is the in-process Transport (QUEUE_TRANSPORT=memory): jobs arrive on a GoChannel
// from the dispatcher, which waits for the acknowledgement. It keeps no job state: a retry
// or a snooze hands the event back to the outbox (RequeueFunc) with the next delivery's
// attempt in the row's metadata, then acknowledges, so the outbox does the backoff and a
// crash leaves the event to be claimed again. Delivery is at least once, as with BullMQ.
type Memory struct {
	queues *MemoryQueues
	// Attempts is how many attempts a job may take (JOB_ATTEMPTS).
	attempts int
	// backoff is the wait before attempt n+1 after attempt n failed.
	backoff func(n int) time.Duration
	requeue RequeueFunc
	log     *slog.Logger
}

var _ Transport = (*Memory)(nil)

// NewMemory returns the memory transport over queues (NewMemoryQueues). Retries wait
// backoff(attempt) (attempt: the failed one, from 1).
func NewMemory(queues *MemoryQueues, attempts int, backoff func(n int) time.Duration, requeue RequeueFunc,
	log *slog.Logger) *Memory {
	if log == nil {
		log = slog.Default()
	}
	return &Memory{queues: queues, attempts: max(attempts, 1), backoff: backoff, requeue: requeue, log: log}
}

// Subscriber implements Transport.
func (m *Memory) Subscriber() message.Subscriber { return m.queues }

// Delivery implements Transport from the outbox row's job metadata.
func (m *Memory) Delivery(msg *message.Message) (worker.Delivery, string) {
	return worker.Delivery{ID: msg.UUID, Attempt: max(metaInt(msg, outbox.MetadataJobAttempt), 1), Attempts: m.attempts,
		Snoozes: metaInt(msg, outbox.MetadataJobSnoozes), Snoozed: metaMillis(msg, outbox.MetadataJobSnoozedMs)}, ""
}

// Settle implements Transport: a retry, a snooze or a shutdown first hands the event back to
// the outbox; the message is always acknowledged (a GoChannel nack would redeliver at once).
func (m *Memory) Settle(ctx context.Context, msg *message.Message, job worker.Job, err error) {
	defer func() {
		m.queues.settled.Store(msg.UUID, struct{}{})
		msg.Ack()
	}()
	next := outbox.JobDelivery{Attempt: job.Attempt, Snoozes: job.Snoozes, Snoozed: job.Snoozed}
	var after time.Duration
	delay, snoozed := worker.SnoozeOf(err)
	switch {
	case err == nil || (worker.IsPermanent(err) && !snoozed):
		return
	case snoozed:
		after, next.Snoozes, next.Snoozed = delay, next.Snoozes+1, next.Snoozed+delay
	case errors.Is(err, ErrNotStarted):
		// Not started (shutting down): deliver again soon, no attempt spent.
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// Shutdown or a handler past its time: deliver again soon, no attempt spent.
	case job.LastAttempt:
		return
	default:
		after, next.Attempt = m.backoff(job.Attempt), job.Attempt+1
	}
	if rerr := m.requeue(context.WithoutCancel(ctx), job, after, next); rerr != nil {
		m.log.ErrorContext(ctx, "job could not be handed back to the outbox; the reconciler will deliver it again",
			"job_id", job.ID, "error", rerr.Error())
	}
}

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

// CarriesClaim implements outbox.ClaimCarrier: the memory transport takes and requeues the
// outbox event itself, under the claim that published it.
func (q *MemoryQueues) CarriesClaim() {}

// RequeueFunc hands the outbox event job delivers, held by claim, back to the outbox, to be
// delivered again after `after` as next (outbox.Requeue).
type RequeueFunc func(ctx context.Context, job worker.Job, claim string, after time.Duration, next outbox.JobDelivery) error

// TakeFunc extends claim's lease of the outbox event job delivers to lease from now, or
// fails with outbox.ErrClaimLost when the claim no longer holds it (outbox.Take).
type TakeFunc func(ctx context.Context, job worker.Job, claim string, lease time.Duration) error

// Memory is the in-process Transport (QUEUE_TRANSPORT=memory): jobs arrive on a GoChannel
// from the dispatcher, which waits for the acknowledgement. It keeps no job state: a retry
// or a snooze hands the event back to the outbox (RequeueFunc) with the next delivery's
// attempt in the row's metadata, then acknowledges, so the outbox does the backoff and a
// crash leaves the event to be claimed again. Delivery is at least once, as with BullMQ.
//
// The job's lock is the outbox event's lease: before its handler starts, the job is taken
// (TakeFunc: the lease extended to Lease from now, under the claim that published it); a
// message whose claim was lost meanwhile (it waited past OUTBOX_LEASE behind others) is not
// run, since another claim delivers the event. The handler runs within HandlerTimeout(Lease),
// so every call it makes ends while the lease holds, even when the process dies.
type Memory struct {
	queues *MemoryQueues
	// Attempts is how many attempts a job may take (JOB_ATTEMPTS).
	attempts int
	// backoff is the wait before attempt n+1 after attempt n failed.
	backoff func(n int) time.Duration
	lease   time.Duration
	take    TakeFunc
	requeue RequeueFunc
	log     *slog.Logger
}

var (
	_ Transport = (*Memory)(nil)
	_ Taker     = (*Memory)(nil)
)

// MemoryConfig configures the memory transport.
type MemoryConfig struct {
	// Attempts is how many attempts a job may take (JOB_ATTEMPTS).
	Attempts int
	// Backoff is the wait before attempt n+1 after attempt n failed (n from 1).
	Backoff func(n int) time.Duration
	// Lease is how long a taken job holds its outbox event (JOB_LOCK_DURATION); the Runner's
	// JobTimeout must be at most HandlerTimeout(Lease).
	Lease   time.Duration
	Take    TakeFunc
	Requeue RequeueFunc
	Logger  *slog.Logger
}

// HandlerTimeout is the longest a memory transport's handler may run under lease: four
// fifths of it, the rest a margin for the clocks of the process and the database.
func HandlerTimeout(lease time.Duration) time.Duration { return lease - lease/5 }

// NewMemory returns the memory transport over queues (NewMemoryQueues).
func NewMemory(queues *MemoryQueues, cfg MemoryConfig) *Memory {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Memory{queues: queues, attempts: max(cfg.Attempts, 1), backoff: cfg.Backoff, lease: cfg.Lease, take: cfg.Take,
		requeue: cfg.Requeue, log: cfg.Logger}
}

// Take implements Taker: the job's outbox event is held for the lease from now on, or the
// job is not this delivery's to run.
func (m *Memory) Take(ctx context.Context, msg *message.Message, job worker.Job) error {
	return m.take(ctx, job, msg.Metadata.Get(outbox.MetadataClaim), m.lease)
}

// Subscriber implements Transport.
func (m *Memory) Subscriber() message.Subscriber { return m.queues }

// Delivery implements Transport from the outbox row's job metadata.
func (m *Memory) Delivery(msg *message.Message) (worker.Delivery, string) {
	return worker.Delivery{ID: msg.UUID, Attempt: max(metaInt(msg, outbox.MetadataJobAttempt), 1), Attempts: m.attempts,
		Snoozes: metaInt(msg, outbox.MetadataJobSnoozes), Snoozed: metaMillis(msg, outbox.MetadataJobSnoozedMs)}, ""
}

// Settle implements Transport: a retry, a snooze or a shutdown first hands the event back to
// the outbox; the message is acknowledged (a GoChannel nack would redeliver at once). A job
// that could not be taken for another reason than a lost claim is acknowledged unsettled:
// the dispatcher's publish then fails and the outbox delivers the event again.
//
// Every run of a handler counts as an attempt, whatever its error (an upstream time-out is
// context.DeadlineExceeded): only a job not started, or one cut short by the shutdown past
// the stop bound, goes back with its attempt unspent, the latter not before its lease would
// have run out (a call it left in flight may still land).
//
// A last attempt that recorded nothing is not dropped to wait for the reconciler: one whose
// handler ran out of time (its context ended; a call it left in flight may still land) goes
// back after the lease, as one more attempt, once, which records the success or the
// failure; a job handed back so already that ends so again is left to the reconciler. (One
// whose record step gave up after a successful call is snoozed by worker.Flow: its next
// delivery records the held result without calling.)
func (m *Memory) Settle(ctx context.Context, msg *message.Message, job worker.Job, err error) {
	settled := true
	defer func() {
		if settled {
			m.queues.settled.Store(msg.UUID, struct{}{})
		}
		msg.Ack()
	}()
	next := outbox.JobDelivery{Attempt: job.Attempt, Snoozes: job.Snoozes, Snoozed: job.Snoozed}
	var after time.Duration
	delay, snoozed := worker.SnoozeOf(err)
	handedBack := job.Attempt > m.attempts // a last attempt handed back once already (below)
	switch {
	case err == nil || (worker.IsPermanent(err) && !snoozed):
		return
	case errors.Is(err, ErrNotTaken):
		// Lost claim: another claim delivers the event. Otherwise the outbox retries it.
		settled = errors.Is(err, outbox.ErrClaimLost)
		return
	case snoozed && worker.IsWait(err):
		after = delay
	case snoozed:
		after, next.Snoozes, next.Snoozed = delay, next.Snoozes+1, next.Snoozed+delay
	case errors.Is(err, ErrNotStarted):
		// Not started (shutting down): deliver again soon, no attempt spent.
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		// Cut short by the shutdown past the stop bound: no attempt spent, but not before
		// the lease it held would have ended.
		after = m.lease
	case job.LastAttempt && handedBack:
		return
	case job.LastAttempt:
		// Not permanent on the last attempt: the handler's context ended before it recorded
		// anything (worker.Flow records a final failure otherwise).
		after, next.Attempt = m.lease, job.Attempt+1
	default:
		after, next.Attempt = m.backoff(job.Attempt), job.Attempt+1
	}
	if rerr := m.requeue(context.WithoutCancel(ctx), job, msg.Metadata.Get(outbox.MetadataClaim), after, next); rerr != nil {
		if errors.Is(rerr, outbox.ErrClaimLost) {
			m.log.WarnContext(ctx, "job not handed back: its outbox claim was lost; another claim delivers it",
				"job_id", job.ID, "error", rerr.Error())
			return
		}
		m.log.ErrorContext(ctx, "job could not be handed back to the outbox; the reconciler will deliver it again",
			"job_id", job.ID, "error", rerr.Error())
	}
}

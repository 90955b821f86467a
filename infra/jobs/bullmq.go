package jobs

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/bullmq"
)

// BullMQ is the production Transport: the jobs of BullMQ queues in Redis, through a
// bullmq.Subscriber.
type BullMQ struct {
	sub *bullmq.Subscriber
	cfg bullmq.Config
}

var _ Transport = BullMQ{}

// NewBullMQ returns the BullMQ transport; Close closes its subscriber (not the Redis client).
// The subscriber's own lines (a lock lost and its handler cancelled, failed renewals, jobs
// the stalled check moved back) go to log; nil drops them.
func NewBullMQ(cfg bullmq.SubscriberConfig, log *slog.Logger) (BullMQ, error) {
	var wlog watermill.LoggerAdapter
	if log != nil {
		wlog = watermill.NewSlogLogger(log)
	}
	sub, err := bullmq.NewSubscriber(cfg, wlog)
	if err != nil {
		return BullMQ{}, err
	}
	return BullMQ{sub: sub, cfg: cfg.Config}, nil
}

// QueueCollector implements QueueCollectors: job counts by state, read at scrape time.
func (b BullMQ) QueueCollector(queues []string, log *slog.Logger) prometheus.Collector {
	return NewQueueCollector(b.cfg, queues, log)
}

// Subscriber implements Transport.
func (b BullMQ) Subscriber() message.Subscriber { return b.sub }

// Close ends the subscriptions.
func (b BullMQ) Close() error { return b.sub.Close() }

// Delivery implements Transport from the Subscriber's metadata.
func (BullMQ) Delivery(msg *message.Message) (worker.Delivery, string) {
	d := worker.Delivery{ID: msg.UUID, Attempt: metaInt(msg, bullmq.MetadataAttemptsMade) + 1,
		Attempts: metaInt(msg, bullmq.MetadataAttempts), Snoozes: metaInt(msg, bullmq.MetadataSnoozes),
		Snoozed: metaMillis(msg, bullmq.MetadataSnoozedMs)}
	if ms := metaInt(msg, bullmq.MetadataTimestamp); ms > 0 {
		d.EnqueuedAt = time.UnixMilli(int64(ms))
	}
	return d, msg.Metadata.Get(bullmq.MetadataDeferred)
}

// Settle implements Transport: Ack completes the job; a nack retries it, fails it for good
// (worker.Permanent), snoozes it (worker.SnoozeError; one with Wait set is not counted as a
// snooze), gives it back (ErrNotStarted) or
// leaves it to its lock (cut short by shutdown).
func (BullMQ) Settle(ctx context.Context, msg *message.Message, _ worker.Job, err error) {
	if delay, ok := worker.SnoozeOf(err); ok {
		msg.Metadata.Set(bullmq.MetadataNack, bullmq.NackSnooze)
		if worker.IsWait(err) {
			msg.Metadata.Set(bullmq.MetadataNack, bullmq.NackWait)
		}
		msg.Metadata.Set(bullmq.MetadataSnoozeMs, strconv.FormatInt(delay.Milliseconds(), 10))
		msg.Nack()
		return
	}
	switch {
	case err == nil:
		msg.Ack()
	case errors.Is(err, ErrNotStarted):
		msg.Metadata.Set(bullmq.MetadataNack, bullmq.NackHandBack)
		msg.Nack()
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		// Cut short by shutdown: left to its lock, never handed back while its call may land.
		msg.Metadata.Set(bullmq.MetadataNack, bullmq.NackAbandon)
		msg.Nack()
	case worker.IsPermanent(err):
		msg.Metadata.Set(bullmq.MetadataNack, bullmq.NackFail)
		msg.Metadata.Set(bullmq.MetadataNackReason, nackReason(err))
		msg.Nack()
	default:
		msg.Metadata.Set(bullmq.MetadataNack, bullmq.NackRetry)
		msg.Metadata.Set(bullmq.MetadataNackReason, nackReason(err))
		msg.Nack()
	}
}

// nackReason is what a failed attempt's job says of err in Redis (its failedReason, read by
// the console's queues page and Bull Board): the error code and client message of a domain
// error, which are safe to show; of any other error only that it was not one, since its
// text may hold an address, a URL or a secret (the job's log line has it).
func nackReason(err error) string {
	var de *domain.Error
	if errors.As(err, &de) && de.Code != "" {
		if de.Message != "" {
			return de.Code + ": " + de.Message
		}
		return de.Code
	}
	return "failed attempt (no error code: see the work process's log for this job)"
}

// BullMQProbe implements port.JobProbe over BullMQ queues (bullmq.JobsUnfinished).
type BullMQProbe struct {
	Config bullmq.Config
}

var _ port.JobProbe = BullMQProbe{}

// Unfinished implements port.JobProbe.
func (p BullMQProbe) Unfinished(ctx context.Context, queue string, jobIDs []string) (map[string]bool, error) {
	return bullmq.JobsUnfinished(ctx, p.Config, queue, jobIDs)
}

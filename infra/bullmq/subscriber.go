package bullmq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrSubscriberClosed is returned by Subscribe after Close.
var ErrSubscriberClosed = errors.New("bullmq: subscriber closed")

// errNacked fails the attempt of a nacked message (a retryable failure).
var errNacked = errors.New("message nacked")

// Metadata a Subscriber sets on every message it hands out: what BullMQ knows of the job's
// delivery (decimal strings).
const (
	// MetadataAttemptsMade is the job's attemptsMade before this delivery.
	MetadataAttemptsMade = "bullmq_attempts_made"
	// MetadataAttempts is how many attempts the job may take.
	MetadataAttempts = "bullmq_attempts"
	// MetadataSnoozes and MetadataSnoozedMs count the job's earlier snoozes and their delay.
	MetadataSnoozes   = "bullmq_snoozes"
	MetadataSnoozedMs = "bullmq_snoozed_ms"
	// MetadataTimestamp is when the job was added (ms since the epoch).
	MetadataTimestamp = "bullmq_timestamp"
	// MetadataDeferred, when set, is the reason the queue fails this job whatever becomes of
	// the message (it stalled more than MaxStalledCount times): the consumer may record it,
	// then acks or nacks, and the job fails.
	MetadataDeferred = "bullmq_deferred"
)

// Metadata a consumer may set on a message before it nacks it, to say what the nack means.
const (
	// MetadataNack is NackRetry (default: a failed attempt, retried with the backoff while
	// attempts remain), NackFail (the job fails for good) or NackSnooze (the job waits
	// MetadataSnoozeMs without spending an attempt, see Snooze) or NackWait (the same, and
	// not counted as a snooze either, see Wait).
	MetadataNack     = "bullmq_nack"
	MetadataSnoozeMs = "bullmq_snooze_ms"
	NackRetry        = "retry"
	NackFail         = "fail"
	NackSnooze       = "snooze"
	NackWait         = "wait"
	// NackHandBack gives the job back to wait without spending an attempt (ErrHandBack): for
	// a message whose consumer started nothing (it was shutting down).
	NackHandBack = "handback"
	// NackAbandon leaves the job to its lock (ErrAbandon): for a message whose consumer may
	// have left an external call in flight (its work cut short by shutdown).
	NackAbandon = "abandon"
	// MetadataNackReason, when set on a nack that fails an attempt (retry or fail), is the
	// job's failedReason and the stack's last line instead of "message nacked": a text for
	// operators (an error code and its client message), never a raw error, which may hold an
	// address or a secret.
	MetadataNackReason = "bullmq_nack_reason"
)

// Subscriber is a watermill message.Subscriber over Worker: every Subscribe
// call runs one Worker on the queue named topic. Subscribers of one queue
// compete for its jobs (no consumer groups). Ack completes the job; Nack
// fails the attempt (retried with the job's backoff while attempts remain,
// then failed for good). When a subscription ends, jobs taken but not yet handed out go
// back to wait; a handed-out message is waited for up to the Worker's ShutdownTimeout, its
// lock renewed, and one still unsettled then is left to its lock (ErrAbandon), never handed
// back. MetadataNack lets a nack fail the job for good, snooze it, hand it back or abandon it;
// every message carries its delivery (MetadataAttemptsMade, …), and a job the queue fails
// whatever happens is handed out marked MetadataDeferred. Delivery is at least once. The
// message context is cancelled when the job's lock is lost (the consumer must then stop
// before any further external call), after Ack or Nack, and when the Worker gives up on the
// job at shutdown. It is safe for concurrent use.
type Subscriber struct {
	cfg    SubscriberConfig
	logger watermill.LoggerAdapter

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	subs    sync.WaitGroup
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber. logger may be nil.
func NewSubscriber(cfg SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bullmq.NewSubscriber: %w", err)
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Subscriber{cfg: cfg, logger: logger, closing: make(chan struct{})}, nil
}

// Subscribe starts consuming the queue named topic. The channel is closed
// when ctx is done or the Subscriber is closed, once every message handed out
// was acked, nacked or handed back.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("bullmq.Subscribe: %w", ErrSubscriberClosed)
	}
	out := make(chan *message.Message)
	subCtx, cancel := context.WithCancel(ctx)
	var handlers sync.WaitGroup
	handler := func(jobCtx context.Context, j *Job) (any, error) {
		handlers.Add(1)
		defer handlers.Done()
		if subCtx.Err() != nil {
			return nil, ErrHandBack
		}
		msg := message.NewMessage(j.ID, j.Data)
		for k, v := range j.Metadata {
			msg.Metadata.Set(k, v)
		}
		if msg.Metadata.Get(MetadataJobName) == "" && j.Name != "" {
			msg.Metadata.Set(MetadataJobName, j.Name)
		}
		setDelivery(msg, j)
		// The message's context is the job's: cancelled when the worker loses the job's lock
		// or gives up waiting at shutdown, not when the subscription ends.
		msgCtx, cancelMsg := context.WithCancel(jobCtx)
		defer cancelMsg()
		msg.SetContext(msgCtx)
		select {
		case <-subCtx.Done():
			return nil, ErrHandBack // not handed out: nothing started
		default:
		}
		select {
		case out <- msg:
		case <-subCtx.Done():
			return nil, ErrHandBack
		case <-jobCtx.Done():
			return nil, ErrHandBack
		}
		// Handed out: the consumer settles it, within the Worker's ShutdownTimeout when the
		// subscription ends. Past it (jobCtx cancelled) the consumer may still be working on
		// it: the job is left to its lock (ErrAbandon), never handed back.
		select {
		case <-msg.Acked():
			return nil, nil
		case <-msg.Nacked():
			return nil, nackError(msg)
		case <-jobCtx.Done():
			return nil, ErrAbandon
		}
	}
	wc := s.cfg.workerConfig(topic, s.logger)
	// A job the queue fails without its handler still reaches the consumer, marked.
	wc.DeferredFailureFunc = func(jobCtx context.Context, j *Job, reason string) error {
		j.Metadata = maps.Clone(j.Metadata)
		if j.Metadata == nil {
			j.Metadata = map[string]string{}
		}
		j.Metadata[MetadataDeferred] = reason
		_, err := handler(jobCtx, j)
		if errors.Is(err, ErrHandBack) {
			return err
		}
		return nil
	}
	w, err := NewWorker(wc, handler)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("bullmq.Subscribe: %w", err)
	}
	s.subs.Add(1)
	go func() {
		defer s.subs.Done()
		select {
		case <-subCtx.Done():
		case <-s.closing:
			cancel()
		}
	}()
	s.subs.Add(1)
	go func() {
		defer s.subs.Done()
		defer close(out)
		_ = w.Run(subCtx)
		cancel()
		handlers.Wait()
	}()
	return out, nil
}

// Close ends every subscription and waits until their channels are closed.
// It does not close the Redis client. It is idempotent.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	s.subs.Wait()
	return nil
}

// setDelivery records on msg what BullMQ knows of j's delivery.
func setDelivery(msg *message.Message, j *Job) {
	attempts := 1
	if j.Opts != nil && j.Opts.Attempts > 0 {
		attempts = j.Opts.Attempts
	}
	msg.Metadata.Set(MetadataAttemptsMade, strconv.Itoa(j.AttemptsMade))
	msg.Metadata.Set(MetadataAttempts, strconv.Itoa(attempts))
	msg.Metadata.Set(MetadataSnoozes, strconv.Itoa(j.Snoozes))
	msg.Metadata.Set(MetadataSnoozedMs, strconv.FormatInt(j.Snoozed.Milliseconds(), 10))
	msg.Metadata.Set(MetadataTimestamp, strconv.FormatInt(j.Timestamp.UnixMilli(), 10))
}

// nackError is the handler error a nack of msg stands for (see MetadataNack and
// MetadataNackReason).
func nackError(msg *message.Message) error {
	failed := errNacked
	if reason := msg.Metadata.Get(MetadataNackReason); reason != "" {
		failed = errors.New(reason)
	}
	switch msg.Metadata.Get(MetadataNack) {
	case NackFail:
		return Unrecoverable(failed)
	case NackSnooze:
		ms, _ := strconv.ParseInt(msg.Metadata.Get(MetadataSnoozeMs), 10, 64)
		return Snooze(time.Duration(ms)*time.Millisecond, errNacked)
	case NackWait:
		ms, _ := strconv.ParseInt(msg.Metadata.Get(MetadataSnoozeMs), 10, 64)
		return Wait(time.Duration(ms)*time.Millisecond, errNacked)
	case NackHandBack:
		return ErrHandBack
	case NackAbandon:
		return ErrAbandon
	}
	return failed
}

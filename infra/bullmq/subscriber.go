package bullmq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrSubscriberClosed is returned by Subscribe after Close.
var ErrSubscriberClosed = errors.New("bullmq: subscriber closed")

// errNacked fails the attempt of a nacked message (a retryable failure).
var errNacked = errors.New("message nacked")

// Subscriber is a watermill message.Subscriber over Worker: every Subscribe
// call runs one Worker on the queue named topic. Subscribers of one queue
// compete for its jobs (no consumer groups). Ack completes the job; Nack
// fails the attempt (retried with the job's backoff while attempts remain,
// then failed for good); a message neither acked nor nacked when its
// subscription ends is handed back to wait. Delivery is at least once. The
// message context is cancelled after Ack, Nack or the end of the
// subscription. It is safe for concurrent use.
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
		msgCtx, cancelMsg := context.WithCancel(subCtx)
		defer cancelMsg()
		msg.SetContext(msgCtx)
		select {
		case out <- msg:
		case <-subCtx.Done():
			return nil, ErrHandBack
		case <-jobCtx.Done():
			return nil, ErrHandBack
		}
		select {
		case <-msg.Acked():
			return nil, nil
		case <-msg.Nacked():
			return nil, errNacked
		case <-subCtx.Done():
			return nil, ErrHandBack
		case <-jobCtx.Done():
			return nil, ErrHandBack
		}
	}
	w, err := NewWorker(s.cfg.workerConfig(topic, s.logger), handler)
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

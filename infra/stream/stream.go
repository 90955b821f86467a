// Package stream publishes watermill messages to Redis streams the way
// watermill-redisstream's Publisher does (same fields, same marshaller, so its Subscriber
// and any reader of that format consume them unchanged), but all the messages of one
// Publish call in one pipelined round trip instead of one XADD round trip each.
//
// The outbox dispatcher hands a round's events for a stream to one Publish call: thousands
// of messages under load. One round trip per message made such a call outlast the
// dispatcher's PublishTimeout on a busy machine, failing whole rounds into backoff.
package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// Config configures a Publisher.
type Config struct {
	// Client is the Redis client (or cluster client). Required. Close closes it.
	Client redis.UniversalClient
	// MaxLen caps each stream approximately (XADD MAXLEN ~). Default 0: unbounded.
	MaxLen int64
	// Marshaller turns a message into the stream entry's fields. Default:
	// watermill-redisstream's DefaultMarshallerUnmarshaller.
	Marshaller redisstream.Marshaller
}

// Publisher is a message.Publisher to Redis streams, one pipelined round trip per Publish.
// It is safe for concurrent use.
type Publisher struct {
	cfg Config
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher.
func NewPublisher(cfg Config) (*Publisher, error) {
	if cfg.Client == nil {
		return nil, errors.New("stream.NewPublisher: Client is required")
	}
	if cfg.MaxLen < 0 {
		return nil, errors.New("stream.NewPublisher: MaxLen must not be negative")
	}
	if cfg.Marshaller == nil {
		cfg.Marshaller = redisstream.DefaultMarshallerUnmarshaller{}
	}
	return &Publisher{cfg: cfg}, nil
}

// Publish appends msgs to stream topic, in order, in one round trip. The context is the
// first message's (the dispatcher gives every message of a call the same one). A message
// that cannot be marshalled fails the call before anything is sent. When the round trip
// fails, some messages may have been appended and others not: publishing them again is the
// caller's choice (at least once; readers deduplicate by message UUID).
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	args := make([]*redis.XAddArgs, len(msgs))
	for i, m := range msgs {
		values, err := p.cfg.Marshaller.Marshal(topic, m)
		if err != nil {
			return fmt.Errorf("stream.Publish: message %s: %w", m.UUID, err)
		}
		args[i] = &redis.XAddArgs{Stream: topic, Values: values, MaxLen: p.cfg.MaxLen, Approx: p.cfg.MaxLen > 0}
	}
	ctx := msgs[0].Context()
	if ctx == nil {
		ctx = context.Background()
	}
	cmds, err := p.cfg.Client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, a := range args {
			pipe.XAdd(ctx, a)
		}
		return nil
	})
	for i, c := range cmds {
		if c.Err() != nil {
			return fmt.Errorf("stream.Publish: message %s: %w", msgs[i].UUID, c.Err())
		}
	}
	if err != nil {
		return fmt.Errorf("stream.Publish: %w", err)
	}
	return nil
}

// Close closes the Redis client.
func (p *Publisher) Close() error { return p.cfg.Client.Close() }

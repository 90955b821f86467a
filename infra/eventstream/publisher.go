package eventstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Client is the Redis client (required). The Publisher does not close it.
	Client redis.UniversalClient
	// Marshaller writes each entry (default Marshaller{}).
	Marshaller redisstream.Marshaller
	// MaxLen trims the stream on each append, about (XADD MAXLEN ~): Retention.MaxLen; 0:
	// no trim.
	MaxLen int64
}

// Publisher is a watermill Publisher that appends messages to a Redis stream like
// watermill-redisstream's Publisher (same Marshaller contract, same MAXLEN ~ trimming, so
// its Subscriber reads the entries), but sends the XADDs of one Publish call in one
// pipeline: one round trip per batch instead of one per message. The batch shares the
// context of its first message. When Publish fails, some messages may have been appended
// (the outbox Dispatcher then publishes them one by one: an entry may be appended twice,
// with the same CloudEvent id). Safe for concurrent use.
type Publisher struct{ cfg PublisherConfig }

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Client == nil {
		return nil, errors.New("eventstream.NewPublisher: Client is required")
	}
	if cfg.MaxLen < 0 {
		return nil, errors.New("eventstream.NewPublisher: MaxLen must not be negative")
	}
	if cfg.Marshaller == nil {
		cfg.Marshaller = Marshaller{}
	}
	return &Publisher{cfg: cfg}, nil
}

// Publish appends msgs to the stream topic, in order, in one pipeline.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	ctx := msgs[0].Context()
	if ctx == nil {
		ctx = context.Background()
	}
	pipe := p.cfg.Client.Pipeline()
	for _, m := range msgs {
		values, err := p.cfg.Marshaller.Marshal(topic, m)
		if err != nil {
			return fmt.Errorf("eventstream.Publish: message %s: %w", m.UUID, err)
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: values, MaxLen: p.cfg.MaxLen, Approx: true})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("eventstream.Publish: XADD to %s: %w", topic, err)
	}
	return nil
}

// Close implements message.Publisher; the client stays open.
func (p *Publisher) Close() error { return nil }

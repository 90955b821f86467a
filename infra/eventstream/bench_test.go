package eventstream_test

import (
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/listingkit/listing/infra/eventstream"
)

// BenchmarkMarshal compares the CloudEvent entry with the entry watermill-redisstream's
// default marshaller wrote before (msgpack metadata + the job envelope), per message.
func BenchmarkMarshal(b *testing.B) {
	msg := dispatcherMessage(b, "0193a7c4-5e1f-7d2a-9b3c-4d5e6f708192", true)
	b.Run("cloudevent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (eventstream.Marshaller{}).Marshal("listing:events", msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("watermill-default", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (redisstream.DefaultMarshallerUnmarshaller{}).Marshal("listing:events", msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPublish100 appends batches of 100 integration events: watermill-redisstream's
// Publisher (one XADD round trip per message) against Publisher (one pipeline per batch).
func BenchmarkPublish100(b *testing.B) {
	rdb, stream := redisClient(b)
	msgs := make([]*message.Message, 100)
	for i := range msgs {
		msgs[i] = dispatcherMessage(b, fmt.Sprintf("0193a7c4-5e1f-7d2a-9b3c-%012d", i), true)
	}
	rs, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, Marshaller: eventstream.Marshaller{}, DefaultMaxlen: 10000},
		watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	pp, err := eventstream.NewPublisher(eventstream.PublisherConfig{Client: rdb, MaxLen: 10000})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pub  message.Publisher
	}{{"redisstream", rs}, {"pipelined", pp}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.pub.Publish(stream, msgs...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package eventstream_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/cloudevent"
	"github.com/listingkit/listing/infra/eventstream"
	"github.com/listingkit/listing/infra/outbox"
)

// dispatcherMessage is a message as the outbox Dispatcher builds it for worker.StreamEvents.
func dispatcherMessage(t testing.TB, id string, trace bool) *message.Message {
	t.Helper()
	env := worker.Envelope{EventID: id, WorkspaceID: "0193a7c4-0000-7000-8000-00000000000a", EventType: "publication.published",
		Payload: json.RawMessage(`{"publication_id":"p-1","product_revision":2}`), OccurredAt: time.Date(2026, 12, 1, 7, 30, 0, 5000, time.UTC),
		CorrelationID: "req-1"}
	if trace {
		env.Trace = &worker.Trace{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "k=v"}
	}
	b, err := json.Marshal(env)
	require.NoError(t, err)
	msg := message.NewMessage(id, b)
	msg.Metadata.Set(outbox.MetadataAggregateType, "publication")
	msg.Metadata.Set(outbox.MetadataAggregateID, "p-1")
	msg.Metadata.Set(outbox.MetadataEventType, "publication.published")
	return msg
}

func TestMarshalWritesOneFieldCloudEvent(t *testing.T) {
	t.Parallel()
	values, err := eventstream.Marshaller{}.Marshal("listing:events", dispatcherMessage(t, "0193a7c4-5e1f-7d2a-9b3c-4d5e6f708192", true))
	require.NoError(t, err)
	require.Len(t, values, 1, "one field per entry")
	var got map[string]any
	require.NoError(t, json.Unmarshal(values[cloudevent.FieldEvent].([]byte), &got))
	require.Equal(t, map[string]any{
		"specversion": "1.0", "id": "0193a7c4-5e1f-7d2a-9b3c-4d5e6f708192", "type": "publication.published", "source": "/listing",
		"subject": "publication/p-1", "time": "2026-12-01T07:30:00.000005Z", "datacontenttype": "application/json",
		"data":        map[string]any{"publication_id": "p-1", "product_revision": float64(2)},
		"workspaceid": "0193a7c4-0000-7000-8000-00000000000a",
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}, got)

	values, err = eventstream.Marshaller{}.Marshal("listing:events", dispatcherMessage(t, "0193a7c4-5e1f-7d2a-9b3c-4d5e6f708193", false))
	require.NoError(t, err)
	require.NotContains(t, string(values[cloudevent.FieldEvent].([]byte)), "traceparent", "no trace, no extension")

	_, err = eventstream.Marshaller{}.Marshal("listing:events", message.NewMessage("x", []byte(`not json`)))
	require.Error(t, err)
	_, err = eventstream.Marshaller{}.Marshal("listing:events", message.NewMessage("x", []byte(`{"event_id":"x"}`)))
	require.Error(t, err, "an envelope without type and workspace")
}

// TestPublishSubscribeThroughRedis publishes with watermill-redisstream's Publisher and with
// Publisher (pipelined), both with Marshaller, reads the raw entries, and consumes them with
// watermill-redisstream's Subscriber, a consumer group and Unmarshaller.
func TestPublishSubscribeThroughRedis(t *testing.T) {
	t.Parallel()
	rdb, stream := redisClient(t)
	log := watermill.NopLogger{}
	rs, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, Marshaller: eventstream.Marshaller{}, DefaultMaxlen: 100}, log)
	require.NoError(t, err)
	ids := []string{"0193a7c4-5e1f-7d2a-9b3c-4d5e6f708194", "0193a7c4-5e1f-7d2a-9b3c-4d5e6f708195", "0193a7c4-5e1f-7d2a-9b3c-4d5e6f708196"}
	require.NoError(t, rs.Publish(stream, dispatcherMessage(t, ids[0], true)))
	pp, err := eventstream.NewPublisher(eventstream.PublisherConfig{Client: rdb, MaxLen: 100})
	require.NoError(t, err)
	require.NoError(t, pp.Publish(stream, dispatcherMessage(t, ids[1], true), dispatcherMessage(t, ids[2], false)))
	require.Error(t, pp.Publish(stream, dispatcherMessage(t, "x", true), message.NewMessage("y", []byte("not an envelope"))))

	entries, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 3, "a batch with a bad message appends nothing")
	for i, e := range entries {
		require.Len(t, e.Values, 1)
		ev, err := cloudevent.FromEntry(e.Values)
		require.NoError(t, err)
		require.Equal(t, ids[i], ev.ID, "in order")
	}

	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: rdb, Unmarshaller: eventstream.Unmarshaller{},
		ConsumerGroup: "test", Consumer: "c1", OldestId: "0"}, log)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, stream)
	require.NoError(t, err)
	for _, id := range ids {
		select {
		case m := <-msgs:
			require.Equal(t, id, m.UUID)
			require.Equal(t, "publication.published", m.Metadata.Get(eventstream.MetadataType))
			require.Equal(t, "publication/p-1", m.Metadata.Get(eventstream.MetadataSubject))
			got, err := cloudevent.Decode(m.Payload)
			require.NoError(t, err)
			require.JSONEq(t, `{"publication_id":"p-1","product_revision":2}`, string(got.Data))
			m.Ack()
		case <-ctx.Done():
			t.Fatal("no message")
		}
	}
	cancel()
	require.NoError(t, sub.Close())
}

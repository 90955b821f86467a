package outbox

import (
	"context"
	"encoding/json"
	"testing"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestMetadataJSONMatchesMarshal: the hand-written metadata encoding decodes to what
// json.Marshal's does, escapes and invalid UTF-8 included, less the keys the row's columns
// hold.
func TestMetadataJSONMatchesMarshal(t *testing.T) {
	t.Parallel()
	for _, md := range []map[string]string{
		{},
		{"event_type": "task.started", "aggregate_id": "a", "traceparent": "00-x"},
		{"q\"uote": "back\\slash", "ctl": "\x00\x1f\t\n", "html": "<&>", "uni": "héllo ✓", "bad": "a\xffb", "sep": "\u2028"},
	} {
		var got, want map[string]string
		require.NoError(t, json.Unmarshal(appendMetadataJSON(nil, md), &got))
		w, err := json.Marshal(md)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(w, &want))
		for k := range want { // the keys the row's columns hold are left out
			if !rowMetadataKey(k) {
				delete(want, k)
			}
		}
		require.Equal(t, want, got)
	}
}

// TestUnwrapTrustsOnlyItsOwnEnvelope: SchemaAdapter reads the published message from the
// context only when the envelope it is given wraps that message; any other is decoded.
func TestUnwrapTrustsOnlyItsOwnEnvelope(t *testing.T) {
	t.Parallel()
	src := message.NewMessage("0190f5a2-0000-7000-8000-000000000001", []byte(`{"a":1}`))
	src.Metadata.Set(MetadataEventType, "test.happened")
	w := &wrapped{msg: src, dest: "jobs"}
	src.SetContext(context.WithValue(context.Background(), wrappedKey{}, w))
	envJSON := func(dest, id string) []byte {
		b, err := json.Marshal(envelope{DestinationTopic: dest, UUID: id, Payload: []byte(`{"b":2}`), Metadata: map[string]string{MetadataEventType: "other"}})
		require.NoError(t, err)
		return b
	}

	m := message.NewMessage("x", envJSON("jobs", src.UUID))
	m.SetContext(src.Context())
	env, trusted, err := unwrap(m)
	require.NoError(t, err)
	require.True(t, trusted)
	require.Equal(t, `{"a":1}`, string(env.Payload))
	require.Equal(t, "jobs", env.DestinationTopic)

	for _, other := range [][]byte{envJSON("stream", src.UUID), envJSON("jobs", "0190f5a2-0000-7000-8000-000000000002")} {
		m := message.NewMessage("x", other)
		m.SetContext(src.Context())
		env, trusted, err := unwrap(m)
		require.NoError(t, err)
		require.False(t, trusted)
		require.Equal(t, `{"b":2}`, string(env.Payload))
	}
}

// BenchmarkInsertQuery: one row's insert built from the message EventBus published (the
// context shortcut) and from the forwarder's JSON envelope alone (decoded).
func BenchmarkInsertQuery(b *testing.B) {
	src := message.NewMessage("0190f5a2-0000-7000-8000-000000000001",
		[]byte(`{"task_id":"0190f5a2-0000-7000-8000-0000000000aa","store_id":"0190f5a2-0000-7000-8000-0000000000bb","status":"succeeded","version":3}`))
	for k, v := range map[string]string{MetadataEventType: "task.succeeded", MetadataAggregateType: "task",
		MetadataAggregateID: "0190f5a2-0000-7000-8000-0000000000aa", MetadataOccurredAt: "2026-12-04T00:00:00.123456789Z",
		MetadataCorrelationID: "req-1234", MetadataTraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		src.Metadata.Set(k, v)
	}
	w := &wrapped{msg: src, dest: "listing:events"}
	src.SetContext(context.WithValue(context.Background(), wrappedKey{}, w))
	payload, err := json.Marshal(envelope{DestinationTopic: w.dest, UUID: src.UUID, Payload: src.Payload, Metadata: src.Metadata})
	if err != nil {
		b.Fatal(err)
	}
	a := SchemaAdapter{WorkspaceID: uuid.MustParse("0190f5a2-0000-7000-8000-0000000000cc")}
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"from-message", src.Context()}, {"decoded", context.Background()}} {
		b.Run(c.name, func(b *testing.B) {
			m := message.NewMessage("x", payload)
			m.SetContext(c.ctx)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.InsertQuery(wsql.InsertQueryParams{Topic: forwarderTopic, Msgs: message.Messages{m}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

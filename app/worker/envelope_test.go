package worker

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// AppendJSON writes what json.Marshal writes, for every shape of envelope.
func TestEnvelopeAppendJSONMatchesMarshal(t *testing.T) {
	var odd strings.Builder
	for c := range 0x80 {
		odd.WriteByte(byte(c))
	}
	odd.WriteString("é\u2028\u2029\xff<>&")
	at := time.Date(2026, 12, 4, 5, 6, 7, 123456789, time.UTC)
	for _, e := range []Envelope{
		{},
		{EventID: "e", WorkspaceID: "w", EventType: "t", Payload: json.RawMessage(`{"a": 1, "b": [1, 2, {"c": "<&>\u2028"}]}`), OccurredAt: at},
		{EventID: odd.String(), WorkspaceID: odd.String(), EventType: odd.String(), Payload: json.RawMessage(`"` + "x" + `"`),
			OccurredAt: at.In(time.FixedZone("x", 3600)), CorrelationID: odd.String(), Trace: &Trace{TraceParent: "00-a-b-01"}},
		{EventID: "e", Payload: json.RawMessage(` null `), CorrelationID: "c", Trace: &Trace{TraceState: "k=v"}},
		{EventID: "e", Payload: json.RawMessage(`{}`), Trace: &Trace{}},
		{EventID: "e", Payload: json.RawMessage(`{"a":1}`), Trace: &Trace{TraceParent: "p", TraceState: "s"}},
	} {
		want, err := json.Marshal(e)
		require.NoError(t, err)
		got, err := e.AppendJSON([]byte("prefix"))
		require.NoError(t, err)
		require.Equal(t, "prefix"+string(want), string(got))
	}
	_, err := Envelope{Payload: json.RawMessage(`{"a":`)}.AppendJSON(nil)
	require.Error(t, err)
}

// DecodeEnvelope reads what json.Unmarshal reads, with or without its fast path.
func TestDecodeEnvelopeMatchesUnmarshal(t *testing.T) {
	ws := "0f1c2b9e-0d7a-4c4e-9a57-3f0c1f2a9b11"
	at := time.Date(2026, 12, 4, 5, 6, 7, 123456789, time.UTC)
	var inputs []string
	for _, e := range []Envelope{
		{EventID: "e", WorkspaceID: ws, EventType: "t", Payload: json.RawMessage(`{"a":1,"b":[1,2,{"c":"x,]}"}]}`), OccurredAt: at},
		{EventID: "e", WorkspaceID: ws, Payload: json.RawMessage(`null`), CorrelationID: "c", Trace: &Trace{TraceState: "k=v"},
			OccurredAt: at.In(time.FixedZone("x", 3600))},
		{EventID: "e", WorkspaceID: ws, Payload: json.RawMessage(`"s"`), Trace: &Trace{}},
		{EventID: "e", WorkspaceID: ws, Payload: json.RawMessage(`12`), Trace: &Trace{TraceParent: "p", TraceState: "s"}},
		{EventID: "é<>", WorkspaceID: ws, Payload: json.RawMessage(`{"a":"\n"}`)},
		{EventID: "e", WorkspaceID: "not-a-uuid", Payload: json.RawMessage(`{}`)},
	} {
		b, err := e.AppendJSON(nil)
		require.NoError(t, err)
		inputs = append(inputs, string(b))
	}
	inputs = append(inputs, `{}`, `null`, `{"event_id":"e","workspace_id":"`+ws+`","event_type":"t","payload":{"a":1},"occurred_at":"bad"}`,
		`{"event_id":"e","workspace_id":"`+ws+`","event_type":"t","payload":{"a":1}}`,
		`{"event_id":"e","workspace_id":"`+ws+`","event_type":"t","payload":{"a":1,"occurred_at":"2026-12-04T05:06:07Z"}`,
		`{"event_id":"e","workspace_id":"`+ws+`","event_type":"t","payload":{"a":},"occurred_at":"2026-12-04T05:06:07Z"}`,
		`{"event_id":"e","workspace_id":"`+ws+`","event_type":"t","payload":{"a":1}},"occurred_at":"2026-12-04T05:06:07Z"}`,
		`{"event_id":"e","workspace_id":"`+ws+`","event_type":"t","payload":{"a":1},"occurred_at":"2026-12-04T05:06:07Z"} `,
		`{"workspace_id":"`+ws+`","event_id":"e","payload":{"a":1},"extra":true}`)
	for _, in := range inputs {
		var want Envelope
		werr := json.Unmarshal([]byte(in), &want)
		got, gerr := DecodeEnvelope([]byte(in))
		if werr != nil {
			require.Error(t, gerr, in)
			continue
		}
		if gerr != nil {
			require.Contains(t, gerr.Error(), "workspace_id", in)
			continue
		}
		require.Equal(t, want, got, in)
	}
}

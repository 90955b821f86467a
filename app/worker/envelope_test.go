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

package cloudevent_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/cloudevent"
)

func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 1, 7, 30, 0, 123456000, time.FixedZone("x", 3600))
	e, err := cloudevent.New("0193a1b2-0000-7000-8000-000000000001", "publication.published", "/listing", at,
		map[string]string{"publication_id": "p1"})
	require.NoError(t, err)
	e.Subject = "publications/p1"
	e.WorkspaceID = "ws-1"
	e.Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e.CorrelationID = "c-1"

	b, err := cloudevent.Encode(e)
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(b, &obj))
	require.Equal(t, map[string]any{
		"specversion":     "1.0",
		"id":              "0193a1b2-0000-7000-8000-000000000001",
		"type":            "publication.published",
		"source":          "/listing",
		"subject":         "publications/p1",
		"time":            "2026-12-01T06:30:00.123456Z",
		"datacontenttype": "application/json",
		"data":            map[string]any{"publication_id": "p1"},
		"workspaceid":     "ws-1",
		"traceparent":     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"correlationid":   "c-1",
	}, obj)

	got, err := cloudevent.Decode(b)
	require.NoError(t, err)
	require.True(t, e.Time.Equal(got.Time))
	got.Time, e.Time = time.Time{}, time.Time{}
	require.Equal(t, e, got)

	values, err := cloudevent.EntryValues(e)
	require.NoError(t, err)
	require.Len(t, values, 1)
	fromEntry, err := cloudevent.FromEntry(map[string]any{cloudevent.FieldEvent: string(values[cloudevent.FieldEvent].([]byte))})
	require.NoError(t, err)
	require.Equal(t, e.ID, fromEntry.ID)
}

func TestDecodeRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"not json":          `nope`,
		"array":             `[]`,
		"no specversion":    `{"id":"1","source":"/s","type":"t"}`,
		"wrong version":     `{"specversion":"0.3","id":"1","source":"/s","type":"t"}`,
		"no id":             `{"specversion":"1.0","source":"/s","type":"t"}`,
		"no source":         `{"specversion":"1.0","id":"1","type":"t"}`,
		"no type":           `{"specversion":"1.0","id":"1","source":"/s"}`,
		"bad time":          `{"specversion":"1.0","id":"1","source":"/s","type":"t","time":"yesterday"}`,
		"trailing object":   `{"specversion":"1.0","id":"1","source":"/s","type":"t"}{}`,
		"id twice":          `{"specversion":"1.0","id":"1","id":"2","source":"/s","type":"t"}`,
		"id in capitals":    `{"specversion":"1.0","ID":"1","source":"/s","type":"t"}`,
		"workspaceid twice": `{"specversion":"1.0","id":"1","source":"/s","type":"t","workspaceid":"a","workspaceid":"b"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := cloudevent.Decode([]byte(in))
			require.Error(t, err)
			require.True(t, errors.Is(err, cloudevent.ErrInvalid), "%v", err)
		})
	}
	_, err := cloudevent.FromEntry(map[string]any{"payload": "{}"})
	require.ErrorIs(t, err, cloudevent.ErrInvalid)
}

// TestDecodeKeepsData: data is kept as sent, names given twice included (its reader judges it).
func TestDecodeKeepsData(t *testing.T) {
	e, err := cloudevent.Decode([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"a":1,"a":2}}`))
	require.NoError(t, err)
	require.Equal(t, `{"a":1,"a":2}`, string(e.Data))
}

func TestDecodeMinimal(t *testing.T) {
	e, err := cloudevent.Decode([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","data":null}`))
	require.NoError(t, err)
	require.Empty(t, e.Data)
	require.True(t, e.Time.IsZero())
	b, err := cloudevent.Encode(e)
	require.NoError(t, err)
	require.JSONEq(t, `{"specversion":"1.0","id":"1","source":"/s","type":"t"}`, string(b))
}

func TestEncodeRefusesDataThatIsNotJSON(t *testing.T) {
	_, err := cloudevent.Encode(cloudevent.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Data: json.RawMessage(`{"a":`)})
	require.ErrorIs(t, err, cloudevent.ErrInvalid)
	_, err = cloudevent.Encode(cloudevent.Event{ID: "1", Source: "/s", Type: "t"})
	require.ErrorIs(t, err, cloudevent.ErrInvalid, "no specversion")
}

// FuzzDecode: Decode never panics, and what it accepts encodes and decodes to the same event.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","time":"2026-12-01T07:30:00Z","data":{"a":[1,"x"]},"workspaceid":"w"}`))
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","data":null,"traceparent":"00-x","integrationid":"i","correlationid":"c"}`))
	f.Add([]byte(`{"specversion":"1.0","id":"","source":"/s","type":"t"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := cloudevent.Decode(in)
		if err != nil {
			require.ErrorIs(t, err, cloudevent.ErrInvalid)
			return
		}
		b, err := cloudevent.Encode(e)
		require.NoError(t, err)
		again, err := cloudevent.Decode(b)
		require.NoError(t, err)
		require.True(t, e.Time.Equal(again.Time))
		e.Time, again.Time = time.Time{}, time.Time{}
		if len(e.Data) > 0 {
			require.JSONEq(t, string(e.Data), string(again.Data))
			e.Data, again.Data = nil, nil
		}
		require.Equal(t, e, again)
	})
}

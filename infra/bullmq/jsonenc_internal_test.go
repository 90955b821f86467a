package bullmq

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// appendMapJSON writes what json.Marshal writes.
func TestAppendMapJSONMatchesMarshal(t *testing.T) {
	var odd strings.Builder
	for c := range 0x80 {
		odd.WriteByte(byte(c))
	}
	odd.WriteString("é\u2028\u2029\xff\ufffd<>&")
	for _, m := range []map[string]string{
		{},
		{"a": "1"},
		{"event_type": "store.verification_requested", "workspace_id": "w", "aggregate_id": "x", "b": "", "": "e"},
		{odd.String(): odd.String(), "k": odd.String()},
	} {
		want, err := json.Marshal(m)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendMapJSON(nil, m)))
	}
}

// A job without options gets the Config defaults' opts JSON, as marshalled for its id.
func TestDefaultOptionsJSON(t *testing.T) {
	for _, cfg := range []Config{
		{Client: testRedis(t)},
		{Client: testRedis(t), Attempts: 3, Backoff: Backoff{Type: BackoffExponential, Delay: 1000},
			RemoveOnComplete: KeepJobs{Remove: true}, RemoveOnFailAge: 24 * time.Hour, DedupWindow: 2 * time.Hour},
		{Client: testRedis(t), DedupWindow: -1},
	} {
		p, err := NewPublisher(PublisherConfig{Config: cfg}, nil)
		require.NoError(t, err)
		for _, id := range []string{"6f1c2b9e-0d7a-4c4e-9a57-3f0c1f2a9b10", `a"b\c<d>&é`} {
			want, err := p.defaultOptions().marshal(id)
			require.NoError(t, err)
			c := scriptCall{}
			require.NoError(t, p.appendJob(&c, p.cfg.keys("q"), &Job{ID: id, Name: "n"}))
			require.Equal(t, string(want), string(c.args[3].([]byte)))
			require.Equal(t, int64(0), c.args[4])
			require.Equal(t, "", c.args[5])
			member := ""
			if p.cfg.DedupWindow > 0 {
				member = dedupMember(id)
			}
			require.Equal(t, member, c.args[7])
		}
	}
}

// parseMapJSON reads what json.Unmarshal reads, with or without its fast path.
func TestParseMapJSON(t *testing.T) {
	for _, s := range []string{`{}`, `{"a":"1"}`, `{"a":"1","b":""}`, `{"":"x","é":"\u00e9"}`, `{"a":"<\"b\">"}`,
		`{ "a" : "1" }`, `{"a":1}`, `{"a":"1",}`, `{"a":"1"`, `[]`, `null`, ``, `{"a":"1","a":"2"}`, `{"a":"` + "\x01" + `"}`,
		`{"a":"` + "\xff" + `"}`, `{"a":"1"}x`, `{"a"}`, `{"a":"1""b":"2"}`} {
		var want map[string]string
		if json.Unmarshal([]byte(s), &want) != nil {
			want = nil
		}
		require.Equal(t, want, parseMapJSON(s), s)
	}
	m := map[string]string{"event_type": "x", "workspace_id": "w", "k": "é<>&"}
	require.Equal(t, m, parseMapJSON(string(appendMapJSON(nil, m))))
}

// parseJobOptions reads what parseOptions reads, from its cache or not.
func TestParseJobOptionsCache(t *testing.T) {
	p, err := NewPublisher(PublisherConfig{Config: Config{Client: testRedis(t), Attempts: 3,
		Backoff: Backoff{Type: BackoffExponential, Delay: 1000}, DedupWindow: time.Hour}}, nil)
	require.NoError(t, err)
	for range 2 {
		for _, id := range []string{"6f1c2b9e-0d7a-4c4e-9a57-3f0c1f2a9b10", "0f1c2b9e-0d7a-4c4e-9a57-3f0c1f2a9b11", "x", "3", "exponential"} {
			raw, err := p.defaultOptions().marshal(id)
			require.NoError(t, err)
			for _, r := range []string{string(raw), `{"attempts":2,"jobId":"` + id + `","de":{"id":"other","ttl":5}}`, `{}`, `{"attempts":`,
				`{"backoff":{"type":"` + id + `","delay":5},"jobId":"` + id + `"}`, `{"backoff":"` + id + `"}`} {
				want, werr := parseOptions(r)
				got, gerr := parseJobOptions(id, r)
				require.Equal(t, werr != nil, gerr != nil, r)
				require.Equal(t, want, got, r)
			}
		}
	}
}

// A UUID is remembered as its 16 bytes; any other id as it is.
func TestDedupMember(t *testing.T) {
	require.Equal(t, "\x6f\x1c\x2b\x9e\x0d\x7a\x4c\x4e\x9a\x57\x3f\x0c\x1f\x2a\x9b\x10",
		dedupMember("6f1c2b9e-0d7a-4c4e-9a57-3f0c1f2a9B10"))
	for _, id := range []string{"x", "6f1c2b9e-0d7a-4c4e-9a57-3f0c1f2a9bz0", "6f1c2b9e00d7a-4c4e-9a57-3f0c1f2a9b10"} {
		require.Equal(t, id, dedupMember(id))
	}
}

package outbox

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// parseMetadata reads what json.Unmarshal reads, with or without its fast path.
func TestParseMetadata(t *testing.T) {
	for _, s := range []string{`{}`, ` { } `, `{"a": "1"}`, `{"a":"1","b":""}`, `{"a": "1", "b": "x y"}`, `{"":"x","é":"\u00e9"}`,
		`{"a":"<\"b\">"}`, "{\n\"a\" :\t\"1\" }", `{"a": 1}`, `{"a":"1",}`, `{"a":"1"`, `[]`, `null`, ``, `{"a":"1","a":"2"}`,
		`{"a":"` + "\x01" + `"}`, `{"a":"` + "\xff" + `"}`, `{"a":"1"}x`, `{"a"}`, `{"a":"1""b":"2"}`, `{,}`, `{"a":"1",,"b":"2"}`} {
		var want map[string]string
		if json.Unmarshal([]byte(s), &want) != nil {
			want = nil
		}
		require.Equal(t, want, parseMetadata([]byte(s)), s)
	}
}

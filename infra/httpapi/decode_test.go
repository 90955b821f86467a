package httpapi

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// TestDecodeStrictRefusesWhatMeansTwoThings: names are matched exactly, a name given twice
// (at any depth) and a name differing from the schema's only in case are UNKNOWN_FIELD naming
// it; the other refusals keep their codes.
func TestDecodeStrictRefusesWhatMeansTwoThings(t *testing.T) {
	type body struct {
		Title       string            `json:"title"`
		Price       int               `json:"price"`
		Credentials port.Credentials  `json:"credentials"`
		Input       map[string]string `json:"input"`
	}
	cases := []struct {
		name, in, code, field string
	}{
		{"case variant beside the name", `{"title":"x","Title":"y"}`, "UNKNOWN_FIELD", "Title"},
		{"case variant alone", `{"Title":"x"}`, "UNKNOWN_FIELD", "Title"},
		{"duplicate", `{"title":"x","title":"y"}`, "UNKNOWN_FIELD", "title"},
		{"nested duplicate", `{"input":{"a":"1","a":"2"}}`, "UNKNOWN_FIELD", "input.a"},
		{"duplicate in credentials", `{"credentials":{"api_key":"a","api_key":"b"}}`, "UNKNOWN_FIELD", "credentials.api_key"},
		{"case variant in credentials", `{"credentials":{"API_KEY":"a"}}`, "CREDENTIALS_INVALID", "credentials"},
		{"unknown", `{"bogus":1}`, "UNKNOWN_FIELD", "bogus"},
		{"wrong type", `{"price":"1"}`, "VALIDATION_FAILED", "price"},
		{"array", `[]`, "MALFORMED_JSON", ""},
		{"trailing data", `{} {}`, "MALFORMED_JSON", ""},
		{"truncated", `{"title":`, "MALFORMED_JSON", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dst body
			err := decodeStrict([]byte(c.in), &dst)
			var de *domain.Error
			require.True(t, errors.As(err, &de), "%v", err)
			require.Equal(t, c.code, de.Code, de.Message)
			if c.field != "" {
				require.Contains(t, de.Fields, c.field, de.Message)
			}
		})
	}
	var ok body
	require.NoError(t, decodeStrict([]byte(`{"title":"x","price":2,"credentials":{"api_key":"k"},"input":{"a":"1"}}`), &ok))
	require.Equal(t, "x", ok.Title)
	require.Equal(t, "k", ok.Credentials.APIKey())
	require.NoError(t, decodeStrict(nil, &ok))
}

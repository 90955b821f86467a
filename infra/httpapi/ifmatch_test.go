package httpapi

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/listingkit/listing/domain"
)

// TestParseIfMatch: only the canonical form of a revision, exactly as ETag writes it, is
// accepted; every other value is the same 400, and no header is 428.
func TestParseIfMatch(t *testing.T) {
	for v, want := range map[string]int{`"1"`: 1, `"3"`: 3, `"120"`: 120, ` "7" `: 7} {
		r := httptest.NewRequest("PUT", "/", nil)
		r.Header.Set("If-Match", v)
		if n, err := parseIfMatch(r); err != nil || n != want {
			t.Errorf("If-Match %s = %d, %v; want %d", v, n, err, want)
		}
	}
	for _, v := range []string{`"+3"`, `"003"`, `"03"`, `"0"`, `"-1"`, `"-0"`, `" 3"`, `"3 "`, `3`, `W/"3"`, `"3.0"`, `"0x3"`,
		`"1_000"`, `"99999999999999999999"`, `""`, `"`, `*`, `"3", "4"`, `"٣"`} {
		r := httptest.NewRequest("PUT", "/", nil)
		r.Header.Set("If-Match", v)
		if _, err := parseIfMatch(r); !errors.Is(err, domain.ErrInvalidInput) {
			t.Errorf("If-Match %s: err = %v, want VALIDATION_FAILED", v, err)
		}
	}
	r := httptest.NewRequest("PUT", "/", nil)
	if _, err := parseIfMatch(r); !errors.Is(err, domain.ErrPreconditionRequired) {
		t.Errorf("no If-Match: %v", err)
	}
}

package httpapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A store's declared states (domain.DeclareState) are members after verified_at, in their
// order: the bytes are those of a struct with the members written out.
func TestStoreJSONStates(t *testing.T) {
	at := time.Date(2026, 12, 7, 1, 2, 3, 4, time.UTC)
	v := storeJSON{ID: "s", Status: "gone", VerifiedAt: &at, CredentialsVersion: 2, CreatedAt: at, UpdatedAt: at,
		States: []stateJSON{{"gone_at", &at}, {"paused_at", nil}}}
	got, err := json.Marshal(v)
	require.NoError(t, err)
	want, err := json.Marshal(struct {
		ID                 string     `json:"id"`
		Platform           string     `json:"platform"`
		ShopID             string     `json:"shop_id"`
		Name               string     `json:"name"`
		Status             string     `json:"status"`
		VerifiedAt         *time.Time `json:"verified_at"`
		GoneAt             *time.Time `json:"gone_at"`
		PausedAt           *time.Time `json:"paused_at"`
		CredentialsVersion int        `json:"credentials_version"`
		CreatedAt          time.Time  `json:"created_at"`
		UpdatedAt          time.Time  `json:"updated_at"`
		RateLimit          any        `json:"rate_limit"`
	}{ID: "s", Status: "gone", VerifiedAt: &at, GoneAt: &at, CredentialsVersion: 2, CreatedAt: at, UpdatedAt: at})
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

package httpapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/listingkit/listing/domain"
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

// The Store schema of openapi.yaml names every state flows declared of stores
// (domain.DeclareState): its status among the statuses, its Since column among the members.
func TestStoreSchemaNamesTheDeclaredStates(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Store struct {
					Properties map[string]struct {
						Enum []string `yaml:"enum"`
					} `yaml:"properties"`
				} `yaml:"Store"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(OpenAPIDocument(), &doc))
	props := doc.Components.Schemas.Store.Properties
	for _, st := range domain.States("stores") {
		require.Contains(t, props["status"].Enum, st.Status, "openapi.yaml: Store.status")
		require.Contains(t, props, st.Since, "openapi.yaml: Store")
	}
}

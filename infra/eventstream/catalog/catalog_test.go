package catalog_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/eventstream/catalog"
)

var update = flag.Bool("update", false, "rewrite docs/events.md (make events-doc)")

// render renders the catalogue of the registry, with the field comments of domain/.
func render(t *testing.T) []byte {
	t.Helper()
	comments, err := catalog.GoComments("github.com/listingkit/listing/infra/eventstream/catalog", "../../../domain")
	require.NoError(t, err)
	require.Contains(t, comments, "github.com/listingkit/listing/domain.PublicationPublished.ExternalProductID", "the domain's comments were read")
	out, err := catalog.Catalog(domain.IntegrationEvents(), comments)
	require.NoError(t, err)
	return out
}

// TestCatalogIsCurrent fails when docs/events.md is not what the registry generates; run
// `make events-doc` to rewrite it.
func TestCatalogIsCurrent(t *testing.T) {
	path := filepath.Join("..", "..", "..", catalog.Path)
	want := render(t)
	if *update {
		require.NoError(t, os.WriteFile(path, want, 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "%s is stale: run make events-doc", catalog.Path)
}

// TestCatalogDocumentsEveryIntegrationEvent: the required types are integration events,
// each has a section with a JSON Schema whose properties are the event's JSON keys.
func TestCatalogDocumentsEveryIntegrationEvent(t *testing.T) {
	t.Parallel()
	doc := string(render(t))
	types := map[string]bool{}
	for _, e := range domain.IntegrationEvents() {
		typ := e.Sample.EventType()
		types[typ] = true
		require.NotEmpty(t, e.Doc, typ)
		require.Contains(t, doc, "\n### `"+typ+"`\n", "a section for %s", typ)

		raw, err := json.Marshal(catalog.Schema(e, nil))
		require.NoError(t, err)
		var schema struct {
			Type       string                     `json:"type"`
			Title      string                     `json:"title"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		require.NoError(t, json.Unmarshal(raw, &schema))
		require.Equal(t, "object", schema.Type, typ)
		require.Equal(t, typ, schema.Title)
		sample, err := json.Marshal(e.Sample)
		require.NoError(t, err)
		var keys map[string]any
		require.NoError(t, json.Unmarshal(sample, &keys))
		for k := range keys {
			require.Contains(t, schema.Properties, k, "%s: the schema documents %s", typ, k)
		}
	}
	for _, typ := range []string{"operation.status_changed", "publication.published", "store.verified", "product_sync.completed", "media.ready"} {
		require.True(t, types[typ], "%s is an integration event", typ)
	}
	require.Regexp(t, regexp.MustCompile(`"format": "uuid"`), doc, "ids are documented as UUIDs")
}

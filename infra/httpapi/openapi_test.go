package httpapi

import (
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/listingkit/listing/app"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestOpenAPIDocumentMatchesRoutes keeps the served document true: every route the router
// serves is documented with its method, and every documented operation is served.
func TestOpenAPIDocumentMatchesRoutes(t *testing.T) {
	s, err := New(Config{}, Deps{App: &app.Application{}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)

	served := map[string]bool{}
	err = chi.Walk(s.Router(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(route, "/")
		route = strings.ReplaceAll(route, "/*/", "/")
		served[method+" "+route] = true
		return nil
	})
	require.NoError(t, err)

	var doc struct {
		OpenAPI string                          `yaml:"openapi"`
		Paths   map[string]map[string]yaml.Node `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(OpenAPIDocument(), &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."))
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	require.Equal(t, keys(documented), keys(served), "openapi.yaml and the router disagree")
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

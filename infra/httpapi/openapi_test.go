package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
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
		if route != "/" {
			route = strings.TrimSuffix(route, "/")
		}
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

// serve answers one GET of the server at path.
func serve(t *testing.T, s *Server, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Result()
}

// The document names the service's PUBLIC_BASE_URL as its server; /docs renders every
// operation and schema on one page that needs nothing from elsewhere; / points to /docs.
func TestOpenAPIServedDocumentAndDocs(t *testing.T) {
	s, err := New(Config{PublicBaseURL: "https://listing.example.test"}, Deps{App: &app.Application{}})
	require.NoError(t, err)

	resp := serve(t, s, "/openapi.yaml")
	body, _ := io.ReadAll(resp.Body)
	var doc struct {
		Servers    []struct{ URL string }          `yaml:"servers"`
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Schemas map[string]any `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(body, &doc))
	require.Len(t, doc.Servers, 1)
	require.Equal(t, "https://listing.example.test", doc.Servers[0].URL)

	resp = serve(t, s, "/docs")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	html, _ := io.ReadAll(resp.Body)
	page := string(html)
	require.Contains(t, page, "https://listing.example.test")
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			require.Contains(t, page, `<span class="m `+method+`">`+strings.ToUpper(method)+`</span><span class="path">`+path+`</span>`)
		}
	}
	for name := range doc.Components.Schemas {
		require.Contains(t, page, `id="schema-`+name+`"`)
	}
	require.NotContains(t, page, "<script", "no scripts")
	require.NotRegexp(t, regexp.MustCompile(`(src|href)="(https?:)?//`), page, "nothing loaded from elsewhere")
	require.Contains(t, page, "<code>Idempotency-Key: &lt;uuid&gt;</code>", "descriptions are escaped, code spans kept")

	resp = serve(t, s, "/")
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Equal(t, "/docs", resp.Header.Get("Location"))
}

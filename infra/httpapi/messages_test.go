package httpapi

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app"
)

// Every command type runs through a route the router serves with the same method, its path
// ids are exactly the route's parameters, and docs/integrations.md lists it.
func TestMessageRoutesAreServedAndDocumented(t *testing.T) {
	s, err := New(Config{}, Deps{App: &app.Application{}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	served := map[string]bool{}
	require.NoError(t, chi.Walk(s.Router(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+strings.ReplaceAll(strings.TrimSuffix(route, "/"), "/*/", "/")] = true
		return nil
	}))
	doc, err := os.ReadFile("../../docs/integrations.md")
	require.NoError(t, err)

	types := MessageCommandTypes()
	require.Len(t, types, 9)
	for _, typ := range types {
		route := messageRoutes[typ]
		require.True(t, served[route.method+" /v1/workspaces/{workspace_id}"+route.path], "%s: %s %s is not served", typ, route.method, route.path)
		var params []string
		for _, part := range strings.Split(route.path, "/") {
			if strings.HasPrefix(part, "{") {
				params = append(params, strings.Trim(part, "{}"))
			}
		}
		require.Equal(t, params, route.params, typ)
		require.Contains(t, string(doc), "| `"+typ+"` | `"+route.method+" "+route.path+"` |", "docs/integrations.md does not list %s", typ)
	}
}

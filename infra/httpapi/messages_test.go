package httpapi

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app"
	"github.com/listingkit/listing/app/worker"
)

// Every command type the flows declare is in the catalogue, at an endpoint the router serves
// with the same method, its ids are exactly the route's parameters, and docs/integrations.md
// lists it.
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
	require.Len(t, types, 10)
	require.Equal(t, types, s.Catalogue().Types())
	for _, typ := range types {
		c, ok := s.Catalogue().Lookup(typ)
		require.True(t, ok, "%s is not in the catalogue", typ)
		require.True(t, served[c.Method+" /v1/workspaces/{workspace_id}"+c.Path], "%s: %s %s is not served", typ, c.Method, c.Path)
		var params, names []string
		for _, part := range strings.Split(c.Path, "/") {
			if strings.HasPrefix(part, "{") {
				params = append(params, strings.Trim(part, "{}"))
			}
		}
		for _, p := range c.Params {
			names = append(names, p.Name)
		}
		require.Equal(t, params, names, typ)
		require.Contains(t, string(doc), "| `"+typ+"` | `"+c.Method+" "+c.Path+"` |", "docs/integrations.md does not list %s", typ)
	}
}

// The catalogue refuses a command type outside listing.*, one declared twice, one without Run,
// and an endpoint whose parameters are not the command's ids; a command type a flow declares
// and the catalogue lacks stops the server from starting.
func TestCatalogueRefusesInconsistentCommands(t *testing.T) {
	run := func(context.Context, Call) (Answer, error) { return Answer{}, nil }
	var cat Catalogue
	require.NoError(t, cat.Add(Command{Type: "listing.x", Run: run}))
	require.ErrorContains(t, cat.Add(Command{Type: "listing.x", Run: run}), "declared twice")
	require.ErrorContains(t, cat.Add(Command{Type: "x", Run: run}), "not listing.<command>")
	require.ErrorContains(t, cat.Add(Command{Type: "listing.y"}), "no Run")
	require.ErrorContains(t, cat.Add(Command{Type: "listing.z", Method: "POST", Path: "/z/{z_id}", Run: run}), "names [z_id], the command takes []")

	s, err := New(Config{}, Deps{App: &app.Application{}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	_, err = s.catalogue([]worker.Spec{{Name: "f", Messages: []worker.Message{{Type: "listing.nothing", Method: "POST", Path: "/n"}}}})
	require.ErrorContains(t, err, "command type listing.nothing (flow f): not in the catalogue")
	_, err = s.catalogue(nil)
	require.ErrorContains(t, err, "no flow declares it")
}

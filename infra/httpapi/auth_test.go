package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/listingkit/listing/app"
	"github.com/listingkit/listing/domain"
)

// busySlots never has a free slot.
type busySlots struct{ calls int }

func (b *busySlots) Acquire(context.Context) (func(), error) {
	b.calls++
	return nil, domain.ErrServiceBusy.WithRetryAfter(3 * time.Second)
}

func (b *busySlots) AcquireShared(ctx context.Context) (func(), error) { return b.Acquire(ctx) }

// TestAuthAnswersServiceBusyWithoutASlot: register and login that find no password-hashing
// slot answer 503 SERVICE_BUSY problem+json with Retry-After, before any command runs (the
// application here has none), and the OpenAPI document says so.
func TestAuthAnswersServiceBusyWithoutASlot(t *testing.T) {
	slots := &busySlots{}
	s, err := New(Config{}, Deps{App: &app.Application{}, Registry: prometheus.NewRegistry(), HashSlots: slots})
	require.NoError(t, err)
	bodies := map[string]string{
		"/v1/auth/register": `{"email":"a@example.com","password":"correct horse battery","workspace_name":"A"}`,
		"/v1/auth/login":    `{"email":"a@example.com","password":"correct horse battery"}`,
	}
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(OpenAPIDocument(), &doc))
	for path, body := range bodies {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(rec, req)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, "%s: %s", path, rec.Body)
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
		require.Equal(t, "3", rec.Header().Get("Retry-After"))
		var p Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		require.Equal(t, "SERVICE_BUSY", p.Code)
		var op struct {
			Responses map[string]yaml.Node `yaml:"responses"`
		}
		node := doc.Paths[path]["post"]
		require.NoError(t, node.Decode(&op))
		require.Contains(t, op.Responses, "503", "%s documents its 503", path)
	}
	require.Equal(t, 2, slots.calls)
}

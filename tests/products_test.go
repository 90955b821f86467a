package tests

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/internal/servicetest"
)

func TestProductDraftRevisions(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	acct := env.Register("drafts@example.com")
	base := "/v1/workspaces/" + acct.WorkspaceID + "/products"

	created := env.Do(servicetest.Request{Method: "POST", Path: base, Token: acct.AccessToken,
		Body: map[string]any{"title": "Mug", "price": "9.90", "currency": "EUR", "images": []string{"https://cdn.example.com/a.jpg"}}})
	require.Equal(t, http.StatusCreated, created.Status, "%s", created.Body)
	require.Equal(t, `"1"`, created.Header.Get("ETag"))
	id := created.JSON(t)["product"].(map[string]any)["id"].(string)
	draft := base + "/" + id + "/draft"
	body := map[string]any{"title": "Mug XL", "price": "12.50", "currency": "EUR"}

	resp := env.Do(servicetest.Request{Method: "PUT", Path: draft, Token: acct.AccessToken, Body: body})
	require.Equal(t, http.StatusPreconditionRequired, resp.Status)
	require.Equal(t, "PRECONDITION_REQUIRED", resp.Code())

	resp = env.Do(servicetest.Request{Method: "PUT", Path: draft, Token: acct.AccessToken, Body: body, Header: map[string]string{"If-Match": `"1"`}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, `"2"`, resp.Header.Get("ETag"))

	resp = env.Do(servicetest.Request{Method: "PUT", Path: draft, Token: acct.AccessToken, Body: body, Header: map[string]string{"If-Match": `"1"`}})
	require.Equal(t, http.StatusPreconditionFailed, resp.Status)
	require.Equal(t, "REVISION_MISMATCH", resp.Code())

	resp = env.Do(servicetest.Request{Method: "PUT", Path: draft, Token: acct.AccessToken, Body: map[string]any{"title": "", "price": "1", "currency": "EUR"}, Header: map[string]string{"If-Match": `"2"`}})
	require.Equal(t, http.StatusBadRequest, resp.Status)
	require.Equal(t, "VALIDATION_FAILED", resp.Code())

	// Concurrent saves against the same revision: exactly one wins.
	var wg sync.WaitGroup
	statuses := make([]int, 10)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = env.Do(servicetest.Request{Method: "PUT", Path: draft, Token: acct.AccessToken, Body: body, Header: map[string]string{"If-Match": `"2"`}}).Status
		}()
	}
	wg.Wait()
	won := 0
	for _, s := range statuses {
		if s == http.StatusOK {
			won++
		} else {
			require.Equal(t, http.StatusPreconditionFailed, s)
		}
	}
	require.Equal(t, 1, won)

	got := env.Do(servicetest.Request{Method: "GET", Path: base + "/" + id, Token: acct.AccessToken})
	require.Equal(t, `"3"`, got.Header.Get("ETag"))
	require.Equal(t, "Mug XL", got.JSON(t)["product"].(map[string]any)["title"])

	// Draft saves neither use the idempotency store nor the outbox.
	require.Zero(t, env.Count(`SELECT count(*) FROM idempotency_requests`))
	require.Zero(t, env.Count(`SELECT count(*) FROM outbox_all_events`))

	missing := env.Do(servicetest.Request{Method: "GET", Path: base + "/00000000-0000-4000-8000-000000000000", Token: acct.AccessToken})
	require.Equal(t, http.StatusNotFound, missing.Status)
	require.Equal(t, "PRODUCT_NOT_FOUND", missing.Code())
}

func TestProductListPagination(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	acct := env.Register("pages@example.com")
	base := "/v1/workspaces/" + acct.WorkspaceID + "/products"
	for i := 0; i < 5; i++ {
		resp := env.Do(servicetest.Request{Method: "POST", Path: base, Token: acct.AccessToken, Body: map[string]any{"title": "P", "price": "1", "currency": "EUR"}})
		require.Equal(t, http.StatusCreated, resp.Status)
	}
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; pages < 5; pages++ {
		path := base + "?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		page := env.Do(servicetest.Request{Method: "GET", Path: path, Token: acct.AccessToken}).JSON(t)
		for _, it := range page["items"].([]any) {
			seen[it.(map[string]any)["id"].(string)] = true
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Len(t, seen, 5)
	bad := env.Do(servicetest.Request{Method: "GET", Path: base + "?cursor=garbage", Token: acct.AccessToken})
	require.Equal(t, http.StatusBadRequest, bad.Status)
}

package platform

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/listingkit/listing/app/port"
)

// A refusal keeps its status for the method that called do (statusOf), and stays
// port.ErrPlatformRejected for everyone else, with the same message.
func TestRefusalKeepsItsStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := port.NewCredentials("sk_test_status")
	if err != nil {
		t.Fatal(err)
	}
	err = c.do(context.Background(), "platform.Test", creds, http.MethodDelete, "/v1/products/x", nil, "", nil, nil)
	if statusOf(err) != http.StatusNotFound || !errors.Is(err, port.ErrPlatformRejected) {
		t.Fatalf("got %v (status %d), want a 404 refusal", err, statusOf(err))
	}
	if got, want := err.Error(), "platform.Test: HTTP 404: "+port.ErrPlatformRejected.Error(); got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if statusOf(errors.New("other")) != 0 || statusOf(nil) != 0 {
		t.Fatal("statusOf of a non-refusal must be 0")
	}
}

package port_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

const planted = "sk_test_CANARY_4b1d"

func TestCredentialsNeverRender(t *testing.T) {
	c, err := port.NewCredentials(planted)
	if err != nil {
		t.Fatal(err)
	}
	type holder struct {
		Exported   port.Credentials
		unexported port.Credentials
		Ptr        *port.Credentials
	}
	h := holder{Exported: c, unexported: c, Ptr: &c}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		out = append(out, fmt.Sprintf(verb, c), fmt.Sprintf(verb, h), fmt.Sprintf(verb, &c))
	}
	js, _ := json.Marshal(h)
	out = append(out, string(js), c.String(), c.GoString())
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("x", "creds", c, "holder", h, "ptr", &c)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "creds", c, "holder", h)
	out = append(out, buf.String())
	for _, s := range out {
		if strings.Contains(s, planted) || strings.Contains(s, fmt.Sprintf("%x", planted)) {
			t.Fatalf("credential leaked: %s", s)
		}
	}
	if c.APIKey() != planted {
		t.Fatal("APIKey lost the key")
	}
}

func TestCredentialsJSONRoundTrip(t *testing.T) {
	c, _ := port.NewCredentials(planted)
	raw, err := c.SecretJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := port.ParseCredentials(raw)
	if err != nil || back.APIKey() != planted {
		t.Fatalf("ParseCredentials: %v", err)
	}
	var body struct {
		Credentials port.Credentials `json:"credentials"`
	}
	if err := json.Unmarshal([]byte(`{"credentials":{"api_key":"`+planted+`"}}`), &body); err != nil || body.Credentials.APIKey() != planted {
		t.Fatalf("UnmarshalJSON: %v", err)
	}
	for _, bad := range []string{`{}`, `{"api_key":""}`, `{"api_key":5}`, `"x"`, `{"api_key":"a b"}`, `{"api_key":"k","` + planted + `":1}`, `{"api_key":"k"}{}`} {
		_, err := port.ParseCredentials([]byte(bad))
		if !errors.Is(err, port.ErrCredentialsInvalid) {
			t.Errorf("%s: err = %v", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), planted) {
			t.Errorf("%s: error quotes input", bad)
		}
	}
	var zero port.Credentials
	if !zero.IsZero() || zero.APIKey() != "" {
		t.Fatal("zero value holds a key")
	}
}

func TestRateLimitedErrorMatches(t *testing.T) {
	err := fmt.Errorf("platform.CreateProduct: %w", &port.RateLimitedError{Service: "platform", RetryAfter: 7 * time.Second, Sentinel: port.ErrPlatformRateLimited})
	if !errors.Is(err, port.ErrPlatformRateLimited) {
		t.Fatal("errors.Is sentinel")
	}
	var rl *port.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second {
		t.Fatal("errors.As RateLimitedError")
	}
	var de *domain.Error
	if !errors.As(err, &de) || de.Kind != domain.KindRateLimited || de.RetryAfter != 7*time.Second {
		t.Fatalf("errors.As domain.Error: %+v", de)
	}
	if port.IsPermanent(err) {
		t.Fatal("rate limit is not permanent")
	}
	if !port.IsPermanent(fmt.Errorf("x: %w", port.ErrPlatformUnauthorized)) || port.IsPermanent(port.ErrPlatformTransient) {
		t.Fatal("IsPermanent")
	}
}

package secret

import (
	"bytes"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
)

func keyOf(b byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, KeySize))
}

func mustNew(t *testing.T, keys string) *Cipher {
	t.Helper()
	c, err := New(Config{Keys: keys})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	c := mustNew(t, "k1:"+keyOf(1))
	ad := port.CredentialsAD(uuid.New(), uuid.New())
	pt := []byte(`{"api_key":"sk_test_secret"}`)
	sealed, id, err := c.Seal(pt, ad)
	if err != nil || id != "k1" {
		t.Fatalf("Seal: %v %q", err, id)
	}
	if bytes.Contains(sealed, []byte("sk_test_secret")) {
		t.Fatal("sealed value contains the plaintext")
	}
	got, err := c.Open(sealed, id, ad)
	if err != nil || !bytes.Equal(got, pt) {
		t.Fatalf("Open: %v %q", err, got)
	}
	again, _, _ := c.Seal(pt, ad)
	if bytes.Equal(again, sealed) {
		t.Fatal("two seals of the same plaintext are equal: nonce reuse")
	}
}

func TestRotation(t *testing.T) {
	old := mustNew(t, "k1:"+keyOf(1))
	ad := []byte("ad")
	sealed, id, _ := old.Seal([]byte("secret"), ad)

	rotated := mustNew(t, "k2:"+keyOf(2)+", k1:"+keyOf(1))
	if rotated.CurrentKeyID() != "k2" {
		t.Fatalf("current = %q", rotated.CurrentKeyID())
	}
	got, err := rotated.Open(sealed, id, ad)
	if err != nil || string(got) != "secret" {
		t.Fatalf("old key does not open after rotation: %v", err)
	}
	_, newID, _ := rotated.Seal([]byte("secret"), ad)
	if newID != "k2" {
		t.Fatalf("sealed with %q, want k2", newID)
	}

	dropped := mustNew(t, "k2:"+keyOf(2))
	if _, err := dropped.Open(sealed, id, ad); !errors.Is(err, port.ErrCredentialsKeyUnknown) {
		t.Fatalf("dropped key: %v", err)
	}
}

func TestWrongADAndTamperFail(t *testing.T) {
	c := mustNew(t, "k1:"+keyOf(1)+",k2:"+keyOf(2))
	ws, store := uuid.New(), uuid.New()
	ad := port.CredentialsAD(ws, store)
	sealed, id, _ := c.Seal([]byte("secret"), ad)

	cases := map[string]func() ([]byte, string, []byte){
		"other store":     func() ([]byte, string, []byte) { return sealed, id, port.CredentialsAD(ws, uuid.New()) },
		"other workspace": func() ([]byte, string, []byte) { return sealed, id, port.CredentialsAD(uuid.New(), store) },
		"relabeled key":   func() ([]byte, string, []byte) { return sealed, "k2", ad },
		"truncated":       func() ([]byte, string, []byte) { return sealed[:10], id, ad },
		"empty":           func() ([]byte, string, []byte) { return nil, id, ad },
	}
	for i := range sealed {
		i := i
		cases["flip byte "+string(rune('a'+i%26))+strings.Repeat("'", i/26)] = func() ([]byte, string, []byte) {
			b := append([]byte(nil), sealed...)
			b[i] ^= 0x40
			return b, id, ad
		}
	}
	for name, f := range cases {
		s, kid, a := f()
		if _, err := c.Open(s, kid, a); !errors.Is(err, port.ErrCredentialsUndecryptable) {
			t.Errorf("%s: err = %v, want ErrCredentialsUndecryptable", name, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []string{
		"k1",
		"k1:notbase64!!",
		"k1:" + base64.StdEncoding.EncodeToString([]byte("short")),
		"k 1:" + keyOf(1),
		"k1:" + keyOf(1) + ",k1:" + keyOf(2),
	}
	for _, keys := range bad {
		err := Config{Keys: keys}.Validate()
		if err == nil {
			t.Errorf("%q: want error", keys)
			continue
		}
		if strings.Contains(err.Error(), keyOf(1)) || strings.Contains(err.Error(), "notbase64") {
			t.Errorf("%q: error leaks key material: %v", keys, err)
		}
	}
	if err := (Config{RequireKeys: true}).Validate(); err == nil {
		t.Error("RequireKeys with no keys: want error")
	}
	if err := (Config{Keys: "a:" + keyOf(1) + ",b_2.x-y:" + strings.TrimRight(base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32)), "=")}).Validate(); err != nil {
		t.Errorf("valid keys: %v", err)
	}
}

func TestEphemeralKeyLoggedWithoutKey(t *testing.T) {
	var buf bytes.Buffer
	c, err := New(Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "generated ephemeral key") || !strings.Contains(buf.String(), c.CurrentKeyID()) {
		t.Fatalf("log = %q", buf.String())
	}
	sealed, id, _ := c.Seal([]byte("x"), nil)
	if got, err := c.Open(sealed, id, nil); err != nil || string(got) != "x" {
		t.Fatalf("ephemeral round trip: %v", err)
	}
}

func TestGenerateKeysValue(t *testing.T) {
	v, err := GenerateKeysValue("prod-2025")
	if err != nil {
		t.Fatal(err)
	}
	if err := (Config{Keys: v}).Validate(); err != nil {
		t.Fatalf("generated value does not validate: %v", err)
	}
}

package idem_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/infra/idem"
)

// The HTTP layer reads the key and the semantic headers; the fingerprint is the same for any
// spelling of the same JSON body.
func Example() {
	h := http.Header{}
	h.Set(idem.HeaderKey, "8f421c70-3b1e-4c8f-9a4e-0d6b7f2a1c55")
	h.Set("Content-Type", "application/json; charset=UTF-8")

	key, err := idem.ParseKey(h.Values(idem.HeaderKey))
	fmt.Println(key, err)

	secret := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	keys, _ := idem.ParseKeys("2025-06:" + secret)
	fp, _ := idem.NewFingerprinter(keys)
	a := fp.Fingerprint("POST", "/v1/workspaces/w/stores",
		bus.FingerprintInput{Body: []byte(`{"name":"Shop","price":1.0}`), Headers: idem.SemanticHeaders(h)})
	b := fp.Fingerprint("POST", "/v1/workspaces/w/stores/",
		bus.FingerprintInput{Body: []byte(`{ "price": 1, "name": "Shop" }`), Headers: idem.SemanticHeaders(h)})
	fmt.Println(a.KeyID, bytes.Equal(a.MAC, b.MAC))

	_, err = idem.ParseKey([]string{"not-a-uuid"})
	fmt.Println(err)
	// Output:
	// 8f421c70-3b1e-4c8f-9a4e-0d6b7f2a1c55 <nil>
	// 2025-06 true
	// IDEMPOTENCY_KEY_INVALID: the Idempotency-Key header must be sent once and hold a UUID
}

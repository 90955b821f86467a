package clientkey_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/clientkey"
)

func TestOf(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:5000":                "127.0.0.1",
		"[::ffff:10.0.0.1]:1":           "10.0.0.1",
		"[2001:db8:1:2:aaaa::1]:443":    "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:1:2:3]:443": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":             "fe80::/64",
		"2001:db8:1:3::9":               "2001:db8:1:3::/64",
		"pipe":                          "pipe",
		strings.Repeat("x", 300):        strings.Repeat("x", clientkey.MaxLength),
	} {
		require.Equal(t, want, clientkey.Of(in), in)
	}
}

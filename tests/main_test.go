package tests

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/listingkit/listing/internal/redistest"
)

// TestMain stops the Redis Cluster of the cluster tests (redistest.Shared) and removes the
// `app` binary the process tests built (seedBinary) when the tests end.
func TestMain(m *testing.M) {
	code := redistest.Main(m)
	if seedBuildPath != "" {
		_ = os.RemoveAll(filepath.Dir(seedBuildPath))
	}
	os.Exit(code)
}

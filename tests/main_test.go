package tests

import (
	"os"
	"testing"

	"github.com/listingkit/listing/internal/redistest"
)

// TestMain stops the Redis Cluster of the cluster tests (redistest.Shared) when the tests end.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// The -addr flag is checked like HTTP_ADDR: development keys stay on loopback.
func TestAddrFlagBeyondLoopbackRefusesDevelopmentKeys(t *testing.T) {
	t.Setenv("APP_ENV", "development")
	t.Setenv("AUTH_TOKEN_KEYS", "")
	for _, k := range []string{"DATABASE_URL", "MIGRATE_DATABASE_URL"} {
		t.Setenv(k, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	}
	for _, sub := range []string{"serve", "all"} {
		err := realMain(context.Background(), []string{sub, "-addr", "0.0.0.0:0"})
		require.ErrorContains(t, err, "HTTP_ADDR", sub)
	}
}

package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestRetryTransient: Remember's and Uncount's transaction is tried again after a
// serialization failure, a deadlock or a connection the server refused, at most three times
// in all, and never after another error.
func TestRetryTransient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	failing := func(code string, times int) (func() error, *int) {
		calls := 0
		return func() error {
			calls++
			if calls <= times {
				return fmt.Errorf("postgres.LoginLimits.Remember: %w", TranslateError(&pgconn.PgError{Code: code}))
			}
			return nil
		}, &calls
	}
	for _, code := range []string{CodeSerializationFailure, CodeDeadlockDetected, codeTooManyConnections, codeCannotConnectNow} {
		fn, calls := failing(code, 2)
		require.NoError(t, retryTransient(ctx, fn), code)
		require.Equal(t, 3, *calls, code)
		fn, calls = failing(code, 3)
		require.Error(t, retryTransient(ctx, fn), code)
		require.Equal(t, 3, *calls, "%s: three tries at most", code)
	}
	fn, calls := failing(CodeUniqueViolation, 1)
	require.Error(t, retryTransient(ctx, fn))
	require.Equal(t, 1, *calls, "a unique violation is not retried")
}

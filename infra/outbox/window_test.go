package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With the defaults (20 attempts, a 30 s lease, backoff 1 s doubling to 5 min) the outbox may
// publish an event again up to 73.5 minutes after its first publication.
func TestRedeliveryWindow(t *testing.T) {
	t.Parallel()
	require.Equal(t, (511+11*300+20*30)*time.Second, RedeliveryWindow(20, 30*time.Second))
	require.Equal(t, 31*time.Second, RedeliveryWindow(1, 30*time.Second))
	require.Zero(t, RedeliveryWindow(0, time.Second))
	require.Equal(t, (511+991*300+1000)*time.Second, RedeliveryWindow(1000, time.Second), "no overflow")
}

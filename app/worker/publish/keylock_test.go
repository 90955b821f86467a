package publish

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/internal/testwait"
)

func TestKeyLockSerializesOneKeyOnly(t *testing.T) {
	t.Parallel()
	var k keyLock
	a, b := uuid.New(), uuid.New()
	ctx := context.Background()

	unlockA, err := k.lock(ctx, a)
	require.NoError(t, err)
	unlockB, err := k.lock(ctx, b) // another key is free
	require.NoError(t, err)
	unlockB()

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = k.lock(short, a)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	var mu sync.Mutex
	order := []string{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		unlock, err := k.lock(ctx, a)
		if err == nil {
			mu.Lock()
			order = append(order, "second")
			mu.Unlock()
			unlock()
		}
	}()
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	order = append(order, "first")
	mu.Unlock()
	unlockA()
	testwait.Recv(t, done, "the second lock")
	require.Equal(t, []string{"first", "second"}, order)

	k.mu.Lock()
	defer k.mu.Unlock()
	require.Empty(t, k.locks, "entries are dropped when nobody holds or waits")
}

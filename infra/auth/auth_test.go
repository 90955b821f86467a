package auth

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
)

func TestTokensRotationAndExpiry(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	oldKey, newKey := RandomKey("k1"), RandomKey("k2")
	user := uuid.New()

	old, err := NewTokens([]Key{oldKey}, time.Minute, clock)
	require.NoError(t, err)
	tok, err := old.Issue(user)
	require.NoError(t, err)

	// After rotation (new key first, old still accepted) the old token verifies; a token
	// signed by an unknown key does not.
	rotated, err := NewTokens([]Key{newKey, oldKey}, time.Minute, clock)
	require.NoError(t, err)
	got, err := rotated.Verify(tok.Token)
	require.NoError(t, err)
	require.Equal(t, user, got)
	retired, err := NewTokens([]Key{newKey}, time.Minute, clock)
	require.NoError(t, err)
	_, err = retired.Verify(tok.Token)
	require.ErrorIs(t, err, domain.ErrUnauthenticated)

	// Tampered and expired tokens are refused.
	_, err = rotated.Verify(tok.Token[:len(tok.Token)-2] + "xx")
	require.ErrorIs(t, err, domain.ErrUnauthenticated)
	now = now.Add(2 * time.Minute)
	_, err = rotated.Verify(tok.Token)
	require.ErrorIs(t, err, domain.ErrUnauthenticated)
	// "none" and other algorithms are refused.
	_, err = rotated.Verify("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	require.ErrorIs(t, err, domain.ErrUnauthenticated)
}

func TestParseKeysNeverQuotesSecrets(t *testing.T) {
	secret := "c2hvcnQ=" // "short": too short
	_, err := ParseKeys("a:" + secret)
	require.Error(t, err)
	require.NotContains(t, err.Error(), secret)
	_, err = ParseKeys("a:not base64!!")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "not base64!!")
	_, err = ParseKeys("a:" + strings.Repeat("A", 44) + ",a:" + strings.Repeat("B", 44))
	require.ErrorContains(t, err, "duplicate")
	keys, err := ParseKeys("k1:" + strings.Repeat("A", 44) + ", k2:" + strings.Repeat("B", 44))
	require.NoError(t, err)
	require.Equal(t, "k1", keys[0].ID)
}

func TestHasherVerify(t *testing.T) {
	h := Hasher{Params: FastHashParams}
	hash, err := h.Hash("correct horse battery")
	require.NoError(t, err)
	require.NotContains(t, hash, "correct horse")
	ok, err := h.Verify("correct horse battery", hash)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = h.Verify("wrong", hash)
	require.NoError(t, err)
	require.False(t, ok)
	_, err = h.Verify("x", "not a hash")
	require.Error(t, err)
}

func TestHashSlotsBoundAndRefuseAfterTheWait(t *testing.T) {
	t.Parallel()
	s := NewHashSlots(2, 50*time.Millisecond)
	ctx := context.Background()
	r1, err := s.Acquire(ctx)
	require.NoError(t, err)
	r2, err := s.Acquire(ctx)
	require.NoError(t, err)

	start := time.Now()
	_, err = s.Acquire(ctx)
	require.ErrorIs(t, err, domain.ErrServiceBusy)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "waited before refusing")
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, domain.KindUnavailable, de.Kind)
	require.Equal(t, time.Second, de.RetryAfter)

	// A slot released during the wait is taken.
	go func() { time.Sleep(10 * time.Millisecond); r1() }()
	r3, err := s.Acquire(ctx)
	require.NoError(t, err)

	// A caller that goes away gets its own context's error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Acquire(cctx)
	require.ErrorIs(t, err, context.Canceled)
	r2()
	r3()
}

func TestHashSlotsDefaultToTheCPUs(t *testing.T) {
	t.Parallel()
	s := NewHashSlots(0, time.Millisecond)
	var releases []func()
	for range runtime.NumCPU() {
		r, err := s.Acquire(context.Background())
		require.NoError(t, err)
		releases = append(releases, r)
	}
	_, err := s.Acquire(context.Background())
	require.ErrorIs(t, err, domain.ErrServiceBusy)
	for _, r := range releases {
		r()
	}
}

// TestHashSlotsReserveAQuarterForAcquire: AcquireShared never takes the reserved slots, so
// with every shared slot busy Acquire still gets one at once.
func TestHashSlotsReserveAQuarterForAcquire(t *testing.T) {
	t.Parallel()
	s := NewHashSlots(4, 20*time.Millisecond)
	ctx := context.Background()
	var releases []func()
	for range 3 {
		r, err := s.AcquireShared(ctx)
		require.NoError(t, err)
		releases = append(releases, r)
	}
	_, err := s.AcquireShared(ctx)
	require.ErrorIs(t, err, domain.ErrServiceBusy, "the fourth slot is reserved")
	start := time.Now()
	r, err := s.Acquire(ctx)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 10*time.Millisecond, "a reserved slot is taken at once")
	_, err = s.Acquire(ctx)
	require.ErrorIs(t, err, domain.ErrServiceBusy)
	r()
	for _, r := range releases {
		r()
	}
	one := NewHashSlots(1, time.Millisecond)
	r, err = one.AcquireShared(ctx)
	require.NoError(t, err, "one slot: nothing reserved")
	r()
}

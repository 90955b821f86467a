package domain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
)

func TestParseRateLimit(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]domain.RateLimit{
		"":       {},
		"10/20":  {PerSecond: 10, Burst: 20},
		" 0.5/1": {PerSecond: 0.5, Burst: 1},
		"3":      {PerSecond: 3, Burst: 3},
		"0.2":    {PerSecond: 0.2, Burst: 1},
	} {
		got, err := domain.ParseRateLimit(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		again, err := domain.ParseRateLimit(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again)
	}
	for _, in := range []string{"x", "10/x", "0/5", "-1/5", "10/0", "NaN/2", "Inf/2", "10/20/30"} {
		_, err := domain.ParseRateLimit(in)
		require.Error(t, err, in)
	}
}

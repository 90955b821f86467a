package eventstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/eventstream"
)

// addAt appends n entries with ids at the given time.
func addAt(t *testing.T, rdb *redis.Client, stream string, at time.Time, n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, ID: fmt.Sprintf("%d-%d", at.UnixMilli(), i),
			Values: map[string]any{"event": "{}"}}).Err())
	}
}

func TestTrimmerRemovesEntriesOlderThanMaxAge(t *testing.T) {
	t.Parallel()
	rdb, stream := redisClient(t)
	ctx := context.Background()
	// A node of a stream holds up to 100 entries and MINID ~ removes whole nodes only: 300
	// old entries fill three nodes, which go; the 5 recent ones stay.
	now := time.Now()
	addAt(t, rdb, stream, now.Add(-3*time.Hour), 300)
	addAt(t, rdb, stream, now.Add(-time.Minute), 5)
	tr, err := eventstream.NewTrimmer(eventstream.TrimmerConfig{Client: rdb, Streams: []string{stream}, MaxAge: time.Hour})
	require.NoError(t, err)
	n, err := tr.TrimOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(300), n)
	left, err := rdb.XLen(ctx, stream).Result()
	require.NoError(t, err)
	require.Equal(t, int64(5), left)

	off, err := eventstream.NewTrimmer(eventstream.TrimmerConfig{Client: rdb, Streams: []string{stream}})
	require.NoError(t, err)
	n, err = off.TrimOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "MaxAge 0: no bound by age")
}

func TestStreamCollectorReportsLagPerGroup(t *testing.T) {
	t.Parallel()
	rdb, stream := redisClient(t)
	ctx := context.Background()
	old := time.Now().Add(-10 * time.Minute)
	addAt(t, rdb, stream, old, 3)
	addAt(t, rdb, stream, old.Add(5*time.Minute), 2)
	require.NoError(t, rdb.XGroupCreate(ctx, stream, "fast", "0").Err())
	require.NoError(t, rdb.XGroupCreate(ctx, stream, "slow", "0").Err())
	// fast reads all 5 and acknowledges 4; slow reads 2.
	read := func(group string, n int64) []redis.XMessage {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{stream, ">"}, Count: n}).Result()
		require.NoError(t, err)
		return res[0].Messages
	}
	fast := read("fast", 10)
	require.Len(t, fast, 5)
	for _, m := range fast[:4] {
		require.NoError(t, rdb.XAck(ctx, stream, "fast", m.ID).Err())
	}
	require.Len(t, read("slow", 2), 2)

	c := eventstream.NewStreamCollector(rdb, map[string]eventstream.Retention{stream: {MaxLen: 1000, MaxAge: time.Hour}}, nil)
	got := gauges(t, c)
	require.Equal(t, 5.0, got["listing_stream_length"])
	require.Equal(t, 1000.0, got["listing_stream_retention_max_length"])
	require.Equal(t, 3600.0, got["listing_stream_retention_max_age_seconds"])
	require.InDelta(t, 600, got["listing_stream_oldest_entry_age_seconds"], 60)
	require.Equal(t, 0.0, got["listing_stream_group_lag/fast"])
	require.Equal(t, 1.0, got["listing_stream_group_pending/fast"])
	require.Equal(t, 0.0, got["listing_stream_group_oldest_unread_age_seconds/fast"])
	require.Equal(t, 3.0, got["listing_stream_group_lag/slow"])
	require.Equal(t, 2.0, got["listing_stream_group_pending/slow"])
	require.InDelta(t, 600, got["listing_stream_group_oldest_unread_age_seconds/slow"], 60, "the third entry is as old as the first")
	require.Equal(t, 4+2*3, testutil.CollectAndCount(c), "4 series for the stream, 3 per group")
}

// gauges gathers c's series as name[/group] → value.
func gauges(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" {
					key += "/" + l.GetValue()
				}
			}
			got[key] = m.GetGauge().GetValue()
		}
	}
	return got
}

func TestStreamCollectorEdgeCases(t *testing.T) {
	t.Parallel()
	rdb, stream := redisClient(t)
	ctx := context.Background()

	// A stream nobody wrote yet: length 0, its bounds, no group.
	got := gauges(t, eventstream.NewStreamCollector(rdb, map[string]eventstream.Retention{stream: {MaxLen: 10}}, nil))
	require.Equal(t, map[string]float64{"listing_stream_length": 0, "listing_stream_oldest_entry_age_seconds": 0,
		"listing_stream_retention_max_length": 10, "listing_stream_retention_max_age_seconds": 0}, got)

	// An entry deleted behind a group's back: Redis cannot tell the lag; the length stands in
	// (an upper bound, so an alert fires early rather than late).
	addAt(t, rdb, stream, time.Now(), 4)
	require.NoError(t, rdb.XGroupCreate(ctx, stream, "g", "0").Err())
	first, err := rdb.XRangeN(ctx, stream, "-", "+", 2).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.XDel(ctx, stream, first[1].ID).Err())
	groups, err := rdb.XInfoGroups(ctx, stream).Result()
	require.NoError(t, err)
	require.Equal(t, int64(-1), groups[0].Lag, "Redis reports no lag after a deletion")
	got = gauges(t, eventstream.NewStreamCollector(rdb, map[string]eventstream.Retention{stream: {MaxLen: 10}}, nil))
	require.Equal(t, 3.0, got["listing_stream_group_lag/g"])
}

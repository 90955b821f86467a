package eventstream

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// ScrapeTimeout bounds the Redis reads of one scrape of a StreamCollector.
const ScrapeTimeout = 2 * time.Second

var (
	lengthDesc = prometheus.NewDesc("listing_stream_length",
		"Entries in a Redis stream, read at scrape time.", []string{"stream"}, nil)
	oldestDesc = prometheus.NewDesc("listing_stream_oldest_entry_age_seconds",
		"Age of a stream's oldest entry, by its id (0: empty).", []string{"stream"}, nil)
	maxLenDesc = prometheus.NewDesc("listing_stream_retention_max_length",
		"Entries a stream keeps at most (about; 0: no bound): a group lagging more loses events.", []string{"stream"}, nil)
	maxAgeDesc = prometheus.NewDesc("listing_stream_retention_max_age_seconds",
		"How long a stream keeps an entry (about; 0: no bound): an entry unread for longer is lost.", []string{"stream"}, nil)
	lagDesc = prometheus.NewDesc("listing_stream_group_lag",
		"Entries of a stream not yet delivered to a consumer group (when Redis cannot tell, the stream's length: an upper bound).",
		[]string{"stream", "group"}, nil)
	pendingDesc = prometheus.NewDesc("listing_stream_group_pending",
		"Entries delivered to a consumer group's consumers and not acknowledged yet.", []string{"stream", "group"}, nil)
	unreadAgeDesc = prometheus.NewDesc("listing_stream_group_oldest_unread_age_seconds",
		"Age of the oldest entry not yet delivered to a consumer group (0: none).", []string{"stream", "group"}, nil)
)

// StreamCollector is a prometheus.Collector of the streams it is given and of every
// consumer group on them, read from Redis at scrape time (the streams concurrently, within
// ScrapeTimeout): listing_stream_length, listing_stream_oldest_entry_age_seconds, the
// retention bounds (listing_stream_retention_max_length, …_max_age_seconds) and, per group,
// listing_stream_group_lag, listing_stream_group_pending and
// listing_stream_group_oldest_unread_age_seconds. A group's events are lost when its lag
// reaches the length bound or its oldest unread entry the age bound: alert before. A stream
// whose read fails is left out of that scrape and logged at warning level. Safe for
// concurrent use.
type StreamCollector struct {
	client  redis.UniversalClient
	streams map[string]Retention
	log     *slog.Logger
	now     func() time.Time
}

// NewStreamCollector returns a collector of streams (key → its retention) on client. log
// receives failed reads (default slog.Default()).
func NewStreamCollector(client redis.UniversalClient, streams map[string]Retention, log *slog.Logger) *StreamCollector {
	if log == nil {
		log = slog.Default()
	}
	s := make(map[string]Retention, len(streams))
	for k, v := range streams {
		s[k] = v
	}
	return &StreamCollector{client: client, streams: s, log: log, now: time.Now}
}

// Describe implements prometheus.Collector.
func (c *StreamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lengthDesc, oldestDesc, maxLenDesc, maxAgeDesc, lagDesc, pendingDesc, unreadAgeDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StreamCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for stream, ret := range c.streams {
		wg.Go(func() {
			ms, err := c.read(ctx, stream, ret)
			if err != nil {
				c.log.Warn("stream metrics not reported: reading Redis failed", "stream", stream, "err", err)
				return
			}
			for _, m := range ms {
				ch <- m
			}
		})
	}
	wg.Wait()
}

// read returns the metrics of one stream; nothing when any read fails.
func (c *StreamCollector) read(ctx context.Context, stream string, ret Retention) ([]prometheus.Metric, error) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
		return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	out := []prometheus.Metric{
		gauge(maxLenDesc, float64(ret.MaxLen), stream),
		gauge(maxAgeDesc, ret.MaxAge.Seconds(), stream),
	}
	length, err := c.client.XLen(ctx, stream).Result()
	if err != nil {
		return nil, err
	}
	out = append(out, gauge(lengthDesc, float64(length), stream))
	now := c.now()
	oldest := 0.0
	if length > 0 {
		first, err := c.client.XRangeN(ctx, stream, "-", "+", 1).Result()
		if err != nil {
			return nil, err
		}
		if len(first) > 0 {
			oldest = ageOf(first[0].ID, now)
		}
	}
	out = append(out, gauge(oldestDesc, oldest, stream))
	if length == 0 {
		// XINFO GROUPS fails on a missing key; an empty stream may still have groups.
		if n, err := c.client.Exists(ctx, stream).Result(); err != nil || n == 0 {
			return out, err
		}
	}
	groups, err := c.client.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		lag := g.Lag
		if lag < 0 {
			lag = length
		}
		unread := 0.0
		if lag > 0 {
			next, err := c.client.XRangeN(ctx, stream, "("+g.LastDeliveredID, "+", 1).Result()
			if err != nil {
				return nil, err
			}
			if len(next) > 0 {
				unread = ageOf(next[0].ID, now)
			}
		}
		out = append(out, gauge(lagDesc, float64(lag), stream, g.Name), gauge(pendingDesc, float64(g.Pending), stream, g.Name),
			gauge(unreadAgeDesc, unread, stream, g.Name))
	}
	return out, nil
}

// ageOf is the age of a stream entry id ("<unix ms>-<seq>") at now, at least 0.
func ageOf(id string, now time.Time) float64 {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0
	}
	return max(now.Sub(time.UnixMilli(n)).Seconds(), 0)
}

package eventstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Retention bounds what a stream keeps. Redis trims entries whether or not every consumer
// group has read them: a group that lags beyond either bound loses events (watch
// StreamCollector's metrics).
type Retention struct {
	// MaxLen is the number of entries kept (about: MAXLEN ~ trims whole macro nodes, so a few
	// hundred more may stay) on every XADD (EVENTS_MAX_LEN, default 1,000,000). 0: no bound
	// by length.
	MaxLen int64
	// MaxAge is how long an entry is kept at least, by its id's timestamp (EVENTS_RETENTION,
	// default 168h); the Trimmer removes older ones (about, as MaxLen). 0: no bound by age.
	MaxAge time.Duration
}

// Validate refuses negative bounds.
func (r Retention) Validate() error {
	if r.MaxLen < 0 || r.MaxAge < 0 {
		return errors.New("eventstream.Retention: MaxLen and MaxAge must not be negative")
	}
	return nil
}

// TrimmerConfig configures a Trimmer.
type TrimmerConfig struct {
	// Client is the Redis client of the streams (required; not closed by the Trimmer).
	Client redis.UniversalClient
	// Streams are the stream keys to trim (required).
	Streams []string
	// MaxAge is Retention.MaxAge; 0 makes Run return at once.
	MaxAge time.Duration
	// Interval is the period of Run (default 1m).
	Interval time.Duration
	// Logger receives failed trims (default: none).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Trimmer removes the entries older than MaxAge from streams: XTRIM MINID ~ now-MaxAge, so
// that retention by age holds even when no event is published. Any number of Trimmers may
// run on one stream.
type Trimmer struct{ cfg TrimmerConfig }

// NewTrimmer returns a Trimmer.
func NewTrimmer(cfg TrimmerConfig) (*Trimmer, error) {
	if cfg.Client == nil || len(cfg.Streams) == 0 {
		return nil, errors.New("eventstream.NewTrimmer: Client and Streams are required")
	}
	if cfg.MaxAge < 0 {
		return nil, errors.New("eventstream.NewTrimmer: MaxAge must not be negative")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Trimmer{cfg: cfg}, nil
}

// maxTrimCalls bounds the XTRIM calls of one TrimOnce per stream: each removes at most
// Redis's default limit of an approximate trim (100 macro nodes, 10,000 entries by default).
const maxTrimCalls = 100

// TrimOnce trims every stream once and returns the entries removed.
func (t *Trimmer) TrimOnce(ctx context.Context) (int64, error) {
	if t.cfg.MaxAge <= 0 {
		return 0, nil
	}
	minID := strconv.FormatInt(t.cfg.Now().Add(-t.cfg.MaxAge).UnixMilli(), 10) + "-0"
	var total int64
	var errs []error
	for _, s := range t.cfg.Streams {
		for range maxTrimCalls {
			n, err := t.cfg.Client.XTrimMinIDApprox(ctx, s, minID, 0).Result()
			if err != nil {
				errs = append(errs, fmt.Errorf("eventstream.Trimmer: XTRIM %s: %w", s, err))
				break
			}
			total += n
			if n == 0 {
				break
			}
		}
	}
	return total, errors.Join(errs...)
}

// Run trims at once and then every Interval until ctx ends; failures are logged and the
// next period tries again. It returns nil.
func (t *Trimmer) Run(ctx context.Context) error {
	if t.cfg.MaxAge <= 0 {
		return nil
	}
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	for {
		if n, err := t.TrimOnce(ctx); err != nil && ctx.Err() == nil {
			t.cfg.Logger.Warn("event stream trim failed", "error", err)
		} else if n > 0 {
			t.cfg.Logger.Debug("event streams trimmed", "entries", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

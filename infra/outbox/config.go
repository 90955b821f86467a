package outbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// DispatcherConfig configures a Dispatcher. Zero values take the documented defaults.
type DispatcherConfig struct {
	// ID names this dispatcher in outbox_events.locked_by (with a per-claim suffix).
	// Default: hostname:pid:random.
	ID string
	// BatchSize is the most events claimed from one workspace at once. Default 500.
	BatchSize int
	// RoundEvents bounds the events one round claims: each of its n workspaces gets at most
	// min(BatchSize, max(1, RoundEvents/n)) (so a round claims at most RoundEvents, or n when
	// RoundEvents < n), and a workspace that fills its share goes back in the queue. It
	// keeps one Publish call (bounded by PublishTimeout) and one round's leases to a size a
	// busy destination absorbs in time: 32 full batches of 500 in one call outlasted
	// PublishTimeout on a loaded machine. Default 2000, in [1, 100000].
	RoundEvents int
	// RoundWorkspaces is the most workspaces one round claims: a round claims all of them
	// in one statement (a transaction scoped to them, app.workspace_ids), publishes what it
	// claimed in one call per destination, and marks it in one more round trip. Under load,
	// rounds fill up and the cost per event falls. Default 32.
	RoundWorkspaces int
	// Concurrency is the number of rounds in flight at once; each holds at most one pooled
	// connection at a time (plus one for LISTEN and one for discovery). The work is I/O
	// bound (claim, publish, mark): Default 8.
	Concurrency int
	// Lease is how long a claim stays valid (locked_until = now + Lease). After it, another
	// dispatcher may claim and publish the events again. Default 30s; must exceed
	// PublishTimeout.
	Lease time.Duration
	// PublishTimeout bounds one Publish call. Default 10s.
	PublishTimeout time.Duration
	// FullClaimInterval is how long a claim's low-water mark of a workspace is used: once in
	// every such period (shifted per workspace, so that the workspaces' full scans spread
	// over it) a workspace's claim walks its whole due index range again (lowWater): it bounds
	// the extra delay of an expired lease, of an event released by another process, and of an
	// event whose writer transaction ran longer than 5 s. Default Lease; negative keeps no marks
	// (every claim walks the whole range).
	FullClaimInterval time.Duration
	// PollInterval is the longest period of workspace discovery (outbox_due_workspaces),
	// reached when discoveries keep finding nothing: it bounds the delay a lost wake-up can
	// cause, and the pick-up of retries whose backoff ended. Default 1s.
	PollInterval time.Duration
	// BusyPollInterval is the period of discovery while discoveries find due workspaces;
	// after an empty one the period doubles up to PollInterval. Default 50ms, at most
	// PollInterval.
	BusyPollInterval time.Duration
	// WakeRedis, when set, subscribes to wake-up messages sent by Wakeups (other processes)
	// on WakeChannel with Redis Pub/Sub. The Dispatcher uses but never closes it. Default:
	// none. Dispatchers are also woken in process (EventPublisher, same database) and by
	// LISTEN on WakeChannel unless DisableListen.
	WakeRedis redis.UniversalClient
	// WakeChannel is the Redis channel and the PostgreSQL NOTIFY channel of wake-ups.
	// Default WakeChannel ("outbox_events").
	WakeChannel string
	// DisableListen turns the LISTEN wake-up (NOTIFY on WakeChannel by a Wakeup with
	// Postgres) off. Default false.
	DisableListen bool
	// DiscoveryLimit is the most workspaces one discovery returns. Default 1000, max 10000.
	DiscoveryLimit int
	// MaxAttempts is the number of failed deliveries after which an event becomes
	// dead_letter. Default 20.
	MaxAttempts int
	// BackoffBase is the delay after the first failure; it doubles per failure, with
	// jitter, up to BackoffMax. Defaults 1s and 5m.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// ShutdownTimeout bounds the marking or releasing of the in-flight batches after Run's
	// context is cancelled. Default 10s.
	ShutdownTimeout time.Duration
	// MetricsInterval is the period of the gauge refresh (ReadGauges). Default 15s; negative
	// disables it.
	MetricsInterval time.Duration
	// ErrorMaxLen bounds the sanitized last_error. Default 500, max MaxLastErrorLength.
	ErrorMaxLen int
}

// MaxLastErrorLength bounds an outbox event's last_error (the column's CHECK).
const MaxLastErrorLength = 1000

func (c *DispatcherConfig) setDefaults() {
	if c.ID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.ID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	setDefault(&c.BatchSize, 500)
	setDefault(&c.RoundEvents, 2000)
	setDefault(&c.RoundWorkspaces, 32)
	setDefault(&c.Concurrency, 8)
	setDefault(&c.Lease, 30*time.Second)
	setDefault(&c.PublishTimeout, 10*time.Second)
	setDefault(&c.FullClaimInterval, c.Lease)
	setDefault(&c.PollInterval, time.Second)
	setDefault(&c.BusyPollInterval, min(50*time.Millisecond, c.PollInterval))
	setDefault(&c.WakeChannel, WakeChannel)
	setDefault(&c.DiscoveryLimit, 1000)
	setDefault(&c.MaxAttempts, 20)
	setDefault(&c.BackoffBase, time.Second)
	setDefault(&c.BackoffMax, 5*time.Minute)
	setDefault(&c.ShutdownTimeout, 10*time.Second)
	setDefault(&c.MetricsInterval, 15*time.Second)
	setDefault(&c.ErrorMaxLen, 500)
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate reports the first invalid field. It does not change c.
func (c DispatcherConfig) Validate() error {
	switch {
	case c.ID == "" || len(c.ID) > 180:
		return errors.New("outbox: DispatcherConfig.ID must have 1 to 180 bytes")
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("outbox: DispatcherConfig.BatchSize must be in [1, 10000], got %d", c.BatchSize)
	case c.RoundEvents < 1 || c.RoundEvents > 100000:
		return fmt.Errorf("outbox: DispatcherConfig.RoundEvents must be in [1, 100000], got %d", c.RoundEvents)
	case c.RoundWorkspaces < 1 || c.RoundWorkspaces > 1000:
		return fmt.Errorf("outbox: DispatcherConfig.RoundWorkspaces must be in [1, 1000], got %d", c.RoundWorkspaces)
	case c.Concurrency < 1:
		return fmt.Errorf("outbox: DispatcherConfig.Concurrency must be >= 1, got %d", c.Concurrency)
	case c.PublishTimeout <= 0:
		return errors.New("outbox: DispatcherConfig.PublishTimeout must be positive")
	case c.Lease <= c.PublishTimeout:
		return fmt.Errorf("outbox: DispatcherConfig.Lease (%s) must exceed PublishTimeout (%s)", c.Lease, c.PublishTimeout)
	case c.PollInterval <= 0:
		return errors.New("outbox: DispatcherConfig.PollInterval must be positive")
	case c.BusyPollInterval <= 0 || c.BusyPollInterval > c.PollInterval:
		return errors.New("outbox: DispatcherConfig.BusyPollInterval must be positive and at most PollInterval")
	case c.WakeChannel == "":
		return errors.New("outbox: DispatcherConfig.WakeChannel is required")
	case c.DiscoveryLimit < 1 || c.DiscoveryLimit > 10000:
		return fmt.Errorf("outbox: DispatcherConfig.DiscoveryLimit must be in [1, 10000], got %d", c.DiscoveryLimit)
	case c.MaxAttempts < 1:
		return fmt.Errorf("outbox: DispatcherConfig.MaxAttempts must be >= 1, got %d", c.MaxAttempts)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return errors.New("outbox: DispatcherConfig.BackoffBase must be positive and at most BackoffMax")
	case c.ShutdownTimeout <= 0:
		return errors.New("outbox: DispatcherConfig.ShutdownTimeout must be positive")
	case c.ErrorMaxLen < 1 || c.ErrorMaxLen > MaxLastErrorLength:
		return fmt.Errorf("outbox: DispatcherConfig.ErrorMaxLen must be in [1, %d], got %d", MaxLastErrorLength, c.ErrorMaxLen)
	}
	return nil
}

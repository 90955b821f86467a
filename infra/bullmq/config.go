package bullmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is BullMQ's default key prefix.
const DefaultPrefix = "bull"

// DefaultKeepCompleted is how many completed jobs of a queue stay in Redis by
// default (BullMQ's removeOnComplete {count}): the newest, for dashboards.
const DefaultKeepCompleted = 1000

// DefaultFailedRetention is the default RemoveOnFailAge: failed jobs stay 24 hours.
const DefaultFailedRetention = 24 * time.Hour

// DefaultDedupWindow is the default DedupWindow.
const DefaultDedupWindow = 2 * time.Hour

// Backoff types understood by Node.js BullMQ workers without a custom strategy.
const (
	BackoffFixed       = "fixed"
	BackoffExponential = "exponential"
)

// Backoff is BullMQ's retry delay: fixed Delay, or exponential
// round(2^attemptsMade * Delay). Delay is in milliseconds, as BullMQ stores it.
type Backoff struct {
	Type  string `json:"type"`
	Delay int64  `json:"delay"`
}

// Config holds what publishers and consumers of one Redis share.
type Config struct {
	// Client is the Redis connection. Required. The caller owns it and closes
	// it after closing every Publisher, Worker and Subscriber built on it.
	Client redis.UniversalClient

	// Prefix of every key. Default "bull". On Redis Cluster every key of a queue
	// must hash to one slot: put a hash tag in the prefix ("{bull}": every queue
	// in one slot) or set QueueHashTags.
	Prefix string
	// QueueHashTags wraps every queue name in braces on the Redis side
	// ("listing-publish" lives under "<prefix>:{listing-publish}:…"), so each
	// queue hashes to a slot of its own and queues spread over the nodes of a
	// Redis Cluster. Callers keep using the plain name: publishers, workers,
	// counts and probes built on this Config all wrap it (QueueName); Node.js
	// BullMQ must be given QueueName(queue). Default false.
	QueueHashTags bool

	// Attempts a published job may take before it fails for good. Default 3.
	Attempts int
	// Backoff between attempts. Default {exponential, 1000 ms}.
	Backoff Backoff
	// RemoveOnComplete is BullMQ's removeOnComplete of the jobs added with the
	// defaults. The zero value keeps the DefaultKeepCompleted newest completed
	// jobs of a queue ({count}); KeepJobs{Remove: true} keeps none.
	RemoveOnComplete KeepJobs
	// RemoveOnFailAge keeps a failed job this long. Default DefaultFailedRetention.
	RemoveOnFailAge time.Duration
	// DedupWindow is how long a jobId added with the defaults keeps
	// deduplicating re-publications after its add, whether or not the job is
	// still in Redis: Add reports Deduplicated instead of adding it again. The
	// ids are remembered in sets of one time bucket each (dedupBuckets buckets
	// per window, "<prefix>:<queue>:dd:<bucket>", a UUID as its 16 bytes),
	// which expire a bucket after the window. Default DefaultDedupWindow;
	// negative: only a job still in Redis deduplicates its id. Every
	// publisher of a queue must use the same window.
	DedupWindow time.Duration
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Attempts == 0 {
		c.Attempts = 3
	}
	if c.Backoff.Type == "" {
		c.Backoff = Backoff{Type: BackoffExponential, Delay: 1000}
	}
	if c.RemoveOnComplete == (KeepJobs{}) {
		c.RemoveOnComplete = KeepJobs{Count: DefaultKeepCompleted}
	}
	if c.RemoveOnFailAge == 0 {
		c.RemoveOnFailAge = DefaultFailedRetention
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = DefaultDedupWindow
	}
}

// Validate reports the first invalid field. It does not change c. On a
// *redis.ClusterClient it also requires ClusterSafe.
func (c Config) Validate() error {
	if c.Client == nil {
		return errors.New("bullmq: Config.Client is required")
	}
	if c.Prefix == "" {
		return errors.New("bullmq: Config.Prefix is empty")
	}
	if _, ok := c.Client.(*redis.ClusterClient); ok {
		if err := c.ClusterSafe(); err != nil {
			return err
		}
	}
	if c.Attempts < 1 {
		return fmt.Errorf("bullmq: Config.Attempts must be >= 1, got %d", c.Attempts)
	}
	if c.Backoff.Type != BackoffFixed && c.Backoff.Type != BackoffExponential {
		return fmt.Errorf("bullmq: Config.Backoff.Type must be %q or %q, got %q", BackoffFixed, BackoffExponential, c.Backoff.Type)
	}
	if c.Backoff.Delay < 0 {
		return fmt.Errorf("bullmq: Config.Backoff.Delay must be >= 0, got %d", c.Backoff.Delay)
	}
	if k := c.RemoveOnComplete; k.Count < 0 || k.Age < 0 || k.Limit < 0 {
		return errors.New("bullmq: Config.RemoveOnComplete's Count, Age and Limit must be >= 0")
	}
	if c.RemoveOnFailAge < time.Second {
		return errors.New("bullmq: Config.RemoveOnFailAge must be at least 1s")
	}
	if c.DedupWindow > 0 && c.DedupWindow < time.Second {
		return errors.New("bullmq: Config.DedupWindow must be at least 1s (or negative: none)")
	}
	return nil
}

// QueueName is the name queue has in Redis, and so the name Node.js BullMQ
// must be given: "{queue}" with QueueHashTags, else queue unchanged. It is
// the only place a queue name is wrapped.
func (c Config) QueueName(queue string) string {
	if c.QueueHashTags {
		return "{" + queue + "}"
	}
	return queue
}

// keys returns the Redis keys of queue (its plain name) under c.
func (c Config) keys(queue string) queueKeys {
	prefix := c.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return newQueueKeys(prefix, c.QueueName(queue))
}

// ClusterSafe reports an error unless every key of every queue hashes to one
// Redis Cluster slot per queue, as the scripts require: the key prefix of a
// queue, "<prefix>:<QueueName(queue)>:", must hold a hash tag — its first "{"
// followed, within that prefix, by a "}" with at least one character between
// (Redis hashes only that part of a key). That holds when Prefix holds such a
// tag ("{bull}") or when QueueHashTags is set and Prefix has no "{" that would
// take precedence. Queue names are assumed free of braces. It does not
// depend on Client.
func (c Config) ClusterSafe() error {
	prefix := c.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	base := prefix + ":" + c.QueueName("queue") + ":"
	if _, ok := hashTag(base); !ok {
		return fmt.Errorf("bullmq: on Redis Cluster the keys of a queue must share a hash tag: "+
			"put one in the prefix (such as {%s}) or wrap queue names (QueueHashTags); prefix %q does not", DefaultPrefix, prefix)
	}
	return nil
}

// hashTag returns the hash tag Redis Cluster hashes every key starting with
// base by, and whether there is one: the text between base's first "{" and
// the first "}" after it, when that "}" is in base and the text is not empty.
func hashTag(base string) (string, bool) {
	open := strings.IndexByte(base, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(base[open+1:], '}')
	if end <= 0 {
		return "", false
	}
	return base[open+1 : open+1+end], true
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	Config
}

func (c *PublisherConfig) setDefaults() { c.Config.setDefaults() }

// Validate reports the first invalid field. It does not change c.
func (c PublisherConfig) Validate() error { return c.Config.Validate() }

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	Config

	// Queue to consume. Required.
	Queue string
	// Concurrency is how many jobs this worker runs at once. Default 1.
	Concurrency int
	// LockDuration of a taken job; renewed every LockDuration/2. Default 30s.
	LockDuration time.Duration
	// StalledInterval between stalled checks. Default 30s.
	StalledInterval time.Duration
	// MaxStalledCount is how often a job may stall before it fails.
	// Default 1; set -1 to fail a job on its first stall (BullMQ's 0).
	MaxStalledCount int
	// DisableStalledCheck leaves stalled recovery to other workers.
	DisableStalledCheck bool
	// DrainDelay caps one blocking wait on the marker when the queue is
	// empty, and so bounds how long Run takes to notice ctx is done. Default 1s.
	DrainDelay time.Duration
	// ShutdownTimeout is how long Run waits for running jobs once ctx is done
	// before cancelling their contexts; jobs still running one more second
	// later are left locked for stalled recovery. Default 10s.
	ShutdownTimeout time.Duration
	// Name is written to the job as processedBy ("pb"). Optional.
	Name string
	// Logger. Default watermill.NopLogger.
	Logger watermill.LoggerAdapter
	// DeferredFailureFunc, when set, is called before the worker fails a job without running
	// its handler: BullMQ's deferred failure, set on a job that stalled more than
	// MaxStalledCount times (reason is its failedReason). It lets the job's owner record the
	// failure; its error is logged and the job fails all the same. Optional.
	DeferredFailureFunc func(ctx context.Context, j *Job, reason string) error
}

func (c *WorkerConfig) setDefaults() {
	c.Config.setDefaults()
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.LockDuration == 0 {
		c.LockDuration = 30 * time.Second
	}
	if c.StalledInterval == 0 {
		c.StalledInterval = 30 * time.Second
	}
	if c.MaxStalledCount == 0 {
		c.MaxStalledCount = 1
	}
	if c.DrainDelay == 0 {
		c.DrainDelay = time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
}

// Validate reports the first invalid field. It does not change c.
func (c WorkerConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if c.Queue == "" {
		return errors.New("bullmq: WorkerConfig.Queue is required")
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("bullmq: WorkerConfig.Concurrency must be >= 1, got %d", c.Concurrency)
	}
	if c.LockDuration < 10*time.Millisecond {
		return errors.New("bullmq: WorkerConfig.LockDuration must be >= 10ms")
	}
	if c.StalledInterval < 10*time.Millisecond {
		return errors.New("bullmq: WorkerConfig.StalledInterval must be >= 10ms")
	}
	if c.MaxStalledCount < -1 {
		return errors.New("bullmq: WorkerConfig.MaxStalledCount must be >= -1")
	}
	if c.DrainDelay < time.Millisecond {
		return errors.New("bullmq: WorkerConfig.DrainDelay must be >= 1ms")
	}
	if c.ShutdownTimeout < 0 {
		return errors.New("bullmq: WorkerConfig.ShutdownTimeout must be >= 0")
	}
	return nil
}

// SubscriberConfig configures a Subscriber; every Subscribe call runs one
// Worker on the topic's queue with these settings.
type SubscriberConfig struct {
	Config

	// Concurrency of each subscription: messages handed out and not yet
	// acked. Default 1.
	Concurrency     int
	LockDuration    time.Duration
	StalledInterval time.Duration
	MaxStalledCount int
	DrainDelay      time.Duration
	ShutdownTimeout time.Duration
	Name            string
}

func (c *SubscriberConfig) setDefaults() {
	c.Config.setDefaults()
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
}

func (c SubscriberConfig) workerConfig(queue string, logger watermill.LoggerAdapter) WorkerConfig {
	return WorkerConfig{
		Config:          c.Config,
		Queue:           queue,
		Concurrency:     c.Concurrency,
		LockDuration:    c.LockDuration,
		StalledInterval: c.StalledInterval,
		MaxStalledCount: c.MaxStalledCount,
		DrainDelay:      c.DrainDelay,
		ShutdownTimeout: c.ShutdownTimeout,
		Name:            c.Name,
		Logger:          logger,
	}
}

// Validate reports the first invalid field. It does not change c.
func (c SubscriberConfig) Validate() error {
	w := c.workerConfig("topic", watermill.NopLogger{})
	w.setDefaults()
	return w.Validate()
}

package config

import (
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
)

// defaults returns the configuration of an empty environment.
func defaults(t *testing.T) Config {
	t.Helper()
	var c Config
	require.NoError(t, env.ParseWithOptions(&c, env.Options{Environment: map[string]string{}}))
	require.NoError(t, c.defaultDatabaseURLs())
	return c
}

// production returns a production configuration that Validate accepts.
func production(t *testing.T) Config {
	t.Helper()
	c := defaults(t)
	c.Env = "production"
	c.AuthTokenKeys = "k1:" + "cmVhbC1hdXRoLWtleS1yZWFsLWF1dGgta2V5LXJlYWwtYXV0aA=="
	c.FingerprintKeys = "k1:" + "cmVhbC1maW5nZXJwcmludC1rZXktcmVhbC1maW5nZXJwcmludA=="
	c.CredentialsKeys = "k1:" + "cmVhbC1jcmVkZW50aWFscy1rZXktMzItYnl0ZXMtbG9uZyE="
	c.UploadSigningKey = "cmVhbC11cGxvYWQtc2lnbmluZy1rZXktcmVhbC11cGxvYWQ="
	c.PlatformBaseURL, c.AIBaseURL = "https://platform.example", "https://ai.example"
	c.HTTPAddr = "0.0.0.0:8080"
	return c
}

func TestDefaultsAreValid(t *testing.T) {
	require.NoError(t, defaults(t).Validate())
	require.NoError(t, production(t).Validate())
}

func TestOperatorDatabaseURLDefault(t *testing.T) {
	require.Equal(t, "postgres://listing_operator@127.0.0.1:5432/listing?sslmode=disable", defaults(t).OperatorDatabaseURL)
	require.Equal(t, "postgres://root@127.0.0.1:5432/listing?sslmode=disable", defaults(t).MigrateDatabaseURL)
}

// Unset, the operator and migration URLs name DATABASE_URL's server and database, each with
// its own role; set, they are kept.
func TestDatabaseURLsDefaultToDatabaseURLsDatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://app_user:pw@db.internal:5433/mine?sslmode=require")
	t.Setenv("OPERATOR_DATABASE_URL", "")
	t.Setenv("MIGRATE_DATABASE_URL", "")
	c, err := Load()
	require.NoError(t, err)
	require.Equal(t, "postgres://listing_operator@db.internal:5433/mine?sslmode=require", c.OperatorDatabaseURL)
	require.Equal(t, "postgres://root@db.internal:5433/mine?sslmode=require", c.MigrateDatabaseURL)

	t.Setenv("MIGRATE_DATABASE_URL", "postgres://owner@127.0.0.1/other")
	c, err = Load()
	require.NoError(t, err)
	require.Equal(t, "postgres://owner@127.0.0.1/other", c.MigrateDatabaseURL)
}

func TestProductionRefusesFetchAllowPrivate(t *testing.T) {
	c := production(t)
	c.FetchAllowPrivate = true
	require.ErrorContains(t, c.Validate(), "FETCH_ALLOW_PRIVATE")

	dev := defaults(t)
	dev.FetchAllowPrivate = true
	require.NoError(t, dev.Validate(), "development may reach private addresses")
}

// Development keys are public: they are refused as soon as the API listens beyond loopback,
// whatever APP_ENV says, and whether left unset or set to the development value.
func TestDevelopmentKeysRefusedBeyondLoopback(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080", "127.0.0.2:0"} {
		c := defaults(t)
		c.HTTPAddr = addr
		require.NoError(t, c.Validate(), addr)
	}
	setting := map[string]func(*Config, string){
		"AUTH_TOKEN_KEYS":    func(c *Config, v string) { c.AuthTokenKeys = v },
		"FINGERPRINT_KEYS":   func(c *Config, v string) { c.FingerprintKeys = v },
		"UPLOAD_SIGNING_KEY": func(c *Config, v string) { c.UploadSigningKey = v },
		"CREDENTIALS_KEYS":   func(c *Config, v string) { c.CredentialsKeys = v },
	}
	devValue := map[string]string{
		"AUTH_TOKEN_KEYS":    DevKey("auth-token"),
		"FINGERPRINT_KEYS":   "k2:abc," + DevKey("idempotency-fingerprint"),
		"UPLOAD_SIGNING_KEY": DevKey("upload-signing")[len("dev:"):],
		"CREDENTIALS_KEYS":   DevKey("credentials"),
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "10.1.2.3:8080", "api.example.com:443"} {
		for name, set := range setting {
			for _, value := range []string{"", devValue[name]} {
				c := production(t)
				c.Env = "development"
				c.HTTPAddr = addr
				set(&c, value)
				err := c.Validate()
				require.ErrorContains(t, err, name, "%s=%q on %s", name, value, addr)
				require.ErrorContains(t, err, "HTTP_ADDR", "%s=%q on %s", name, value, addr)
			}
		}
	}

	// The upload signing key is not used with S3 storage.
	c := production(t)
	c.UploadSigningKey, c.S3Bucket = "", "media"
	require.NoError(t, c.Validate())
}

func TestProductionRefusesDevelopmentKeyValues(t *testing.T) {
	c := production(t)
	c.HTTPAddr = "127.0.0.1:8080"
	c.AuthTokenKeys = DevKey("auth-token")
	require.ErrorContains(t, c.Validate(), "AUTH_TOKEN_KEYS")
}

func TestByteSize(t *testing.T) {
	good := map[string]ByteSize{
		"1GiB": 1 << 30, "512MiB": 512 << 20, "64KiB": 64 << 10, "2TiB": 2 << 40, "100B": 100,
		"1073741824": 1 << 30, "0": 0, "off": 0, " 1GiB ": 1 << 30,
	}
	for in, want := range good {
		var b ByteSize
		require.NoError(t, b.UnmarshalText([]byte(in)), in)
		require.Equal(t, want, b, in)
	}
	for _, in := range []string{"", "1GB", "1 GiB", "-1", "1.5GiB", "GiB", "9999999TiB", "lots"} {
		var b ByteSize
		require.Error(t, b.UnmarshalText([]byte(in)), in)
	}
}

func TestMemoryBoundDefaults(t *testing.T) {
	c := defaults(t)
	require.Equal(t, ByteSize(1<<30), c.MemoryLimit)
	require.Equal(t, int64(128<<20), c.MediaDecodeMaxBytes)
	require.Equal(t, 1, c.MediaDecodeConcurrency)
	require.Zero(t, c.PasswordHashConcurrency)
	require.Equal(t, 2*time.Second, c.PasswordHashWait)

	err := env.ParseWithOptions(&c, env.Options{Environment: map[string]string{"MEMORY_LIMIT": "lots"}})
	require.ErrorContains(t, err, "not a byte size")
}

func TestConsoleSettings(t *testing.T) {
	c := defaults(t)
	require.Equal(t, "127.0.0.1:8081", c.ConsoleAddr)
	require.NoError(t, c.ValidateConsole(), "development without tokens: loopback only, as dev")
	ops, err := c.ConsoleOperators()
	require.NoError(t, err)
	require.Empty(t, ops)

	c.ConsoleAddr = "0.0.0.0:8081"
	require.ErrorContains(t, c.ValidateConsole(), "loopback")
	require.NoError(t, c.Validate(), "only the console cares")
	c.ConsoleAddr = "8081"
	require.ErrorContains(t, c.Validate(), "CONSOLE_ADDR")

	p := production(t)
	require.NoError(t, p.Validate(), "serve, dispatch and work need no console tokens")
	require.ErrorContains(t, p.ValidateConsole(), "CONSOLE_TOKENS is required in production")
	p.ConsoleTokens = " ada:0123456789abcdef , grace@ops.example:fedcba9876543210 "
	p.ConsoleAddr = "0.0.0.0:8081"
	require.NoError(t, p.Validate())
	require.NoError(t, p.ValidateConsole())
	ops, err = p.ConsoleOperators()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"ada": "0123456789abcdef", "grace@ops.example": "fedcba9876543210"}, ops)

	for spec, msg := range map[string]string{
		"ada":                  "name:secret",
		":0123456789abcdef":    "name:secret",
		"a b:0123456789abcdef": "name:secret",
		"ada:short":            "at least 16 bytes",
		"ada:0123456789abcdef,ada:fedcba9876543210": "twice",
		"ada:0123456789abcdef,bob:0123456789abcdef": "secret of another operator",
		"ada:0123456789abcdef,":                     "item 2",
	} {
		c := defaults(t)
		c.ConsoleTokens = spec
		err := c.Validate()
		require.ErrorContains(t, err, msg, spec)
		require.NotContains(t, err.Error(), "0123456789abcdef", "secrets are never quoted")
		require.Error(t, c.ValidateConsole())
	}

	// Sessions and the sign-in budget.
	d := defaults(t)
	require.Equal(t, 8*time.Hour, d.ConsoleSessionTTL)
	require.Equal(t, 10, d.ConsoleSigninFailures)
	d.ConsoleSigninFailures = 0
	require.ErrorContains(t, d.Validate(), "CONSOLE_SIGNIN_FAILURES")
	d = defaults(t)
	d.ConsoleSessionTTL = time.Second
	require.ErrorContains(t, d.Validate(), "CONSOLE_SESSION_TTL")
}

// On Redis Cluster every key of a queue must hash to one slot: startup refuses a cluster
// whose queues share no hash tag, from the environment as operators set it.
func TestClusterRefusesUntaggedQueues(t *testing.T) {
	load := func(vars map[string]string) (Config, error) {
		var c Config
		require.NoError(t, env.ParseWithOptions(&c, env.Options{Environment: vars}))
		return c, c.Validate()
	}
	addrs := "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"
	c, err := load(map[string]string{"REDIS_CLUSTER_ADDRS": addrs})
	require.ErrorContains(t, err, "REDIS_CLUSTER_ADDRS")
	require.ErrorContains(t, err, "BULLMQ_QUEUE_HASH_TAGS")
	require.Equal(t, []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}, c.RedisClusterAddrs)

	for _, bad := range []map[string]string{
		{"REDIS_CLUSTER_ADDRS": addrs, "BULLMQ_PREFIX": "listing"},
		{"REDIS_CLUSTER_ADDRS": addrs, "BULLMQ_PREFIX": "{}"},
		{"REDIS_CLUSTER_ADDRS": addrs, "BULLMQ_PREFIX": "{}", "BULLMQ_QUEUE_HASH_TAGS": "true"},
		{"REDIS_CLUSTER_ADDRS": addrs, "BULLMQ_PREFIX": "a{b"},
		{"REDIS_CLUSTER_ADDRS": addrs, "BULLMQ_QUEUE_HASH_TAGS": "false", "QUEUE_TRANSPORT": "memory"},
	} {
		_, err := load(bad)
		require.ErrorContains(t, err, "hash tag", "%v", bad)
	}
	for _, good := range []map[string]string{
		{"REDIS_CLUSTER_ADDRS": addrs, "BULLMQ_QUEUE_HASH_TAGS": "true"},
		{"REDIS_CLUSTER_ADDRS": addrs, "BULLMQ_PREFIX": "{bull}"},
		{"REDIS_CLUSTER_ADDRS": addrs, "BULLMQ_PREFIX": "{bull}", "BULLMQ_QUEUE_HASH_TAGS": "true"},
		{"BULLMQ_PREFIX": "listing"}, // one Redis: no hash tag needed
	} {
		_, err := load(good)
		require.NoError(t, err, "%v", good)
	}
}

func TestEventStreamSettings(t *testing.T) {
	c := defaults(t)
	require.Equal(t, "listing", c.StreamPrefix)
	require.Equal(t, int64(1_000_000), c.EventsMaxLen)
	require.Equal(t, 168*time.Hour, c.EventsRetention)
	for _, bad := range []func(*Config){
		func(c *Config) { c.StreamPrefix = "" },
		func(c *Config) { c.EventsMaxLen = -1 },
		func(c *Config) { c.EventsRetention = -time.Second },
	} {
		c := defaults(t)
		bad(&c)
		require.ErrorContains(t, c.Validate(), "STREAM_PREFIX must not be empty")
	}
	c.EventsMaxLen, c.EventsRetention = 0, 0 // no bound: allowed
	require.NoError(t, c.Validate())
}

// A job's id keeps deduplicating at least as long as the outbox may publish its event again:
// a shorter JOB_RETENTION is refused at start, naming the window.
func TestJobRetentionCoversTheOutboxRedeliveryWindow(t *testing.T) {
	c := defaults(t)
	require.Equal(t, 90*time.Minute, c.JobRetention)
	require.Equal(t, 1000, c.JobKeepCompleted)
	require.Equal(t, bullmq.KeepJobs{Count: 1000}, c.KeepCompleted())
	c.JobRetention = 70 * time.Minute
	require.ErrorContains(t, c.Validate(), "JOB_RETENTION (1h10m0s) must be at least the outbox's redelivery window (1h13m31s")
	c.OutboxMaxAttempts = 10
	require.NoError(t, c.Validate(), "fewer attempts, a shorter window")
	c = defaults(t)
	c.JobFailedRetention = time.Second
	require.ErrorContains(t, c.Validate(), "JOB_FAILED_RETENTION")
	c = defaults(t)
	c.JobKeepCompleted = -1
	require.ErrorContains(t, c.Validate(), "JOB_KEEP_COMPLETED")
	c.JobKeepCompleted = 0
	require.NoError(t, c.Validate())
	require.Equal(t, bullmq.KeepJobs{Remove: true}, c.KeepCompleted())
}

// A signed command must not outlive its idempotency record: COMMANDS_MAX_AGE plus the 5
// minutes a command may be ahead must stay below IDEMPOTENCY_RETENTION.
func TestCommandsMaxAgeBelowIdempotencyRetention(t *testing.T) {
	c := defaults(t)
	require.Equal(t, 24*time.Hour, c.CommandsMaxAge)
	c.CommandsMaxAge = 48*time.Hour - 5*time.Minute
	require.ErrorContains(t, c.Validate(), "COMMANDS_MAX_AGE")
	c.CommandsMaxAge = 48*time.Hour - 5*time.Minute - time.Second
	require.NoError(t, c.Validate())
	c.IdempotencyRetention = 24 * time.Hour
	require.ErrorContains(t, c.Validate(), "COMMANDS_MAX_AGE", "the default max age with the shortest retention")
	c.CommandsMaxAge = 0
	require.ErrorContains(t, c.Validate(), "COMMANDS_MAX_AGE")
}

// FAIR_SHARE_SLOTS: unset, FairShareFactor × WORKER_CONCURRENCY; "off", 0; a number of at
// least 1; anything else refused at start.
func TestFairSlots(t *testing.T) {
	c := defaults(t)
	n, err := c.FairSlots()
	require.NoError(t, err)
	require.Equal(t, FairShareFactor*c.WorkerConcurrency, n)
	for v, want := range map[string]int{"off": 0, "1": 1, "200": 200} {
		c.FairShareSlots = v
		n, err := c.FairSlots()
		require.NoError(t, err, v)
		require.Equal(t, want, n, v)
		require.NoError(t, c.Validate(), v)
	}
	for _, v := range []string{"0", "-3", "many", "100001"} {
		c.FairShareSlots = v
		_, err := c.FairSlots()
		require.Error(t, err, v)
		require.ErrorContains(t, c.Validate(), "FAIR_SHARE_SLOTS", v)
	}
}

func TestRateLimits(t *testing.T) {
	var r RateLimits
	require.NoError(t, r.UnmarshalText([]byte(" sandbox=10/20, shopify=2 ")))
	require.Equal(t, RateLimits{"sandbox": {PerSecond: 10, Burst: 20}, "shopify": {PerSecond: 2, Burst: 2}}, r)
	require.NoError(t, r.UnmarshalText([]byte("")))
	require.Empty(t, r)
	for _, in := range []string{"sandbox", "=1/1", "sandbox=0/1", "sandbox=1/1,sandbox=2/2", "sandbox=x"} {
		require.Error(t, r.UnmarshalText([]byte(in)), in)
	}
}

package config

import (
	"strings"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/jobs"
)

// Startup no longer ties the BullMQ job lock to the calls' time-outs (the call fence bounds
// them): the default lock is BullMQ's 30s and any call time-out starts with it; the stop
// bound still covers the longest call, and the memory transport's lease covers the calls
// whatever JOB_LOCK_DURATION says.
func TestValidateTheLockAndTheCalls(t *testing.T) {
	load := func(vars map[string]string) (Config, error) {
		var c Config
		require.NoError(t, env.ParseWithOptions(&c, env.Options{Environment: vars}))
		return c, c.Validate()
	}
	c := defaults(t)
	require.Equal(t, 30*time.Second, c.JobLockDuration)
	require.Equal(t, 10*time.Second, c.JobStalledInterval)
	require.LessOrEqual(t, c.JobLockDuration+c.JobStalledInterval, 45*time.Second,
		"a dead worker's job runs again within 45s at the defaults")
	require.Equal(t, []string{"PLATFORM_TIMEOUT", "AI_TIMEOUT", "FETCH_TIMEOUT"},
		[]string{c.LockedCalls()[0].Setting, c.LockedCalls()[1].Setting, c.LockedCalls()[2].Setting})
	require.Equal(t, []time.Duration{15 * time.Second, time.Minute, time.Minute},
		[]time.Duration{c.PlatformTimeout, c.AITimeout, c.FetchTimeout})

	for vars, want := range map[string]string{
		"AI_TIMEOUT=0s": "AI_TIMEOUT and FETCH_TIMEOUT must be positive",
		"AI_TIMEOUT=120s,WORKER_STOP_TIMEOUT=129s": "WORKER_STOP_TIMEOUT (2m9s) must be at least 2m10s: " +
			"the longest call's time-out (AI_TIMEOUT, 2m0s) plus the record step's bound, retries included (10s)",
		"WORKER_STOP_TIMEOUT=10s": "WORKER_STOP_TIMEOUT (10s) must be at least 1m10s",
		"PLATFORM_TIMEOUT=-1s":    "must be positive",
	} {
		_, err := load(envOf(vars))
		require.ErrorContains(t, err, want, vars)
	}
	for _, vars := range []string{
		"JOB_LOCK_DURATION=2m",
		"JOB_LOCK_DURATION=1s,PLATFORM_TIMEOUT=1s,AI_TIMEOUT=1s,FETCH_TIMEOUT=1s",
		"AI_TIMEOUT=120s,WORKER_STOP_TIMEOUT=130s",
		"QUEUE_TRANSPORT=memory",
		"QUEUE_TRANSPORT=memory,JOB_LOCK_DURATION=88s",
	} {
		_, err := load(envOf(vars))
		require.NoError(t, err, vars)
	}

	// The memory transport's lease: four fifths of it cover the longest call (60s) and the
	// record step's retries (10s), so 88s at least whatever the lock; a longer lock stays.
	for vars, want := range map[string]time.Duration{
		"QUEUE_TRANSPORT=memory":                                                                         88 * time.Second,
		"QUEUE_TRANSPORT=memory,JOB_LOCK_DURATION=87s":                                                   88 * time.Second,
		"QUEUE_TRANSPORT=memory,JOB_LOCK_DURATION=2m":                                                    2 * time.Minute,
		"QUEUE_TRANSPORT=memory,AI_TIMEOUT=2s,FETCH_TIMEOUT=2s,PLATFORM_TIMEOUT=1s":                      30 * time.Second,
		"QUEUE_TRANSPORT=memory,AI_TIMEOUT=2s,FETCH_TIMEOUT=2s,PLATFORM_TIMEOUT=1s,JOB_LOCK_DURATION=1s": 15 * time.Second,
	} {
		c, err := load(envOf(vars))
		require.NoError(t, err, vars)
		require.Equal(t, want, c.MemoryLease(), vars)
		require.GreaterOrEqual(t, jobs.HandlerTimeout(c.MemoryLease()), c.AITimeout+worker.RecordRetryBudget, vars)
	}
}

// envOf reads "K=V,K=V" into an environment.
func envOf(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

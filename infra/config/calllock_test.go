package config

import (
	"strings"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/stretchr/testify/require"
)

func TestCallWithinLock(t *testing.T) {
	calls := []LockedCall{{Setting: "PLATFORM_TIMEOUT", Timeout: 15 * time.Second}}
	require.NoError(t, CallWithinLock(30*time.Second, calls), "15s call, 30s lock: exactly half")
	require.NoError(t, CallWithinLock(31*time.Second, calls))
	err := CallWithinLock(30*time.Second-time.Millisecond, calls)
	require.ErrorContains(t, err, "PLATFORM_TIMEOUT (15s) must be at most half of JOB_LOCK_DURATION (29.999s)")
	require.ErrorContains(t, err, "raise JOB_LOCK_DURATION to at least 30s")

	two := []LockedCall{{Setting: "AI_TIMEOUT", Timeout: 2 * time.Minute}, {Setting: "FETCH_TIMEOUT", Timeout: time.Minute},
		{Setting: "PLATFORM_TIMEOUT", Timeout: time.Second}}
	err = CallWithinLock(time.Minute, two)
	require.ErrorContains(t, err, "AI_TIMEOUT (2m0s)")
	require.ErrorContains(t, err, "FETCH_TIMEOUT (1m0s)")
	require.NotContains(t, err.Error(), "PLATFORM_TIMEOUT", "a call within the rule is not named")
}

// Startup refuses, from the environment as operators set it, a BullMQ job lock that a worker's
// external call could outlive; the defaults keep the rule.
func TestValidateKeepsCallsWithinTheJobLock(t *testing.T) {
	load := func(vars map[string]string) error {
		var c Config
		require.NoError(t, env.ParseWithOptions(&c, env.Options{Environment: vars}))
		return c.Validate()
	}
	c := defaults(t)
	require.Equal(t, 150*time.Second, c.JobLockDuration)
	for _, call := range c.LockedCalls() {
		require.LessOrEqual(t, 2*call.Timeout, c.JobLockDuration, call.Setting)
	}
	require.Equal(t, []string{"PLATFORM_TIMEOUT", "AI_TIMEOUT", "FETCH_TIMEOUT"},
		[]string{c.LockedCalls()[0].Setting, c.LockedCalls()[1].Setting, c.LockedCalls()[2].Setting})
	require.Equal(t, []time.Duration{15 * time.Second, time.Minute, time.Minute},
		[]time.Duration{c.PlatformTimeout, c.AITimeout, c.FetchTimeout})

	for vars, want := range map[string]string{
		"AI_TIMEOUT=120s":       "AI_TIMEOUT (2m0s) must be at most half of JOB_LOCK_DURATION (2m30s)",
		"PLATFORM_TIMEOUT=80s":  "PLATFORM_TIMEOUT (1m20s)",
		"FETCH_TIMEOUT=76s":     "FETCH_TIMEOUT (1m16s)",
		"JOB_LOCK_DURATION=30s": "AI_TIMEOUT (1m0s) must be at most half of JOB_LOCK_DURATION (30s)",
		"JOB_LOCK_DURATION=2s,PLATFORM_TIMEOUT=1s,AI_TIMEOUT=1s,FETCH_TIMEOUT=2s": "FETCH_TIMEOUT (2s)",
		"AI_TIMEOUT=0s": "AI_TIMEOUT and FETCH_TIMEOUT must be positive",
		"AI_TIMEOUT=120s,JOB_LOCK_DURATION=4m,WORKER_STOP_TIMEOUT=129s": "WORKER_STOP_TIMEOUT (2m9s) must be at least 2m10s: " +
			"the longest call's time-out (AI_TIMEOUT, 2m0s) plus the record step's bound, retries included (10s)",
		"WORKER_STOP_TIMEOUT=10s": "WORKER_STOP_TIMEOUT (10s) must be at least 1m10s",
		"PLATFORM_TIMEOUT=-1s":    "must be positive",
		// The memory transport: a job's handler runs within 4/5 of its lease, which must
		// cover the longest call plus the record's retries (no silent cut to OUTBOX_LEASE/2).
		"QUEUE_TRANSPORT=memory,JOB_LOCK_DURATION=87s": "with QUEUE_TRANSPORT=memory, JOB_LOCK_DURATION (1m27s) is the lease " +
			"a job holds its outbox event for, and its handler runs within four fifths of it (1m9.6s), which must cover the " +
			"longest call's time-out (AI_TIMEOUT, 1m0s) plus the record step's retries (10s); raise JOB_LOCK_DURATION to at least 1m28s",
		"QUEUE_TRANSPORT=memory,JOB_LOCK_DURATION=30s": "(AI_TIMEOUT, 1m0s)",
	} {
		err := load(envOf(vars))
		require.ErrorContains(t, err, want, vars)
	}
	for _, vars := range []string{
		"JOB_LOCK_DURATION=2m",
		"JOB_LOCK_DURATION=2s,PLATFORM_TIMEOUT=1s,AI_TIMEOUT=1s,FETCH_TIMEOUT=1s",
		"AI_TIMEOUT=120s,JOB_LOCK_DURATION=4m,WORKER_STOP_TIMEOUT=130s",
		// The memory transport's lease (JOB_LOCK_DURATION) needs four fifths of it to cover
		// the longest call and the record's retries, not twice the call.
		"QUEUE_TRANSPORT=memory",
		"QUEUE_TRANSPORT=memory,JOB_LOCK_DURATION=88s",
	} {
		require.NoError(t, load(envOf(vars)), vars)
	}
	// The whole message, once: the lock of the example names the fix.
	err := load(envOf("JOB_LOCK_DURATION=1m"))
	require.EqualError(t, err, "AI_TIMEOUT (1m0s) must be at most half of JOB_LOCK_DURATION (1m0s): a worker that dies with "+
		"that call in flight leaves its job locked for only JOB_LOCK_DURATION/2, after which the job may run again while "+
		"the call can still land; lower AI_TIMEOUT or raise JOB_LOCK_DURATION to at least 2m0s\n"+
		"FETCH_TIMEOUT (1m0s) must be at most half of JOB_LOCK_DURATION (1m0s): a worker that dies with that call in "+
		"flight leaves its job locked for only JOB_LOCK_DURATION/2, after which the job may run again while the call can "+
		"still land; lower FETCH_TIMEOUT or raise JOB_LOCK_DURATION to at least 2m0s")
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

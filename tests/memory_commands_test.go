package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/cloudevent"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// commandsMemGrowthBound is how much the peak RSS (VmHWM) of an `app commands` process may
// grow while it answers 16 entries of 20 MB.
const commandsMemGrowthBound = 64 << 20

// TestMemoryCommandConsumerBoundsOversizedEntries: 16 command entries of 20 MB each (far over
// the 2 MiB an event may hold) wait in the stream when a child `app commands` process starts;
// each is answered COMMAND_TOO_LARGE, and the process's peak memory (VmHWM) exceeds that of
// the same process started on an empty stream by at most commandsMemGrowthBound.
//
// The consumer runs 8 commands at once (COMMANDS_CONCURRENCY, set here so the figure does not
// move with the default): a consumer that reads a batch of that many entries before looking
// at their size holds 8 × 20 MB at once, about 2.4 times the bound. Measured on 2026-12-03
// (load average 11-15 on 2 cores): such a consumer (XREADGROUP COUNT 8, size checked after)
// grew by 180 and 181 MiB and failed; this consumer (one entry per script run, at commit
// f070045) grew by 1 MiB.
func TestMemoryCommandConsumerBoundsOversizedEntries(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs PostgreSQL and Redis")
	}
	db := pgtest.New(t)
	prefix := seedPrefix()
	rdb := seedRedis(t, prefix)
	// The baseline: a consumer on an empty stream (it creates the group), then stopped.
	env := seedEnv(db.AppURL, prefix, map[string]string{"COMMANDS_CONCURRENCY": "8"})
	idle := seedStartProc(t, "commands", env, "commands")
	idle.waitLog(t, "command consumer started")
	time.Sleep(time.Second)
	before := memPeak(t, idle)
	idle.stop()

	ctx := context.Background()
	big := strings.Repeat("x", 20<<20)
	var ids []string
	for range 16 {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: prefix + ":commands",
			Values: map[string]any{"event": `{"specversion":"1.0","id":"big","source":"/t","type":"listing.publish","data":"` + big + `"}`,
				"signature": "00"}}).Result()
		require.NoError(t, err)
		ids = append(ids, id)
	}
	big = ""
	p := seedStartProc(t, "commands", env, "commands")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		msgs, err := rdb.XRange(ctx, prefix+":command-replies", "-", "+").Result()
		require.NoError(t, err)
		if len(msgs) >= len(ids) {
			var got []string
			for _, m := range msgs {
				ev, err := cloudevent.FromEntry(m.Values)
				require.NoError(t, err)
				got = append(got, ev.CorrelationID)
				require.Contains(t, string(ev.Data), "COMMAND_TOO_LARGE")
			}
			require.ElementsMatch(t, ids, got, "one reply per entry, by its entry id")
			break
		}
		require.True(t, time.Now().Before(deadline), "%d of %d replies", len(msgs), len(ids))
		time.Sleep(100 * time.Millisecond)
	}
	after := memPeak(t, p)
	growth := after - before
	t.Logf("app commands: VmHWM %d MiB before 16 entries of 20 MB, %d MiB after: growth %d MiB (bound %d MiB)",
		before>>20, after>>20, growth>>20, commandsMemGrowthBound>>20)
	require.LessOrEqual(t, growth, int64(commandsMemGrowthBound))
}

package commandstream

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// oversizeField replaces the fields of an entry larger than the consumer accepts: its value
// is the entry's size in bytes. Redis never sends such an entry's fields to the consumer.
const oversizeField = "\x00oversize"

// readScript reads entries of the group (mode "read": XREADGROUP … COUNT n, never blocking)
// or claims the given pending ones (mode "claim": XCLAIM … min-idle ids…), and returns each
// as {id, fields}, with the fields of an entry whose values add up to more than max bytes
// replaced by {oversizeField, size}: what the consumer holds of an entry stays bounded
// whatever was written to the stream.
var readScript = redis.NewScript(`
local entries
if ARGV[1] == 'read' then
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[2], ARGV[3], 'COUNT', ARGV[4], 'STREAMS', KEYS[1], '>')
  if not r then return {} end
  entries = r[1][2]
else
  entries = redis.call('XCLAIM', KEYS[1], ARGV[2], ARGV[3], ARGV[4], unpack(ARGV, 6))
end
local max = tonumber(ARGV[5])
local out = {}
for _, e in ipairs(entries) do
  local fields = e[2]
  if fields then
    local size = 0
    for j = 2, #fields, 2 do size = size + #fields[j] end
    if size > max then fields = {'\0oversize', tostring(size)} end
    out[#out + 1] = {e[1], fields}
  end
end
return out
`)

// maxEntryBytes is the largest entry whose fields the consumer receives: the event field's
// bound plus room for the signature and field names.
func (c *Consumer) maxEntryBytes() int { return c.cfg.MaxEventBytes + 4096 }

// read returns the next new entry of the group, if any. One at a time: Redis copies an
// entry into the script before its size is known, and a script run holds Redis.
func (c *Consumer) read(ctx context.Context) ([]redis.XMessage, error) {
	return c.runScript(ctx, "read", "1")
}

// claimIDs takes the given pending entries over when they are idle for ClaimIdle (exclusive:
// of two consumers claiming at once, one gets each).
func (c *Consumer) claimIDs(ctx context.Context, ids ...string) ([]redis.XMessage, error) {
	return c.runScript(ctx, "claim", strconv.FormatInt(c.cfg.ClaimIdle.Milliseconds(), 10), ids...)
}

// runScript runs readScript in mode with arg: the count to read ("read") or the claim's
// min-idle time in milliseconds ("claim").
func (c *Consumer) runScript(ctx context.Context, mode, arg string, ids ...string) ([]redis.XMessage, error) {
	args := []any{mode, c.cfg.Group, c.cfg.Consumer, arg, c.maxEntryBytes()}
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := readScript.Run(ctx, c.cfg.Client, []string{c.cfg.Stream}, args...).Slice()
	if err != nil {
		return nil, err
	}
	out := make([]redis.XMessage, 0, len(res))
	for _, e := range res {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("commandstream: unexpected entry %T from the read script", e)
		}
		id, _ := pair[0].(string)
		fields, _ := pair[1].([]any)
		values := make(map[string]any, len(fields)/2)
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			values[k] = fields[i+1]
		}
		out = append(out, redis.XMessage{ID: id, Values: values})
	}
	return out, nil
}

// idleWait is how long the consumer waits before it reads again after a read found nothing:
// it doubles from 10ms up to 200ms (and Block), and starts over once entries arrive.
func (c *Consumer) idleWait(prev time.Duration) time.Duration {
	next := max(10*time.Millisecond, prev*2)
	return min(next, 200*time.Millisecond, c.cfg.Block)
}

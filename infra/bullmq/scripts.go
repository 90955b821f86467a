package bullmq

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// activeBatchMin is how many settled jobs of one finish call take the active list's
// rewrite (one LRANGE, DEL and RPUSH) instead of one LREM each; activeScan bounds the list
// the rewrite reads (a longer list: one LREM each).
const (
	activeBatchMin = 4
	activeScan     = 1000
)

// The Lua scripts below are ours, written from the facts in docs/bullmq-wire.md
// (BullMQ 6.7.0's Redis layout) and checked against real Node.js BullMQ in the
// tests. Every key of the queue that a script knows in advance arrives in
// KEYS; job keys found while trimming, promoting, taking or recovering
// stalled jobs are derived in Lua from the queue's key prefix
// "<prefix>:<QueueName>:" (an ARGV), which hashes to the queue's Redis
// Cluster slot because Config.ClusterSafe requires the hash tag in it.

// addScript adds standard jobs (no delay, no priority, no parent), each
// exactly as BullMQ 6.7.0 adds one; the meta read (one HMGET), the marker and
// the check that a job hash exists (one EXISTS of every job key, each job
// checked on its own only when one exists) are done once per call. A job whose id is a member of one of the window's
// bucket sets (Config.DedupWindow) is deduplicated like one whose de: key
// lives; a created job with a member is added to the current bucket, whose
// expiry is then set. The buckets are read once per call (one SMISMEMBER of
// the call's members per bucket) and the created members added in one SADD:
// a member created earlier in the same call deduplicates a later one.
//
// KEYS: 1 wait, 2 meta, 3 id, 4 active, 5 events, 6 marker, then the nb
// bucket sets (KEYS[7] the current one); then for job i (from 1):
// KEYS[5+nb+2i] the job hash, KEYS[6+nb+2i] its de:<id> key (the job key
// again when it has no deduplication id).
// ARGV: 1 timestamp ms, 2 nb, 3 the current bucket's expiry (unix ms); then
// for job i, from ARGV[4+8(i-1)]: jobId, name, data, opts JSON, dedup ttl ms,
// dedup id ("" = none), watermill metadata JSON ("" = none), bucket member
// ("" = not remembered).
// Returns {code, id, code, id, ...}: code 1 created, 0 duplicate (job hash
// exists), 2 deduplicated (de: key holds id, or a bucket holds the member).
// The created ids go to wait in one LPUSH.
var addScript = redis.NewScript(`
local rcall = redis.call
local attrs = rcall("HMGET", KEYS[2], "paused", "concurrency", "opts.maxLenEvents")
local maxEvents = attrs[3]
if not maxEvents then
  maxEvents = 10000
  rcall("HSET", KEYS[2], "opts.maxLenEvents", maxEvents)
end
local nb = tonumber(ARGV[2])
local n = (#KEYS - 6 - nb) / 2
rcall("INCRBY", KEYS[3], n)
local out = {}
local pushed = {}
-- known[member]: remembered by a bucket, or created earlier in this call.
local known = {}
local members = {}
for i = 1, n do
  local member = ARGV[4 + 8 * (i - 1) + 7]
  if member ~= "" then members[#members + 1] = member end
end
if #members > 0 then
  for b = 7, 6 + nb do
    local hits = rcall("SMISMEMBER", KEYS[b], unpack(members))
    for j = 1, #members do
      if hits[j] == 1 then known[members[j]] = true end
    end
  end
end
local remembered = {}
-- One EXISTS of every job key of the call: when none exists (the usual case) no job is
-- checked on its own. A job created earlier in the call is a duplicate like one found.
local anyExists = false
if n > 0 then
  local jks = {}
  for i = 1, n do jks[i] = KEYS[5 + nb + 2 * i] end
  anyExists = rcall("EXISTS", unpack(jks)) > 0
end
local created = {}
for i = 1, n do
  local jk = KEYS[5 + nb + 2 * i]
  local dk = KEYS[6 + nb + 2 * i]
  local a = 4 + 8 * (i - 1)
  local jobId = ARGV[a]
  local deid = ARGV[a + 5]
  local member = ARGV[a + 7]
  local code = 1
  local current = jobId
  if created[jobId] or (anyExists and rcall("EXISTS", jk) == 1) then
    rcall("XADD", KEYS[5], "MAXLEN", "~", maxEvents, "*", "event", "duplicated", "jobId", jobId)
    code = 0
  end
  if code == 1 and member ~= "" and known[member] then
    rcall("XADD", KEYS[5], "MAXLEN", "~", maxEvents, "*", "event", "deduplicated",
      "jobId", jobId, "deduplicationId", jobId, "deduplicatedJobId", jobId)
    code = 2
  end
  if code == 1 and deid ~= "" then
    local ttl = tonumber(ARGV[a + 4])
    local ok
    if ttl > 0 then
      ok = rcall("SET", dk, jobId, "PX", ttl, "NX")
    else
      ok = rcall("SET", dk, jobId, "NX")
    end
    if not ok then
      current = rcall("GET", dk) or jobId
      rcall("XADD", KEYS[5], "MAXLEN", "~", maxEvents, "*", "event", "deduplicated",
        "jobId", current, "deduplicationId", deid, "deduplicatedJobId", jobId)
      code = 2
    end
  end
  if code == 1 then
    local name = ARGV[a + 1]
    if deid ~= "" and ARGV[a + 6] ~= "" then
      rcall("HSET", jk, "name", name, "data", ARGV[a + 2], "opts", ARGV[a + 3], "timestamp", ARGV[1],
        "delay", "0", "priority", "0", "deid", deid, "wm", ARGV[a + 6])
    elseif deid ~= "" then
      rcall("HSET", jk, "name", name, "data", ARGV[a + 2], "opts", ARGV[a + 3], "timestamp", ARGV[1],
        "delay", "0", "priority", "0", "deid", deid)
    elseif ARGV[a + 6] ~= "" then
      rcall("HSET", jk, "name", name, "data", ARGV[a + 2], "opts", ARGV[a + 3], "timestamp", ARGV[1],
        "delay", "0", "priority", "0", "wm", ARGV[a + 6])
    else
      rcall("HSET", jk, "name", name, "data", ARGV[a + 2], "opts", ARGV[a + 3], "timestamp", ARGV[1],
        "delay", "0", "priority", "0")
    end
    rcall("XADD", KEYS[5], "*", "event", "added", "jobId", jobId, "name", name)
    rcall("XADD", KEYS[5], "MAXLEN", "~", maxEvents, "*", "event", "waiting", "jobId", jobId)
    pushed[#pushed + 1] = jobId
    created[jobId] = true
    if member ~= "" then
      known[member] = true
      remembered[#remembered + 1] = member
    end
  end
  out[#out + 1] = code
  out[#out + 1] = current
end
-- One LPUSH of every created id, in order: the list BullMQ's LPUSH per job leaves (the
-- script is atomic: nobody sees the events before the push).
if #pushed > 0 then rcall("LPUSH", KEYS[1], unpack(pushed)) end
if #remembered > 0 then
  rcall("SADD", KEYS[7], unpack(remembered))
  rcall("PEXPIREAT", KEYS[7], ARGV[3])
end
if #pushed > 0 and not attrs[1] and ((not attrs[2]) or rcall("LLEN", KEYS[4]) < tonumber(attrs[2])) then
  rcall("ZADD", KEYS[6], 0, "0")
end
return out
`)

// takeLua defines takeJobs: promote due delayed jobs, then move up to room
// jobs from wait (FIFO) or prioritized to active, each locked with its own
// token. K holds the queue keys; attrs, when not nil, is the meta's
// {paused, concurrency, max, duration} read by the caller in this script.
// Returns {{id, token, hgetall, ...}, nextDelayedMs, rateLimitTTLms}.
// nextDelayedMs is read when nothing was taken, and also after a take that
// left wait and prioritized empty when wantNext is set (the caller waits on
// the marker next).
//
// The base marker is re-added after a take only while jobs may be left
// (room filled, or delayed jobs promoted): BullMQ re-adds it after every take,
// which wakes an idle worker for a take that finds nothing. A job added later
// adds the marker itself. Wait is emptied with RPOP's count (Redis 6.2).
const takeLua = `
local function takeJobs(K, prefix, nowArg, tokenBase, n0, lockMs, room, name, attrs, wantNext)
  local now = tonumber(nowArg)
  attrs = attrs or rcall("HMGET", K.meta, "paused", "concurrency", "max", "duration")
  local blocked = false
  if attrs[1] then
    blocked = true
  elseif attrs[2] then
    room = math.min(room, tonumber(attrs[2]) - rcall("LLEN", K.active))
    if room <= 0 then blocked = true end
  end
  local more = false
  local due = rcall("ZRANGEBYSCORE", K.delayed, 0, (now + 1) * 0x1000 - 1, "LIMIT", 0, 1000)
  if #due > 0 then
    more = true
    rcall("ZREM", K.delayed, unpack(due))
    for _, id in ipairs(due) do
      local jk = prefix .. id
      local prio = tonumber(rcall("HGET", jk, "priority")) or 0
      if prio == 0 then
        rcall("LPUSH", K.wait, id)
      else
        local c = rcall("INCR", K.pc)
        rcall("ZADD", K.prioritized, prio * 0x100000000 + c % 0x100000000, id)
      end
      rcall("XADD", K.events, "*", "event", "waiting", "jobId", id, "prev", "delayed")
      rcall("HSET", jk, "delay", 0)
    end
    if not blocked then rcall("ZADD", K.marker, 0, "0") end
  end
  local maxJobs = tonumber(attrs[3])
  if maxJobs then
    local used = tonumber(rcall("GET", K.limiter) or 0)
    if used >= maxJobs then
      local pttl = rcall("PTTL", K.limiter)
      if pttl == 0 then rcall("DEL", K.limiter) end
      if pttl > 0 then return {{}, 0, pttl} end
    else
      room = math.min(room, maxJobs - used)
    end
  end
  if blocked then return {{}, 0, 0} end
  local out = {}
  local ids = {}
  if room > 0 then
    -- RPOPLPUSH wait active, room times, in two calls (RPOP's count pops the oldest first).
    local items = rcall("RPOP", K.wait, room)
    if items then
      ids = items
      if #ids == room then more = true end
    end
    if #ids < room then
      local want = room - #ids
      local p = rcall("ZPOPMIN", K.prioritized, want)
      if #p == 0 then rcall("DEL", K.pc) end
      if #p == 2 * want then more = true end
      for i = 1, #p, 2 do ids[#ids + 1] = p[i] end
    end
    if #ids > 0 then rcall("LPUSH", K.active, unpack(ids)) end
  end
  for i, id in ipairs(ids) do
    local jk = prefix .. id
    local h = rcall("HGETALL", jk)
    if #h == 0 then
      rcall("LREM", K.active, 1, id)
    else
      if maxJobs then
        local deferred = false
        for f = 1, #h, 2 do
          if h[f] == "defa" then deferred = true end
        end
        if not deferred and rcall("INCR", K.limiter) == 1 then
          rcall("PEXPIRE", K.limiter, math.floor(math.abs(tonumber(attrs[4]) or 1000)))
        end
      end
      local token = tokenBase .. ":" .. (n0 + i)
      rcall("SET", jk .. ":lock", token, "PX", lockMs)
      rcall("XADD", K.events, "*", "event", "active", "jobId", id, "prev", "waiting")
      -- HINCRBY ats 1 and HSET processedOn, in one call; patch the reply.
      local ats, atsAt, pOnAt = 1, nil, nil
      for f = 1, #h, 2 do
        if h[f] == "ats" then
          ats = (tonumber(h[f + 1]) or 0) + 1
          atsAt = f + 1
        elseif h[f] == "processedOn" then
          pOnAt = f + 1
        end
      end
      local atsStr = string.format("%d", ats)
      if atsAt then h[atsAt] = atsStr else h[#h + 1] = "ats"; h[#h + 1] = atsStr end
      if pOnAt then h[pOnAt] = nowArg else h[#h + 1] = "processedOn"; h[#h + 1] = nowArg end
      if name ~= "" then
        rcall("HSET", jk, "processedOn", nowArg, "ats", atsStr, "pb", name)
      else
        rcall("HSET", jk, "processedOn", nowArg, "ats", atsStr)
      end
      out[#out+1] = id
      out[#out+1] = token
      out[#out+1] = h
    end
  end
  if more and #out > 0 then rcall("ZADD", K.marker, 0, "0") end
  if #out > 0 and (more or not wantNext) then return {out, 0, 0} end
  local nxt = rcall("ZRANGE", K.delayed, 0, 0, "WITHSCORES")
  if nxt[2] then
    return {out, math.floor(tonumber(nxt[2]) / 0x1000), 0}
  end
  return {out, 0, 0}
end
`

// takeScript takes up to ARGV[6] jobs (see takeLua), and says when the next
// delayed job is due unless it filled ARGV[6].
//
// KEYS: 1 wait, 2 active, 3 prioritized, 4 events, 5 limiter, 6 delayed,
// 7 meta, 8 pc, 9 marker.
// ARGV: 1 queue key prefix ("bull:q:"), 2 now ms, 3 token base, 4 first token
// counter, 5 lockDuration ms, 6 max jobs, 7 worker name ("" = none).
var takeScript = redis.NewScript("local rcall = redis.call\n" + takeLua + `
local K = {wait = KEYS[1], active = KEYS[2], prioritized = KEYS[3], events = KEYS[4],
  limiter = KEYS[5], delayed = KEYS[6], meta = KEYS[7], pc = KEYS[8], marker = KEYS[9]}
return takeJobs(K, ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), ARGV[7], nil, true)
`)

// extendScript renews the locks of the jobs a worker holds.
//
// KEYS: 1 stalled, 2.. the lock key of each job.
// ARGV: 1 lockDuration ms, then for job i: ARGV[1+i] token, ARGV[1+n+i] jobId.
// Returns one 1 (renewed) or 0 (lost) per job.
var extendScript = redis.NewScript(`
local rcall = redis.call
local n = #KEYS - 1
local out = {}
for i = 1, n do
  if rcall("GET", KEYS[1+i]) == ARGV[1+i] then
    rcall("SET", KEYS[1+i], ARGV[1+i], "PX", ARGV[1])
    rcall("SREM", KEYS[1], ARGV[1+n+i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`)

// finishHelpersLua holds the Lua functions shared by the finishing scripts.
const finishHelpersLua = `
local function maxEvents(metaKey)
  local m = rcall("HGET", metaKey, "opts.maxLenEvents")
  if not m then
    m = 10000
    rcall("HSET", metaKey, "opts.maxLenEvents", m)
  end
  return m
end
-- dels gathers the keys a script deletes: one DEL per 4800 keys (flushDels), so that the
-- finish script deletes the settled jobs' locks and the trimmed jobs' keys together.
local dels = {}
local function flushDels()
  if #dels > 0 then
    rcall("DEL", unpack(dels))
    dels = {}
  end
end
local function delKey(k)
  dels[#dels + 1] = k
  if #dels >= 4800 then flushDels() end
end
-- removeJobKeys deletes the keys of the job jk (at the next flushDels).
local function removeJobKeys(jk)
  delKey(jk)
  delKey(jk .. ":logs")
  delKey(jk .. ":dependencies")
  delKey(jk .. ":processed")
  delKey(jk .. ":failed")
  delKey(jk .. ":unsuccessful")
end
-- removeJobsKeys is removeJobKeys for the jobs ids names (prefix .. id).
local function removeJobsKeys(prefix, ids)
  for _, id in ipairs(ids) do removeJobKeys(prefix .. id) end
end
local function pausedOrMaxed(metaKey, activeKey)
  local attrs = rcall("HMGET", metaKey, "paused", "concurrency")
  if attrs[1] then return true end
  if attrs[2] then return rcall("LLEN", activeKey) >= tonumber(attrs[2]) end
  return false
end
`

// finishScript settles a batch of jobs this worker holds, each the way
// BullMQ 6.7.0 does it for one job, then optionally takes the next jobs in
// the same call (BullMQ's "fetch next"). Kinds:
//   - "completed" / "failed": to the completed or failed set for good, with
//     returnvalue or failedReason + stacktrace, finishedOn, atm, events,
//     retries-exhausted, trimming by age and count, de: key cleanup;
//   - "retry": back to delayed (delay > 0) or to the end of wait, atm + 1;
//   - "snooze": back to delayed like a retry, but atm unchanged and no failedReason:
//     snz + 1 and snzms + delay instead;
//   - "wait": back to delayed like a snooze, but snz and snzms unchanged too;
//   - "handback": to the front of wait, no attempt counted.
//
// Unlike BullMQ, the locks of the batch are read in one MGET, a batch of at
// least activeBatchMin settled jobs leaves active by one rewrite of the list
// (LRANGE, DEL, RPUSH of the rest in order) rather than one LREM each, the
// settled jobs' locks and the keys of the jobs removed or trimmed go in one DEL
// (per 4800 keys), a settled job is
// not removed from the stalled set (the stalled check passes over ids no longer
// in active, as Node's does: LREM finds nothing), the events stream is trimmed by the XADD of each completed
// or failed event (MAXLEN ~, the same bound) rather than by an XTRIM first,
// the meta is read once per call, and the trim of finished jobs by age runs
// only when ARGV[8] is "1" (the Worker asks for it at most once a second:
// jobs past their age are removed up to that much later; trims by count run
// on every call).
//
// KEYS: 1 wait, 2 active, 3 prioritized, 4 events, 5 stalled, 6 meta,
// 7 completed, 8 failed, 9 marker, 10 delayed, 11 pc, 12 limiter; then for
// job i (from 1): KEYS[10+3i] job, KEYS[11+3i] lock, KEYS[12+3i] de:<deid>
// (the job key when none).
// ARGV: 1 now ms, 2 queue key prefix, 3 jobs to take afterwards (0 = none),
// 4 token base, 5 first token counter, 6 lockDuration ms, 7 worker name,
// 8 trim by age ("1") or not ("0");
// then for job i, from ARGV[9+12(i-1)]: jobId, token, kind, value
// (returnvalue JSON or failedReason), keep count ("" = unset), keep age
// seconds ("" = unset), keep limit, attempts, stacktrace JSON, deid, delay ms,
// attemptsMade + 1 (written as atm: the lock holder alone changes it, so the
// value read at the take stands in for BullMQ's HINCRBY).
// Returns {codes, taken, nextDelayedMs, rateLimitTTLms}: one code per job,
// attemptsMade (>= 0) or a negative BullMQ error code (-1 missing job,
// -2 missing lock, -3 not active, -6 lock of another worker).
var finishScript = redis.NewScript("local rcall = redis.call\n" +
	"local activeBatchMin, activeScan = " + strconv.Itoa(activeBatchMin) + ", " + strconv.Itoa(activeScan) + "\n" +
	finishHelpersLua + takeLua + `
local K = {wait = KEYS[1], active = KEYS[2], prioritized = KEYS[3], events = KEYS[4],
  stalled = KEYS[5], meta = KEYS[6], completed = KEYS[7], failed = KEYS[8], marker = KEYS[9],
  delayed = KEYS[10], pc = KEYS[11], limiter = KEYS[12]}
local now = ARGV[1]
local prefix = ARGV[2]
local meta = rcall("HMGET", K.meta, "opts.maxLenEvents", "paused", "concurrency", "max", "duration")
local mx = meta[1]
if not mx then
  mx = 10000
  rcall("HSET", K.meta, "opts.maxLenEvents", mx)
end
local attrs = {meta[2], meta[3], meta[4], meta[5]}
local function blocked()
  if attrs[1] then return true end
  if attrs[2] then return rcall("LLEN", K.active) >= tonumber(attrs[2]) end
  return false
end
local trimAge = ARGV[8] == "1"
local trims = {}
local n = (#KEYS - 12) / 3
local codes = {}
local locks = {}
local zadds = {}

local function finish(jobId, jk, dk, a, target)
  local setKey = K.completed
  local field = "returnvalue"
  if target == "failed" then
    setKey = K.failed
    field = "failedReason"
  end
  local deid = ARGV[a + 9]
  if deid ~= "" then
    local pttl = rcall("PTTL", dk)
    if pttl == 0 then
      rcall("DEL", dk)
    elseif pttl == -1 and rcall("GET", dk) == jobId then
      rcall("DEL", dk)
    end
  end
  -- atm + 1, known from the take: only the lock holder changes atm.
  local atm = tonumber(ARGV[a + 11])
  if tonumber(ARGV[a + 4]) ~= 0 then
    local z = zadds[setKey]
    if not z then
      z = {}
      zadds[setKey] = z
    end
    z[#z + 1] = now
    z[#z + 1] = jobId
    if target == "failed" then
      rcall("HSET", jk, "failedReason", ARGV[a + 3], "stacktrace", ARGV[a + 8], "finishedOn", now, "atm", atm)
      rcall("HDEL", jk, "defa")
    else
      rcall("HSET", jk, "returnvalue", ARGV[a + 3], "finishedOn", now, "atm", atm)
    end
    if ARGV[a + 4] ~= "-1" or (trimAge and ARGV[a + 5] ~= "") then
      trims[setKey .. "|" .. ARGV[a + 4] .. "|" .. ARGV[a + 5] .. "|" .. ARGV[a + 6]] =
        {setKey, tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])}
    end
  else
    removeJobKeys(jk)
  end
  rcall("XADD", K.events, "MAXLEN", "~", mx, "*", "event", target, "jobId", jobId, field, ARGV[a + 3], "prev", "active")
  if target == "failed" and atm >= (tonumber(ARGV[a + 7]) or 0) then
    rcall("XADD", K.events, "*", "event", "retries-exhausted", "jobId", jobId, "attemptsMade", atm)
  end
  return atm
end

local function retry(jobId, jk, a, snooze, counted)
  local delay = tonumber(ARGV[a + 10])
  local atm
  if snooze then
    if counted then
      rcall("HINCRBY", jk, "snz", 1)
      rcall("HINCRBY", jk, "snzms", delay)
    end
    atm = tonumber(rcall("HGET", jk, "atm") or 0)
  else
    atm = tonumber(ARGV[a + 11])
    rcall("HSET", jk, "failedReason", ARGV[a + 3], "stacktrace", ARGV[a + 8], "atm", atm)
  end
  if delay > 0 then
    local ts = tonumber(now) + delay
    local minScore = ts * 0x1000
    local maxScore = (ts + 1) * 0x1000 - 1
    local score = minScore
    local top = rcall("ZREVRANGEBYSCORE", K.delayed, maxScore, minScore, "WITHSCORES", "LIMIT", 0, 1)
    if top[2] then score = math.min(tonumber(top[2]) + 1, maxScore) end
    rcall("HSET", jk, "delay", delay)
    rcall("ZADD", K.delayed, score, jobId)
    rcall("XADD", K.events, "MAXLEN", "~", mx, "*", "event", "delayed", "jobId", jobId, "delay", ts)
    local nxt = rcall("ZRANGE", K.delayed, 0, 0, "WITHSCORES")
    if nxt[2] then rcall("ZADD", K.marker, tonumber(nxt[2]) / 0x1000, "1") end
  else
    local prio = tonumber(rcall("HGET", jk, "priority")) or 0
    if prio == 0 then
      rcall("LPUSH", K.wait, jobId)
    else
      local c = rcall("INCR", K.pc)
      rcall("ZADD", K.prioritized, prio * 0x100000000 + c % 0x100000000, jobId)
    end
    if not blocked() then rcall("ZADD", K.marker, 0, "0") end
    rcall("XADD", K.events, "MAXLEN", "~", mx, "*", "event", "waiting", "jobId", jobId, "prev", "active")
  end
  return atm
end

local function handBack(jobId, jk)
  local prio = tonumber(rcall("HGET", jk, "priority")) or 0
  if prio > 0 then
    rcall("ZADD", K.prioritized, prio * 0x100000000, jobId)
  else
    rcall("RPUSH", K.wait, jobId)
  end
  if not blocked() then rcall("ZADD", K.marker, 0, "0") end
  rcall("XADD", K.events, "MAXLEN", "~", mx, "*", "event", "waiting", "jobId", jobId, "prev", "active")
  return tonumber(rcall("HGET", jk, "atm") or 0)
end

-- A job's own lock and its place in active vouch for its hash (BullMQ removes
-- no locked job): the hash is looked up only to name a failure. The locks are
-- read in one MGET.
local lockKeys = {}
for i = 1, n do lockKeys[i] = KEYS[11 + 3 * i] end
local currents = {}
if n > 0 then currents = rcall("MGET", unpack(lockKeys)) end
-- The jobs whose lock holds their token leave active. From activeBatchMin of them on,
-- and while active is shorter than activeScan, by one LRANGE and a rewrite of the list
-- (DEL, RPUSH of the rest in order: three commands) instead of one LREM each; each id
-- taken from the tail first, as LREM -1 does. inActive[i] says whether job i was there.
local inActive = nil
local owned = {}
for i = 1, n do
  if currents[i] == ARGV[9 + 12 * (i - 1) + 1] then owned[#owned + 1] = i end
end
if #owned >= activeBatchMin then
  local all = rcall("LRANGE", K.active, 0, activeScan - 1)
  if #all < activeScan then
    local want = {}
    for _, i in ipairs(owned) do
      local id = ARGV[9 + 12 * (i - 1)]
      want[id] = (want[id] or 0) + 1
    end
    local found = {}
    local removed = 0
    for p = #all, 1, -1 do
      local id = all[p]
      if (want[id] or 0) > 0 then
        want[id] = want[id] - 1
        found[id] = (found[id] or 0) + 1
        all[p] = false
        removed = removed + 1
      end
    end
    if removed > 0 then
      local keep = {}
      for p = 1, #all do
        if all[p] then keep[#keep + 1] = all[p] end
      end
      rcall("DEL", K.active)
      if #keep > 0 then rcall("RPUSH", K.active, unpack(keep)) end
    end
    inActive = {}
    for _, i in ipairs(owned) do
      local id = ARGV[9 + 12 * (i - 1)]
      if (found[id] or 0) > 0 then
        found[id] = found[id] - 1
        inActive[i] = true
      end
    end
  end
end
local function leaveActive(i, jobId)
  if inActive then return inActive[i] == true end
  return rcall("LREM", K.active, -1, jobId) >= 1
end
for i = 1, n do
  local jk = KEYS[10 + 3 * i]
  local a = 9 + 12 * (i - 1)
  local jobId = ARGV[a]
  local kind = ARGV[a + 2]
  local code
  local lk = KEYS[11 + 3 * i]
  local current = currents[i]
  if current == ARGV[a + 1] then
    code = 0
    locks[#locks + 1] = lk
  elseif rcall("EXISTS", jk) == 0 then
    code = -1
  elseif current then
    code = -6
  else
    code = -2
  end
  if code == 0 then
    if not leaveActive(i, jobId) then
      code = -3
      if rcall("EXISTS", jk) == 0 then code = -1 end
    elseif kind == "retry" then
      code = retry(jobId, jk, a, false, false)
    elseif kind == "snooze" then
      code = retry(jobId, jk, a, true, true)
    elseif kind == "wait" then
      code = retry(jobId, jk, a, true, false)
    elseif kind == "handback" then
      code = handBack(jobId, jk)
    else
      code = finish(jobId, jk, KEYS[12 + 3 * i], a, kind)
    end
  end
  codes[i] = code
end

-- The settled jobs' locks go with the keys of the jobs removed and trimmed, in one DEL
-- (flushDels, before the take: a job retried to wait may be taken again below).
for _, lk in ipairs(locks) do delKey(lk) end
for set, z in pairs(zadds) do
  rcall("ZADD", set, unpack(z))
end
for _, t in pairs(trims) do
  local set, count, age, limit = t[1], t[2], t[3], t[4]
  if age and trimAge then
    local start = tonumber(now) - age * 1000
    local ids = rcall("ZREVRANGEBYSCORE", set, start, "-inf", "LIMIT", 0, limit)
    removeJobsKeys(prefix, ids)
    if #ids > 0 then
      if #ids < limit then
        rcall("ZREMRANGEBYSCORE", set, "-inf", start)
      else
        for j = 1, #ids, 5000 do
          rcall("ZREM", set, unpack(ids, j, math.min(j + 4999, #ids)))
        end
      end
    end
  end
  if count and count > 0 then
    local ids = rcall("ZREVRANGE", set, count, -1)
    removeJobsKeys(prefix, ids)
    if #ids > 0 then rcall("ZREMRANGEBYRANK", set, 0, -(count + 1)) end
  end
end
flushDels()

local fetch = tonumber(ARGV[3])
if fetch > 0 then
  local t = takeJobs(K, prefix, now, ARGV[4], tonumber(ARGV[5]), ARGV[6], fetch, ARGV[7], attrs, false)
  if #t[1] > 0 then
    return {codes, t[1], t[2], t[3]}
  end
end
if rcall("LLEN", K.wait) == 0 then
  if rcall("LLEN", K.active) == 0 and rcall("ZCARD", K.prioritized) == 0 then
    rcall("XADD", K.events, "*", "event", "drained")
  end
elseif attrs[2] and not blocked() then
  rcall("ZADD", K.marker, 0, "0")
end
if fetch > 0 then
  local nxt = rcall("ZRANGE", K.delayed, 0, 0, "WITHSCORES")
  if nxt[2] then return {codes, {}, math.floor(tonumber(nxt[2]) / 0x1000), 0} end
end
return {codes, {}, 0, 0}
`)

// stalledScript is the stalled check shared with Node.js workers: at most one
// pass per stalled-check period across every worker of the queue.
//
// KEYS: 1 stalled, 2 wait, 3 active, 4 stalled-check, 5 meta, 6 marker, 7 events.
// ARGV: 1 maxStalledCount, 2 queue key prefix, 3 now ms, 4 check period ms.
// Returns the ids moved back to wait.
var stalledScript = redis.NewScript("local rcall = redis.call\n" + finishHelpersLua + `
if rcall("EXISTS", KEYS[4]) == 1 then return {} end
rcall("SET", KEYS[4], ARGV[3], "PX", ARGV[4])
local mx = maxEvents(KEYS[5])
rcall("XTRIM", KEYS[7], "MAXLEN", "~", mx)
local maxStalled = tonumber(ARGV[1])
local prefix = ARGV[2]
local stalling = rcall("SMEMBERS", KEYS[1])
local moved = {}
if #stalling > 0 then
  rcall("DEL", KEYS[1])
  for _, id in ipairs(stalling) do
    local jk = prefix .. id
    if rcall("EXISTS", jk .. ":lock") == 0 and rcall("LREM", KEYS[3], 1, id) > 0 then
      local stc = rcall("HINCRBY", jk, "stc", 1)
      if stc > maxStalled then
        rcall("HSET", jk, "defa", "job stalled more than allowable limit")
      end
      local blocked = pausedOrMaxed(KEYS[5], KEYS[3])
      rcall("RPUSH", KEYS[2], id)
      if not blocked then rcall("ZADD", KEYS[6], 0, "0") end
      rcall("XADD", KEYS[7], "*", "event", "waiting", "jobId", id, "prev", "active")
      rcall("XADD", KEYS[7], "*", "event", "stalled", "jobId", id)
      moved[#moved+1] = id
    end
  end
end
local active = rcall("LRANGE", KEYS[3], 0, -1)
for i = 1, #active, 5000 do
  rcall("SADD", KEYS[1], unpack(active, i, math.min(i + 4999, #active)))
end
return moved
`)

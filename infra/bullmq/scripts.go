package bullmq

import "github.com/redis/go-redis/v9"

// The Lua scripts below are ours, written from the facts in shared/BULLMQ.md
// (BullMQ 6.7.0's Redis layout) and checked against real Node.js BullMQ in the
// tests. Every key of the queue that a script knows in advance arrives in
// KEYS; job keys found while trimming or promoting are derived from the queue
// prefix, which hashes to the same Redis Cluster slot as long as the hash tag
// sits in the prefix or the queue name.

// addScript adds standard jobs (no delay, no priority, no parent), each
// exactly as BullMQ 6.7.0 adds one; the meta reads and the marker are done
// once per call.
//
// KEYS: 1 wait, 2 meta, 3 id, 4 active, 5 events, 6 marker; then for job i
// (from 1): KEYS[5+2i] the job hash, KEYS[6+2i] its de:<id> key (the job
// key again when it has no deduplication id).
// ARGV: 1 timestamp ms; then for job i, from ARGV[2+7(i-1)]: jobId, name,
// data, opts JSON, dedup ttl ms, dedup id ("" = none), watermill metadata
// JSON ("" = none).
// Returns {code, id, code, id, ...}: code 1 created, 0 duplicate (job hash
// exists), 2 deduplicated (de: key holds id).
var addScript = redis.NewScript(`
local rcall = redis.call
local maxEvents = rcall("HGET", KEYS[2], "opts.maxLenEvents")
if not maxEvents then
  maxEvents = 10000
  rcall("HSET", KEYS[2], "opts.maxLenEvents", maxEvents)
end
local n = (#KEYS - 6) / 2
rcall("INCRBY", KEYS[3], n)
local attrs = rcall("HMGET", KEYS[2], "paused", "concurrency")
local out = {}
local created = 0
for i = 1, n do
  local jk = KEYS[5 + 2 * i]
  local dk = KEYS[6 + 2 * i]
  local a = 2 + 7 * (i - 1)
  local jobId = ARGV[a]
  local deid = ARGV[a + 5]
  local code = 1
  local current = jobId
  if rcall("EXISTS", jk) == 1 then
    rcall("XADD", KEYS[5], "MAXLEN", "~", maxEvents, "*", "event", "duplicated", "jobId", jobId)
    code = 0
  elseif deid ~= "" then
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
    rcall("LPUSH", KEYS[1], jobId)
    rcall("XADD", KEYS[5], "MAXLEN", "~", maxEvents, "*", "event", "waiting", "jobId", jobId)
    created = created + 1
  end
  out[#out + 1] = code
  out[#out + 1] = current
end
if created > 0 and not attrs[1] and ((not attrs[2]) or rcall("LLEN", KEYS[4]) < tonumber(attrs[2])) then
  rcall("ZADD", KEYS[6], 0, "0")
end
return out
`)

// takeScript promotes due delayed jobs and moves up to ARGV[6] jobs from wait
// (FIFO) or prioritized to active, locking each with its own token.
//
// KEYS: 1 wait, 2 active, 3 prioritized, 4 events, 5 limiter, 6 delayed,
// 7 meta, 8 pc, 9 marker.
// ARGV: 1 queue key prefix ("bull:q:"), 2 now ms, 3 token base, 4 first token
// counter, 5 lockDuration ms, 6 max jobs, 7 worker name ("" = none).
// Returns {{id, token, hgetall, ...}, nextDelayedMs, rateLimitTTLms}.
var takeScript = redis.NewScript(`
local rcall = redis.call
local prefix = ARGV[1]
local now = tonumber(ARGV[2])
local attrs = rcall("HMGET", KEYS[7], "paused", "concurrency", "max", "duration")
local room = tonumber(ARGV[6])
local blocked = false
if attrs[1] then
  blocked = true
elseif attrs[2] then
  room = math.min(room, tonumber(attrs[2]) - rcall("LLEN", KEYS[2]))
  if room <= 0 then blocked = true end
end
local due = rcall("ZRANGEBYSCORE", KEYS[6], 0, (now + 1) * 0x1000 - 1, "LIMIT", 0, 1000)
if #due > 0 then
  rcall("ZREM", KEYS[6], unpack(due))
  for _, id in ipairs(due) do
    local jk = prefix .. id
    local prio = tonumber(rcall("HGET", jk, "priority")) or 0
    if prio == 0 then
      rcall("LPUSH", KEYS[1], id)
    else
      local c = rcall("INCR", KEYS[8])
      rcall("ZADD", KEYS[3], prio * 0x100000000 + c % 0x100000000, id)
    end
    rcall("XADD", KEYS[4], "*", "event", "waiting", "jobId", id, "prev", "delayed")
    rcall("HSET", jk, "delay", 0)
  end
  if not blocked then rcall("ZADD", KEYS[9], 0, "0") end
end
local maxJobs = tonumber(attrs[3])
if maxJobs then
  local used = tonumber(rcall("GET", KEYS[5]) or 0)
  if used >= maxJobs then
    local pttl = rcall("PTTL", KEYS[5])
    if pttl == 0 then rcall("DEL", KEYS[5]) end
    if pttl > 0 then return {{}, 0, pttl} end
  else
    room = math.min(room, maxJobs - used)
  end
end
if blocked then return {{}, 0, 0} end
local out = {}
local n0 = tonumber(ARGV[4])
for i = 1, room do
  local id = rcall("RPOPLPUSH", KEYS[1], KEYS[2])
  if not id then
    local p = rcall("ZPOPMIN", KEYS[3])
    if #p > 0 then
      id = p[1]
      rcall("LPUSH", KEYS[2], id)
    else
      rcall("DEL", KEYS[8])
      break
    end
  end
  local jk = prefix .. id
  if rcall("EXISTS", jk) == 0 then
    rcall("LREM", KEYS[2], 1, id)
  else
    if maxJobs and rcall("HEXISTS", jk, "defa") == 0 then
      if rcall("INCR", KEYS[5]) == 1 then
        rcall("PEXPIRE", KEYS[5], math.floor(math.abs(tonumber(attrs[4]) or 1000)))
      end
    end
    local token = ARGV[3] .. ":" .. (n0 + i)
    rcall("SET", jk .. ":lock", token, "PX", ARGV[5])
    rcall("XADD", KEYS[4], "*", "event", "active", "jobId", id, "prev", "waiting")
    if ARGV[7] ~= "" then
      rcall("HSET", jk, "processedOn", ARGV[2], "pb", ARGV[7])
    else
      rcall("HSET", jk, "processedOn", ARGV[2])
    end
    rcall("HINCRBY", jk, "ats", 1)
    out[#out+1] = id
    out[#out+1] = token
    out[#out+1] = rcall("HGETALL", jk)
  end
end
if #out > 0 then
  rcall("ZADD", KEYS[9], 0, "0")
  return {out, 0, 0}
end
local nxt = rcall("ZRANGE", KEYS[6], 0, 0, "WITHSCORES")
if nxt[2] then
  return {out, math.floor(tonumber(nxt[2]) / 0x1000), 0}
end
return {out, 0, 0}
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
local rcall = redis.call
local function maxEvents(metaKey)
  local m = rcall("HGET", metaKey, "opts.maxLenEvents")
  if not m then
    m = 10000
    rcall("HSET", metaKey, "opts.maxLenEvents", m)
  end
  return m
end
local function removeJobKeys(jk)
  rcall("DEL", jk, jk .. ":logs", jk .. ":dependencies", jk .. ":processed",
    jk .. ":failed", jk .. ":unsuccessful")
end
local function releaseLock(jobKey, lockKey, stalledKey, token, jobId)
  local current = rcall("GET", lockKey)
  if current ~= token then
    if current then return -6 end
    return -2
  end
  rcall("DEL", lockKey)
  rcall("SREM", stalledKey, jobId)
  return 0
end
local function pausedOrMaxed(metaKey, activeKey)
  local attrs = rcall("HMGET", metaKey, "paused", "concurrency")
  if attrs[1] then return true end
  if attrs[2] then return rcall("LLEN", activeKey) >= tonumber(attrs[2]) end
  return false
end
`

// finishScript moves a job from active to completed or failed for good.
//
// KEYS: 1 wait, 2 active, 3 prioritized, 4 events, 5 stalled, 6 meta,
// 7 completed|failed, 8 job, 9 lock, 10 de:<deid> (the job key when none), 11 marker.
// ARGV: 1 jobId, 2 token, 3 now ms, 4 "completed"|"failed",
// 5 "returnvalue"|"failedReason", 6 value, 7 keep count ("" = unset),
// 8 keep age seconds ("" = unset), 9 keep limit, 10 attempts,
// 11 stacktrace JSON ("" = leave), 12 deid ("" = none), 13 queue key prefix.
// Returns attemptsMade (>0) or a negative BullMQ error code.
var finishScript = redis.NewScript(finishHelpersLua + `
local jobId = ARGV[1]
local jk = KEYS[8]
if rcall("EXISTS", jk) == 0 then return -1 end
local code = releaseLock(jk, KEYS[9], KEYS[5], ARGV[2], jobId)
if code < 0 then return code end
if rcall("LREM", KEYS[2], -1, jobId) < 1 then return -3 end
local target = ARGV[4]
local mx = maxEvents(KEYS[6])
rcall("XTRIM", KEYS[4], "MAXLEN", "~", mx)
if target == "failed" and ARGV[11] ~= "" then
  rcall("HSET", jk, "failedReason", ARGV[6], "stacktrace", ARGV[11])
end
if ARGV[12] ~= "" then
  local pttl = rcall("PTTL", KEYS[10])
  if pttl == 0 then
    rcall("DEL", KEYS[10])
  elseif pttl == -1 and rcall("GET", KEYS[10]) == jobId then
    rcall("DEL", KEYS[10])
  end
end
local atm = rcall("HINCRBY", jk, "atm", 1)
local count = tonumber(ARGV[7])
local age = tonumber(ARGV[8])
local prefix = ARGV[13]
if count ~= 0 then
  local set = KEYS[7]
  rcall("ZADD", set, ARGV[3], jobId)
  rcall("HSET", jk, ARGV[5], ARGV[6], "finishedOn", ARGV[3])
  if target == "failed" then rcall("HDEL", jk, "defa") end
  if age then
    local limit = tonumber(ARGV[9])
    local start = tonumber(ARGV[3]) - age * 1000
    local ids = rcall("ZREVRANGEBYSCORE", set, start, "-inf", "LIMIT", 0, limit)
    for _, id in ipairs(ids) do removeJobKeys(prefix .. id) end
    if #ids > 0 then
      if #ids < limit then
        rcall("ZREMRANGEBYSCORE", set, "-inf", start)
      else
        for i = 1, #ids, 5000 do
          rcall("ZREM", set, unpack(ids, i, math.min(i + 4999, #ids)))
        end
      end
    end
  end
  if count and count > 0 then
    local ids = rcall("ZREVRANGE", set, count, -1)
    for _, id in ipairs(ids) do removeJobKeys(prefix .. id) end
    if #ids > 0 then rcall("ZREMRANGEBYRANK", set, 0, -(count + 1)) end
  end
else
  removeJobKeys(jk)
end
rcall("XADD", KEYS[4], "*", "event", target, "jobId", jobId, ARGV[5], ARGV[6], "prev", "active")
if target == "failed" and atm >= (tonumber(ARGV[10]) or 0) then
  rcall("XADD", KEYS[4], "*", "event", "retries-exhausted", "jobId", jobId, "attemptsMade", atm)
end
local waiting = rcall("LLEN", KEYS[1])
if waiting == 0 then
  if rcall("LLEN", KEYS[2]) == 0 and rcall("ZCARD", KEYS[3]) == 0 then
    rcall("XADD", KEYS[4], "*", "event", "drained")
  end
elseif not pausedOrMaxed(KEYS[6], KEYS[2]) and rcall("HEXISTS", KEYS[6], "concurrency") == 1 then
  rcall("ZADD", KEYS[11], 0, "0")
end
return atm
`)

// retryScript moves a failed attempt back to delayed (delay > 0) or to the
// end of wait (delay 0), the way BullMQ's worker retries with backoff.
//
// KEYS: 1 wait, 2 active, 3 prioritized, 4 events, 5 stalled, 6 meta,
// 7 delayed, 8 job, 9 lock, 10 marker, 11 pc.
// ARGV: 1 jobId, 2 token, 3 now ms, 4 delay ms, 5 failedReason, 6 stacktrace JSON.
// Returns attemptsMade (>0) or a negative BullMQ error code.
var retryScript = redis.NewScript(finishHelpersLua + `
local jobId = ARGV[1]
local jk = KEYS[8]
if rcall("EXISTS", jk) == 0 then return -1 end
local code = releaseLock(jk, KEYS[9], KEYS[5], ARGV[2], jobId)
if code < 0 then return code end
rcall("HSET", jk, "failedReason", ARGV[5], "stacktrace", ARGV[6])
if rcall("LREM", KEYS[2], -1, jobId) < 1 then return -3 end
local mx = maxEvents(KEYS[6])
local delay = tonumber(ARGV[4])
local atm
if delay > 0 then
  local ts = tonumber(ARGV[3]) + delay
  local minScore = ts * 0x1000
  local maxScore = (ts + 1) * 0x1000 - 1
  local score = minScore
  local top = rcall("ZREVRANGEBYSCORE", KEYS[7], maxScore, minScore, "WITHSCORES", "LIMIT", 0, 1)
  if top[2] then
    score = math.min(tonumber(top[2]) + 1, maxScore)
  end
  atm = rcall("HINCRBY", jk, "atm", 1)
  rcall("HSET", jk, "delay", ARGV[4])
  rcall("ZADD", KEYS[7], score, jobId)
  rcall("XADD", KEYS[4], "MAXLEN", "~", mx, "*", "event", "delayed", "jobId", jobId, "delay", ts)
  local nxt = rcall("ZRANGE", KEYS[7], 0, 0, "WITHSCORES")
  if nxt[2] then rcall("ZADD", KEYS[10], tonumber(nxt[2]) / 0x1000, "1") end
else
  local blocked = pausedOrMaxed(KEYS[6], KEYS[2])
  local prio = tonumber(rcall("HGET", jk, "priority")) or 0
  if prio == 0 then
    rcall("LPUSH", KEYS[1], jobId)
  else
    local c = rcall("INCR", KEYS[11])
    rcall("ZADD", KEYS[3], prio * 0x100000000 + c % 0x100000000, jobId)
  end
  if not blocked then rcall("ZADD", KEYS[10], 0, "0") end
  atm = rcall("HINCRBY", jk, "atm", 1)
  rcall("XADD", KEYS[4], "MAXLEN", "~", mx, "*", "event", "waiting", "jobId", jobId, "prev", "active")
end
return atm
`)

// handBackScript returns a job this worker holds to the front of wait
// without counting an attempt (graceful shutdown, ErrHandBack).
//
// KEYS: 1 wait, 2 active, 3 prioritized, 4 events, 5 stalled, 6 meta, 7 job,
// 8 lock, 9 marker.
// ARGV: 1 jobId, 2 token.
var handBackScript = redis.NewScript(finishHelpersLua + `
local jobId = ARGV[1]
local jk = KEYS[7]
if rcall("EXISTS", jk) == 0 then return -1 end
local code = releaseLock(jk, KEYS[8], KEYS[5], ARGV[2], jobId)
if code < 0 then return code end
if rcall("LREM", KEYS[2], 1, jobId) > 0 then
  local blocked = pausedOrMaxed(KEYS[6], KEYS[2])
  local prio = tonumber(rcall("HGET", jk, "priority")) or 0
  if prio > 0 then
    rcall("ZADD", KEYS[3], prio * 0x100000000, jobId)
  else
    rcall("RPUSH", KEYS[1], jobId)
  end
  if not blocked then rcall("ZADD", KEYS[9], 0, "0") end
  local mx = maxEvents(KEYS[6])
  rcall("XADD", KEYS[4], "MAXLEN", "~", mx, "*", "event", "waiting", "jobId", jobId, "prev", "active")
end
return 0
`)

// stalledScript is the stalled check shared with Node.js workers: at most one
// pass per stalled-check period across every worker of the queue.
//
// KEYS: 1 stalled, 2 wait, 3 active, 4 stalled-check, 5 meta, 6 marker, 7 events.
// ARGV: 1 maxStalledCount, 2 queue key prefix, 3 now ms, 4 check period ms.
// Returns the ids moved back to wait.
var stalledScript = redis.NewScript(finishHelpersLua + `
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

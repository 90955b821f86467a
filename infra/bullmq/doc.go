// Package bullmq is a BullMQ 6 compatible transport over go-redis: a
// Publisher that adds standard jobs, a Worker that consumes them, and a
// watermill message.Subscriber over the Worker. Jobs it adds are consumed by
// unmodified Node.js BullMQ 6.7.0 Workers, and jobs Node.js adds are consumed
// by the Worker; both kinds of worker can share a queue. The Redis layout it
// writes is the one described in docs/bullmq-wire.md, and the Lua scripts are
// our own, written from those facts and checked against Node.js BullMQ in the
// tests. It imports no other package of this module.
//
// # Publishing
//
// Publisher.Publish (watermill) and Publisher.Add add one job per message or
// Job: jobId = message UUID (the outbox event id), job name = metadata
// MetadataJobName ("event_type"), data = the payload as given (a JSON
// document, as Node.js workers JSON.parse it), remaining watermill metadata in
// the job hash field "wm" (ignored by Node.js). All jobs of one call travel in
// one pipelined round trip (EVALSHA, reloaded on NOSCRIPT). Job ids are
// validated as BullMQ requires (ValidateJobID). By default every job carries
// attempts and backoff for the worker, removeOnComplete Config.RemoveOnComplete
// (the newest 1,000 completed jobs of a queue stay) and removeOnFail with an age
// of Config.RemoveOnFailAge (24 hours), and its id is remembered for
// Config.DedupWindow (2 hours) in the queue's time-bucketed "dd:<bucket>" sets.
//
// A jobId is deduplicated while the job hash lives or its dedup window lasts:
// Add reports Duplicate (hash exists, any state) or Deduplicated (hash gone,
// id in a bucket, or a BullMQ de: key alive for a job with its own
// Deduplication option) and writes nothing; once both are gone the same id is
// a new job. Node.js producers get the same protection only when they pass
// deduplication {id: jobId, ttl}. Delivery is at least once in every case
// (redelivery, stalled recovery): handlers deduplicate on domain state.
//
// # Consuming
//
// Worker.Run takes jobs under a lock token, renews locks every
// LockDuration/2, runs the stalled check shared with Node.js workers, blocks
// on the queue marker when idle, honours meta paused / concurrency (global
// concurrency) and the global rate limit, and finishes jobs the way Node.js
// does: returnvalue, failedReason, stacktrace, finishedOn, atm/ats counters,
// events (completed, failed, retries-exhausted, delayed, waiting, stalled,
// drained), trimming of completed/failed by count and age, de: key cleanup.
// Finished jobs are settled in batches (one EVALSHA per batch), and the same
// call takes jobs for the freed slots, like BullMQ's "fetch next".
// Stacktrace entries written by the Worker are the error strings (Go errors
// carry no stack). A handler error retries with the job's fixed or
// exponential backoff (BullMQ's jitter is ignored) through
// the delayed set while attempts remain; Unrecoverable(err) fails at once;
// ErrHandBack returns the job to wait without counting an attempt; ErrAbandon
// leaves it to its lock. On shutdown Run stops taking jobs and waits
// ShutdownTimeout for running handlers, renewing their locks; then it cancels
// their context and leaves their jobs to their locks (never handed back while
// a call may be in flight). A failed renewal is tried again within the lock's
// remaining time; a job whose lock is lost has its handler cancelled and is not
// finished by this worker. Jobs with parents, priorities
// or delays added by Node.js are consumed, but flows (parent/child
// dependencies) and per-worker rate limiters are not supported.
//
// Subscriber adapts Worker to watermill: one Worker per Subscribe call on the
// queue named topic; Ack completes the job, Nack fails the attempt
// (retryable), a message still pending when its subscription ends is handed
// back.
//
// # Concurrency and ownership
//
// Publisher, Worker and Subscriber are safe for concurrent use; a Worker runs
// once at a time. The caller owns the Redis client: Publisher.Close and
// Subscriber.Close do not close it; close it after them.
//
// # Redis Cluster
//
// Every key of a queue must hash to one slot: put a hash tag in Config.Prefix
// ("{bull}": every queue on one node) or set Config.QueueHashTags, which
// wraps each queue name in braces on the Redis side ("bull:{orders}:wait":
// queues spread over the nodes). Config.QueueName is the one place that
// wrapping happens; every key this package builds goes through it, and a
// Node.js BullMQ Queue or Worker sharing the queue must be given
// QueueName(queue). On a *redis.ClusterClient, Validate refuses a Config
// that is not ClusterSafe. The scripts receive every queue key and every job
// key they know in advance in KEYS; keys of other jobs reached in Lua (jobs
// promoted from delayed, taken from wait, moved back by the stalled check or
// removed while trimming, and their ":lock" keys) are built from the queue's
// key prefix "<prefix>:<QueueName>:" passed in ARGV, which holds the hash tag,
// and so live in the queue's slot.
//
// # Tests and benchmark
//
// Tests need Redis (REDIS_URL, default redis://127.0.0.1:6379/0) and, for the
// interop tests, Node.js; the Node.js harness in tests/bullmqnode is
// installed with npm ci when node_modules is missing. TestClusterInterop runs
// the same interop tests on a three-node Redis Cluster (QueueHashTags, ioredis
// Cluster) that internal/redistest starts once per test binary from the
// installed redis-server and redis-cli:
//
//	go test -race -short ./infra/bullmq/...
//
// The benchmark adds 100,000 jobs with the Go publisher and with Node.js
// addBulk, then drains 100,000 jobs with the Go worker and with a Node.js
// Worker (concurrency 50), and prints the rates and ratios; run it from the
// module root:
//
//	go run ./infra/bullmq/cmd/bullmqbench
//	go run ./infra/bullmq/cmd/bullmqbench -publishers 4   # four concurrent Add callers
package bullmq

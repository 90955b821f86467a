// Package outbox is the transactional outbox (docs/architecture.md): the write side that
// records
// domain events in outbox_events inside the business transaction, the Dispatcher that
// delivers them to BullMQ queues (or any watermill publisher) at least once, the retention
// Cleaner, and the operators' Ops.
//
// # Write side
//
// EventPublisher implements port.EventPublisher. Publish must run inside the RLS
// transaction opened by postgres.InTx or the command bus (postgres.TxFromContext); it fails
// without one, and without a workspace scope. For that transaction it builds a watermill-sql
// Publisher on sql.TxFromPgx(tx) with SchemaAdapter, wrapped by forwarder.NewPublisher and
// used through a cqrs.EventBus: each event becomes one outbox_events row with id = the
// event's UUID (IdentifiedEvent, else a new UUIDv7; it is the BullMQ jobId), workspace_id =
// the transaction's scope, destination from the Router (unknown event type: ErrUnroutable),
// event_payload = the event's JSON, metadata = event type, aggregate, occurred_at and the
// correlation id and trace context carried by ctx (WithCorrelationID, WithTraceContext).
// Nothing here commits or rolls back: the rows commit with the business rows or not at all.
// Event payloads hold IDs, versions and immutable snapshots only (see domain.Event).
//
// # Delivery (Dispatcher)
//
// Nothing in the business transaction wakes a dispatcher: a NOTIFY there would take
// PostgreSQL's cluster-wide notify lock through the commit's WAL flush and serialize every
// event-emitting writer (sql/012 dropped the trigger that did). Workspaces with due rows are
// found, after the commit has returned, three ways (wakeup.go):
//   - in process: Publish registers a postgres.AfterCommit hook that queues the workspace on
//     a Dispatcher running in the same process on the same database;
//   - across processes: otherwise the hook tells PublisherConfig.Signal, a Wakeup that
//     coalesces the workspaces signalled while its previous send was in flight (and at
//     least WakeupConfig.MinInterval, 5ms, apart) into one Redis PUBLISH on the dispatchers'
//     channel (DispatcherConfig.WakeRedis, WakeChannel) or one pg_notify in a transaction of
//     its own (LISTEN, unless DisableListen);
//   - the poll: outbox_due_workspaces at start, on Wake, every BusyPollInterval (50ms) while
//     discoveries find work and, backing off, at most every PollInterval (1s) when idle. A
//     discovery looks at the events due since the previous one's start less 5 s
//     (discoveryMark), and at all of them at least once per FullClaimInterval and after
//     the claim's marks are forgotten, so that it does not visit the rows of the events
//     dispatched before (see the low-water mark below).
//
// A lost wake-up (Redis down, a crash between commit and send) delays delivery by at most
// PollInterval; no event is lost, because the rows are what the dispatchers read.
//
// Workspaces wait in a queue where each appears at most once (new ones before those
// continuing a backlog); a woken workspace is claimed as soon as a worker is free. A
// worker runs rounds: it takes up to RoundWorkspaces queued workspaces and, in one RLS
// transaction scoped to them, as app_user, claims due rows of each (pending with
// next_attempt_at ≤ now, not leased or with an expired lease; up to BatchSize, or the
// workspace's share of RoundEvents when smaller) with FOR UPDATE SKIP LOCKED, leases them
// with locked_by = the round's token and locked_until = now + Lease (unindexed columns:
// a HOT update; operators see a leased pending event as dispatching), and commits: one statement, one round trip, whatever the number of workspaces. A
// full batch puts the workspace back at the end of the FIFO, so a backlog in one workspace
// delays another workspace's events by at most one batch per busy workspace. Under load
// rounds fill up, so the round trips per event fall as the rate rises.
//
// Each workspace's claim scans outbox_events_due from a low-water mark the dispatcher keeps
// (lowWater: the lowest due time its last claim of the workspace took, at most 5 s before
// that claim's now()), not from the workspace's first entry: a dispatched event leaves a
// dead index entry that nothing can remove while an older snapshot is held (a long
// REPEATABLE READ transaction), and a scan from the first entry would walk all of them. What
// the mark may skip (an expired lease, an event another process released, a writer
// transaction longer than 5 s) is claimed by the workspace's first claim of each period of
// FullClaimInterval (default Lease; the periods are shifted per workspace, so that these full
// scans spread out), which starts at the first entry; and every mark is forgotten at once
// after this dispatcher releases events or fails to claim or mark.
//
// The statements that find a round's rows by id (the claim's own updates, the mark, the
// failed mark, the release) read the primary key (id = ANY of an array, never a join): the
// dispatcher's transactions plan with sequential and bitmap scans off (scope.go), since
// outbox_events' statistics describe a table of a few rows while its heap and indexes keep
// the size a held snapshot grew them to (a join, planned from those statistics, walked the
// whole primary key).
//
// Every statement on outbox_events and outbox_dispatched runs in a transaction that first scopes it with
// set_config(…, true): as app_user for the dispatcher and the Cleaner, as listing_operator
// for Ops. A transaction of one workspace sets app.workspace_id; the dispatcher's
// transactions, which span the workspaces of a round, set app.workspace_ids instead, a list
// that sql/014 and sql/018 let app_user use on the outbox's two tables only (every other table still needs
// app.workspace_id). On the dispatcher's hot path (claim, mark, release) each transaction
// goes to PostgreSQL as [BEGIN, set_config, statement, COMMIT] in one pgx.Batch, one round
// trip, and several such transactions can share the batch (inWorkspaces: the mark sends the
// dispatched and the failed rows' transactions together). Each is a transaction of its own: a
// failing one keeps nothing of itself, those before it stay committed, those after it do not
// run, and the failed one is rolled back on its connection before the connection returns to
// the pool. The local settings end with each transaction, so the pooled connection is
// returned unscoped. Claimed rows are used only after their commit has been confirmed. These
// transactions commit with synchronous_commit = off: a crash that loses one only causes a
// re-delivery (see Guarantees); the business transactions that insert the rows stay durable.
//
// The claimed rows are then published, grouped by destination, through the PublisherRouter:
// message UUID = event id, payload = the job envelope of docs/bullmq-wire.md ({event_id,
// workspace_id, event_type, payload, occurred_at, correlation_id, trace}), metadata
// event_type = job name.
// When a batch Publish fails, each message is published alone, so one failing event never
// fails the others; unless the destination looks unreachable (refused, reset, timed out):
// then the batch, or the rest of it, fails at once. Publishing stops at the round's deadline
// (Lease - Lease/5 after the claim), so a hanging destination cannot keep a round past its
// leases: what was not tried by then is released without an attempt counted. Published rows
// are marked dispatched in one statement per round, guarded by locked_by = token (a
// dispatcher whose lease expired cannot overwrite a newer claim): the statement moves them
// from outbox_events to outbox_dispatched, the insert-only log partitioned by day that the
// Cleaner's retention drops a day at a time. Failed
// rows get attempt_count+1 and go back to pending with exponential backoff with jitter
// (BackoffBase doubling up to BackoffMax), or to dead_letter after MaxAttempts, with a
// sanitized, bounded last_error (SanitizeError). A reclaimed expired lease also counts as an
// attempt.
//
// # Fair share
//
// DispatcherConfig.FairShare (FAIR_SHARE_SLOTS) admits at most Slots tasks of one workspace
// and lane into each of its Queues (the flows' request queues) at a time, across every
// dispatcher; the rest stays in the outbox. A lane is the store a request calls (the
// payload's FairShare.LaneField, "" for a request naming none): a store whose tasks wait for
// its rate limit in the slots they hold never holds back the workspace's other stores. The
// state is PostgreSQL's alone (sql/053, sql/062):
//   - outbox_fair_slots holds one row per admitted task: (workspace, queue, lane, slot
//     number 1..Slots) is unique, and so is (workspace, task). The claim statement (claimSQL)
//     takes a free slot of its lane for each claimed request of a fair-shared queue whose
//     task (the payload's FairQueue.TaskIDField) holds none; a request that finds no free
//     slot, or loses it to a concurrent claim of the same workspace, is held: status held,
//     held_task = its task, held_lane = its lane, its lease cleared. Held rows are out of outbox_events_due: no claim, discovery or
//     low-water mark walks them again (the claim's marks pass them like leased rows), so a
//     claim's cost does not grow with the held backlog; holding costs each event one update,
//     once. Not held: last looks (a payload with last_look), requests of a task that holds a
//     slot (the reconciler's redeliveries, a re-publication after a failed publish), requests
//     without a task id, and every event of another destination.
//   - A slot is freed when its task ends: every task table gets a trigger
//     (prepare_task_fair_share, AFTER UPDATE OF status leaving pending/running, AFTER DELETE)
//     that, in the transaction ending the task, deletes its slot, or, when the task held none
//     (it ended while its request was held), deletes its held requests (sql/067).
//   - The slot is refilled by the dispatcher: the worker that ended the task wakes the
//     dispatchers for its workspace (EventPublisher.TaskEnded, jobs.Config.TaskEnded), and
//     each round first gives the free slots of the held lanes it knows of its workspaces
//     (heldLanes: those its claims held rows of, and the sweep's listing) to their oldest
//     held events (refill, unholdSQL: pending, due now), which its claim then admits. A
//     round whose claim held rows gives their lanes' free slots at once after it (a row that
//     lost its slot to another dispatcher's claim). One claim of a workspace runs at a time
//     per dispatcher (wsQueue). A lane whose last claim was full and held rows is not
//     refilled (its claims give the free slots to the requests they read, oldest first),
//     and a refill walks a lane's held events after its front mark (heldLanes.front), not
//     from the index's first entry; TaskEnded wakes a workspace at most once per
//     TaskEndedGap.
//   - A lane alone (no other workspace known to have events held in its queue) takes up to
//     FairShare.AloneFactor × Slots slots; once another has, it takes none above Slots
//     (claimSQL counts the lane's slots taken, whatever their numbers).
//   - The sweep (sweepFairShare, every FairShare.SweepInterval) walks the (workspace, queue,
//     lane) triples with held events (outbox_held_lanes, a loose index scan), gives each
//     one's free slots to its oldest held events (a refill a lost wake-up missed), frees the
//     slots of a full queue older than StaleSlotAge whose task is no longer pending or
//     running (a task that ended before its request was claimed), and, with fair share off,
//     releases every held event (BatchSize per pair and pass).
//
// A job lost with Redis, or with its worker, keeps its task unfinished and so its slot: the
// stalled check or the reconciler delivers the task again (through at once: it holds a slot),
// and its end frees the slot. The reconciler counts held requests as owed (outbox_owes_task).
//
// Finding and dropping a workspace's held requests: they are the rows of outbox_events with
// status = 'held' of the workspace (index outbox_events_held: workspace_id, destination,
// held_lane, created_at), held_task naming the task each asks for (index
// outbox_events_held_task). Ending a task that holds no slot (any status but pending and
// running, in its table) drops its held requests in the same transaction; nothing else needs
// to touch them. listing_fair_share_held{flow} counts
// them (outbox_held_counts).
//
// # Guarantees
//
// Delivery is at least once: a dispatcher that dies after publishing and before marking
// leaves the rows leased; after the lease expires another claim publishes them again
// under the same id (BullMQ ignores a jobId it still holds). Consumers must deduplicate on
// domain state. No order is guaranteed across batches. Any number of dispatchers may run on
// one database. On shutdown (Run's context cancelled) a Dispatcher stops claiming, finishes
// the publishes in flight and marks them, or releases claims it has not published yet
// (pending, unlocked, no attempt counted).
//
// # Ownership
//
// The Dispatcher uses but never closes the pool and the publishers its router returns; the
// caller closes them after Run returns. Cleaner and Ops only use the pool. Logs never
// contain payloads; errors are wrapped with the operation (outbox.Dispatcher.claim: …).
package outbox

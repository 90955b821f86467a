// Package console is the operator console (`app console`, and `app all`): server-rendered
// HTML pages for operators, not tenants, that show the outbox, the BullMQ queues and
// operations across workspaces, and act on them.
//
// # Pages
//
//   - / is the overview: one row per flow now (tasks waiting and running, the oldest waiting
//     task's age, jobs in its queue, failures of the last hour) and one for the outbox (owed,
//     the oldest owed event's age, delivered in the last sampled minute); charts of the last
//     hour per minute or the last day per ten minutes, for every flow or one: operations
//     accepted, succeeded and failed, commit → job start and commit → finish (p50, p99),
//     tasks and jobs waiting, redeliveries and last looks, events delivered and owed. It
//     reloads itself every minute (a meta refresh, no script) and links to every page;
//   - /failures and /workspaces: failed operations across workspaces (filters flow, code,
//     since), the workspaces with the largest backlogs and their pages;
//   - /outbox: totals per status, destination and workspace, the oldest pending age, dead
//     letters across workspaces with their sanitized error, attempts and redrive history, the
//     latest redrives and purges; redrive and purge forms (reason required); /outbox/event
//     shows one event's status;
//   - /queues: a table of every BullMQ queue first (its counts by state, the oldest waiting
//     job's age), then per queue the counts by state, the oldest waiting job's age, failed jobs
//     with their failedReason and stack, those of one operation (an attempt and its last
//     look) shown as one failure; retry and remove forms (reason required);
//   - /operations: one operation by id, or a workspace's recent failed operations.
//
// Every page is plain HTML (html/template, embedded) and works without JavaScript; the
// Content-Security-Policy allows no script at all.
//
// # Data and roles
//
// The Server reads and writes PostgreSQL as listing_operator (OPERATOR_DATABASE_URL): the
// cross-workspace reads go through the SECURITY DEFINER functions of sql/011 (owned by the
// NOLOGIN listing_inspector, executable by listing_operator only), redrive and purge through
// infra/outbox.Ops, one workspace's rows at a time under RLS, recorded in outbox_redrives and
// outbox_purges with the operator's name. Queue actions (infra/bullmq RetryJob and RemoveJob)
// are recorded in operator_actions in the transaction that wraps them. Every action is also
// logged with the operator's name.
//
// # The overview's samples
//
// The charts read per-minute samples (sql/050, sql/054: overview_flow_samples,
// overview_outbox_samples, kept two days) that Server.RunSampler writes, ten seconds after
// each minute ends, in the console process (`app console` and `app all`): from the log of
// delivered events (a minute's rows, over its BRIN index, counted; beyond them at most 1,000
// primary-key reads of operations per flow for the latencies and 1,000 probes of the log for
// the redeliveries, of events drawn at random, the sample sizes kept with the sample), the
// task tables' unfinished and failed partial indexes, the outbox's live table and the
// queues' lengths in Redis. Nothing the service writes pays for them. Several consoles may
// sample: a minute already written is left alone.
//
// # Authentication
//
// Operators come from CONSOLE_TOKENS (name → secret). A browser signs in with a form that
// takes the secret and gets a session cookie (HttpOnly, SameSite=Strict, Secure over TLS)
// holding a random 32-byte session id. Sessions live in console_sessions (sql/028: the id's
// SHA-256, the operator, a check bound to a digest of the operator's secret, expiry,
// revocation), so every console process shares them and a restart keeps them. Every request
// looks its session up: a session that is unknown, revoked (sign-out), expired
// (Config.SessionTTL) or whose operator's secret changed is refused. A script sends
// `Authorization: Bearer <secret>` with each request.
//
// Wrong secrets, from the form or Bearer, count against the client's address (an IPv6 client:
// its /64; forwarded headers are not trusted) in console_signin_failures: after
// Config.SigninFailures within Config.SigninWindow the address gets 429 with Retry-After, its
// secret not even compared, until the oldest failure leaves the window. An attempt counts as a
// failure from the moment it is admitted until it turns out right, so concurrent guesses
// cannot overrun the budget; no other address is affected, so a stranger cannot lock an
// operator out. Without operators (development only:
// New refuses it in production) the console serves loopback clients whose Host header is a
// loopback name too (against DNS rebinding), as the operator "dev", with a session issued on
// first visit.
//
// # CSRF
//
// Every POST from a session must carry the session's CSRF token (an HMAC keyed by the
// session's random id) in the hidden field "csrf"; Bearer requests need none (browsers never add that
// header by themselves). http.CrossOriginProtection rejects cross-origin browser POSTs before
// that, and the cookie is SameSite=Strict.
package console

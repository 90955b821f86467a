// Package commandstream consumes the commands other services send as messages: CloudEvents on
// the Redis stream <prefix>:commands, read through a consumer group, each signed by an
// integration principal, executed through the same command bus as HTTP (RLS transaction,
// idempotency, outbox), and answered on <prefix>:command-replies.
//
// # Entries
//
// A command entry has two fields: event, the CloudEvent's JSON bytes (type listing.<command>,
// data the HTTP endpoint's body plus the path's ids by name, extensions workspaceid and
// integrationid), and signature, the hex HMAC-SHA256 of exactly those bytes under the
// integration's secret. A reply entry has one field, event: a CloudEvent of type
// listing.command.accepted (data: the endpoint's response body, with the operation) or
// listing.command.rejected (data: the problem+json body), with extension correlationid = the
// command's id once its sender is authenticated, the entry id otherwise (never an id the
// entry claims).
//
// # Contract
//
//   - Authentication comes first: an unsigned entry, an unknown integration, one of another
//     workspace than the workspaceid claimed (RLS finds none), a bad signature and a revoked
//     integration are all rejected with COMMAND_UNAUTHENTICATED, before anything runs. The
//     command's own transaction checks again (Guard: the integration's row locked FOR SHARE,
//     live): a revocation waits for the commands in progress, and none runs after it.
//   - A command's time is required: one without, older than MaxAge or more than MaxAhead
//     ahead is rejected COMMAND_EXPIRED, after its idempotency record was looked up (the
//     Expiry middleware runs inside the idempotency guard): a command that ran is answered
//     from its record, any other is refused. MaxAge + MaxAhead below the record's retention
//     means a signed entry cannot run again once its record is gone.
//   - Each command runs once per (source, id): the idempotency key is the UUIDv5 (namespace
//     URL) of source + "/" + id, the method MSG, the path the command's type, the user the
//     integration's. A second delivery is answered from the idempotency record: the same
//     status and body, so both replies carry equal data.
//   - Bad messages (no event field, not a CloudEvent, unknown type, invalid data) are
//     answered with a rejected reply, acknowledged and counted; they never block the stream.
//   - An entry is acknowledged only after its reply is in the replies stream. A consumer that
//     crashes in between leaves the entry pending; after ClaimIdle any consumer of the group
//     takes it back (XPENDING + XCLAIM) and runs it again, which the idempotency store turns
//     into a replay of the committed result. Replies are therefore at least once: a sender
//     deduplicates them on correlationid.
//   - A transient refusal (the database unavailable, the same command in progress elsewhere)
//     sends no reply and leaves the entry pending, to be taken back after ClaimIdle; the
//     MaxDeliveries-th delivery answers whatever it gets and is acknowledged, so nothing loops.
//
// Replies do not go through the outbox. An accepted command's reply is derived from its
// idempotency record, which commits with the command: as long as the command entry is pending
// in Redis the reply cannot be lost, and the entry stays pending until the reply is written.
// What the outbox would add is a reply that survives the loss of Redis's data between the
// commit and the reply; the same loss also drops the command stream and the replies already
// written, so the sender has to send again anyway, and a command sent again with the same
// source and id is answered from the record (for IDEMPOTENCY_RETENTION).
//
// The consumer is written on go-redis rather than watermill-redisstream's subscriber: that
// subscriber stops consuming when an entry does not unmarshal (a bad message would block the
// stream) and hides the entry id that a reply to an unparsable command must carry.
package commandstream

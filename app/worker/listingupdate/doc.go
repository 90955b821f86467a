// Package listingupdate handles the listing-update queue: a listing update
// (domain.ListingUpdateRequested) replaces the content of a published product's platform
// listing with one product revision, the update's Snapshot, through the gateway's PUT
// /v1/products/{external_product_id} with the update id as Idempotency-Key.
//
// A replacement is idempotent but not ordered: the platform keeps whatever request it applied
// last. So the handler deduplicates on domain state, the publication's row, and never on the
// queue's promises (BullMQ may deliver a job twice, late, or after a newer one):
//
//   - domain.Publication.PushedRevision is the highest revision the platform is known to
//     hold. The first publish's record step sets it to the published revision; each update's
//     record step raises it to the update's revision. It never goes down.
//   - domain.Publication.SentRevision is the highest revision whose PUT may have been sent
//     (its outcome perhaps unknown: a crash, a time-out). It is raised when an update takes
//     the claim below, before its PUT, and never goes down.
//   - domain.Publication.Push is the claim: the update allowed to send a PUT now, until a
//     lease ends (pushing_update_id, pushing_until). At most one update holds a live claim.
//
// The rule, applied in the begin step under the publication's row lock (the update's row is
// locked first, then the publication's: every path takes them in that order):
//
//  1. An update whose revision is <= PushedRevision, or < SentRevision, sends nothing: the
//     platform holds that revision or a later one already, or a later one may be landing.
//     It succeeds with outcome "superseded" (the operation's result says so, with the
//     revision the platform holds). Out-of-order delivery therefore never regresses the
//     listing: an older revision is never sent after a newer one was.
//  2. Otherwise, when another update holds a live claim, this delivery waits: the begin step
//     fails with LISTING_UPDATE_BUSY and a Retry-After of the claim's remaining lease (at
//     most a quarter of a lease), which the engine turns into a snooze (no attempt spent;
//     past the snooze bounds it counts as an attempt, see worker.Flow). Nothing is sent.
//  3. Otherwise the update takes the claim (a claim of its own, from an earlier delivery, is
//     renewed; another update's expired claim is taken over), SentRevision becomes at least
//     its revision, and the call step sends the PUT.
//
// The record step, under the publication's row lock again, raises PushedRevision to the
// update's revision and releases the claim if it is still the update's; the update succeeds
// with outcome "pushed". A final failure releases the claim too (Tasks' OnFail), and so does
// a PUT the gateway refused with a Retry-After (429, or 503 with Retry-After: not applied),
// so that other updates need not wait while this one is snoozed. Any other failed PUT keeps
// the claim until the update's retry or the end of the lease: its outcome is unknown.
//
// The lease rule: Config.Lease must be longer than the marketplace adapter's time-out of one
// call (platform.Config.Timeout; cmd/app uses 4 × PLATFORM_TIMEOUT), with a margin for
// clock skew between workers. A claim is taken over only after its lease ended, when the
// holder's PUT has either completed or been abandoned by its own time-out: a dead or stalled
// worker's PUT cannot land after the PUT of the update that took over. (A worker paused for
// longer than the margin after sending, or a gateway that applies a request long after its
// client gave up, is outside what a lease can guard.)
//
// What each case does:
//
//   - A replayed HTTP request returns the same update (the idempotency layer): no new job.
//   - A redelivered job of a finished update does nothing (the engine skips finished tasks).
//   - A redelivery after a crash between the begin step and the PUT, or between the PUT and
//     the record step, finds the update running and its own claim: it sends the same PUT with
//     the same Idempotency-Key (a gateway that honors it answers from its saved response; one
//     that ignores it applies the same content again), unless rule 1 now holds.
//   - Two updates delivered at once: the second waits for the first's claim (rule 2), then
//     either is superseded (rule 1) or pushes its newer revision.
//   - A newer update pushed first: the older one is superseded (rule 1).
//
// Limit: an update superseded by rule 1 because of SentRevision relies on the update that
// raised it to finish its push. If that update fails for good instead, the platform may keep
// an older revision than the superseded update's; its failed operation says so, and a new
// update request (of the product's current revision) pushes it.
//
// The store must still be verified (else STORE_NOT_VERIFIED) and the publication published
// (else PUBLICATION_NOT_PUBLISHED): both are refused in the begin step, without a call.
// Credentials never appear in errors, logs, operations or events.
package listingupdate

// Package publish handles the listing-publish queue: the first publish of a product to a
// store (domain.PublicationRequested) creates exactly one platform product per
// publication, however often and however concurrently the job is delivered
// (docs/guarantees.md, 6).
//
// Contract of Handler.Handle, one job = one domain.Publication:
//
//   - Step A (one RLS transaction): the publication is loaded under a row lock. A finished
//     publication ends the job: no platform call at all, even when the first job completed
//     long ago and was removed from Redis. When the store is not verified, the publication
//     and its operation fail with STORE_NOT_VERIFIED in the same transaction and the job
//     fails permanently. Otherwise the publication and the operation start, and the store's
//     sealed credentials are read. What is published is the publication's snapshot, never
//     the product's current content (see Content).
//   - Outside any transaction: the credentials are opened; the platform is asked for a
//     product whose external_ref is the publication id (FindProductByExternalRef). Found:
//     it is the product, nothing is created. Not found: CreateProduct with the publication
//     id as both Idempotency-Key and external_ref. When CreateProduct fails its outcome is
//     unknown (the gateway may have created the product and then failed), so the handler
//     looks up by external_ref once more before giving the error back.
//   - Step B (one RLS transaction): compare-and-set — a publication already finished is left
//     alone; otherwise it succeeds with ExternalProductID and the operation succeeds with
//     {"publication_id", "external_product_id"}.
//
// What guarantees one platform product per publication:
//
//   - Redelivery after Step B: Step A sees the finished publication; no platform call.
//   - Redelivery after a crash between CreateProduct and Step B (or after an error whose
//     outcome is unknown): the lookup by external_ref finds the product created before, so
//     nothing is created again. This holds for a gateway that ignores Idempotency-Key.
//   - Two deliveries at once in one process (one Handler): the Handler serializes the jobs
//     of one publication, so the second waits and then finds the publication finished.
//   - Two deliveries at once in different processes (BullMQ runs a job on one worker at a
//     time; two copies overlap only when a stalled job's lock expired while its worker was
//     still running it, or had died with its call in flight): the call is fenced
//     (Config.CallTimeout, worker.Flow.CallTimeout), so the second, meeting the publication
//     running before the first call's deadline, waits until that call has ended, then looks
//     up and finds its product. What remains is a create that the gateway applies after its
//     client's time-out, past the deadline: both may then create with the same
//     Idempotency-Key; a gateway that honors the key answers the second with the first
//     product, one that ignores it can create two. Step B still records only the first
//     result.
//
// Content: a publication publishes the revision it was requested with
// (domain.Publication.ProductRevision, also in the event) and nothing else. The command that
// requests it reads the product once and stores that revision's content on the publication
// (domain.Publication.Snapshot) in the same transaction; the create request is built from the
// stored publication alone, so drafts saved after the request are not published, and every
// delivery — a retry, a redelivery after a crash, an overlapping one — sends the same
// request with the same Idempotency-Key. The product's current revision does not matter:
// updating a published listing to a later draft is not this flow. A publication stored
// without a snapshot (requested before snapshots existed) gets one in Step A from the
// product when the product is still at the requested revision; otherwise that revision's
// content is lost. Never started, the publication and its operation then fail with
// PRODUCT_REVISION_UNAVAILABLE in the same transaction, with no platform call (a new request
// publishes the current revision). Already started by an earlier delivery, the publication
// first looks for the product that delivery may have created (by external_ref) and records
// it; only when there is none does it fail with PRODUCT_REVISION_UNAVAILABLE. Nothing is ever
// created from another revision.
//
// Steps A and B are the begin and record steps of the task lifecycle (worker.Flow), which
// also owns the error policy: an upstream Retry-After snoozes the job, other rate limits and
// transient failures are retried, and a permanent error or the last attempt fails the
// publication and the operation with a client-safe code (worker.FailureOf).
// Credentials that cannot be opened fail at once with CREDENTIALS_UNREADABLE. Credentials
// never appear in errors, logs, operations or events: logs carry ids only.
package publish

// Package transfer handles the material-transfer queue: copying collected material from a
// source URL into our storage as a new media, started by
// domain.MaterialTransferRequested.
//
// Contract. For each delivery the Handler
//
//  1. Step A (one RLS transaction): loads the domain.MaterialTransfer with a row lock; a
//     finished transfer ends the delivery with nothing done. Otherwise it starts the
//     transfer (counting the attempt) and its operation.
//  2. Outside any transaction: the object key is fixed by the transfer
//     (domain.MediaObjectKey of the transfer's MediaID). When an object already exists there
//     with a size (a previous delivery stored it and crashed before recording), it is used
//     as is and nothing is downloaded. Otherwise Fetcher.Fetch streams the source (at most
//     MaxBytes) into ObjectStorage.Put at that key; the content type stored with it is
//     sniffed from the first bytes.
//  3. Step B (one RLS transaction): compare-and-set on the transfer (Stored, Bytes,
//     succeeded); the media row is inserted (id = the transfer's MediaID, Source "transfer",
//     status "processing", content type as sniffed, size = the bytes stored) with a new
//     media processing operation ("media.processing", pending) and domain.MediaTask, and
//     domain.MediaUploadCompleted is published, so the media-processing flow validates the
//     bytes and derives the variants exactly as for an upload (a source that is not an
//     image ends as a rejected media, not as a failed transfer). The processing task's and
//     operation's ids are derived from the transfer id (UUIDv5), and an insert that finds its
//     row already there is taken as done. The transfer's operation succeeds with
//     {"transfer_id", "media_id", "bytes", "processing_operation_id"}.
//
// Failures. SSRF refusals (SOURCE_URL_FORBIDDEN), invalid URLs (SOURCE_URL_INVALID), 4xx
// answers (SOURCE_REJECTED), an empty source (SOURCE_REJECTED) and a source larger than
// MaxBytes (SOURCE_TOO_LARGE) are permanent: the transfer and its operation fail with the
// code at once and Handle returns a worker.Permanent error. An unreachable source, 5xx,
// 429 or timeout (SOURCE_UNREACHABLE) and storage outages are returned for BullMQ to retry;
// on the last attempt they are recorded the same way. No media row exists for a failed
// transfer. Source URLs, storage keys and raw error causes never reach an operation, a log
// line or a returned error.
//
// Re-entrancy. A redelivery before the object is stored downloads (again); one after the
// object was stored but before Step B finds it by Stat and does not download; one after
// Step B finds the transfer finished and does nothing. Concurrent deliveries serialise on
// the transfer's row lock in Step B: the second finds it finished.
package transfer

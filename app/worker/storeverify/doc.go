// Package storeverify handles the store-verification queue: it checks one version of a
// store's credentials against the marketplace (domain.StoreVerificationRequested) and
// records the answer on the verification, the store and the operation.
//
// Contract of Handler.Handle, one job = one domain.StoreVerification:
//
//   - Step A (one RLS transaction): the verification is loaded under a row lock. A finished
//     verification ends the job (nothing to do). When the store's credentials were replaced
//     since the verification was requested (its CredentialsVersion is no longer the
//     store's), the verification and its operation fail with CREDENTIALS_REPLACED in the
//     same transaction and the job ends without calling the platform: the newer
//     verification decides. Otherwise the verification and the operation start, and the
//     sealed credentials (read in one statement with their version), the platform and the
//     shop id are read.
//   - Outside any transaction: the credentials are opened with the CredentialCipher (bound
//     to workspace and store by port.CredentialsAD) and Marketplace.VerifyStore is called.
//     The call is read-only, so repeating it is harmless.
//   - Step B (one RLS transaction): the verification succeeds with Valid set (compare-and-
//     set: a verification already finished is left alone and nothing else changes), the
//     store records the result unless its credentials were replaced meanwhile
//     (Store.RecordVerification ignores a stale version), and the operation succeeds with
//     {"store_id", "valid", "message"}. The platform's reason text goes to the store's
//     status_reason only (the adapter bounds and sanitizes it); the operation carries a
//     fixed message.
//
// Re-entrancy: a redelivery before Step A's commit repeats nothing; between Step A and
// Step B it starts again (one more attempt) and calls VerifyStore again (read-only); after
// Step B it finds the verification finished and stops.
//
// Steps A and B are the begin and record steps of the task lifecycle (worker.Flow), which
// also owns the error policy: an upstream Retry-After snoozes the job, other rate limits and
// transient failures are retried, and a permanent error or the last attempt fails the
// verification and the operation with a client-safe code (worker.FailureOf). Credentials that cannot be opened or parsed
// fail at once with CREDENTIALS_UNREADABLE. Credentials never appear in errors, logs,
// operations or events: logs carry ids only.
package storeverify

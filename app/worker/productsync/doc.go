// Package productsync holds the job handler of the product-sync queue: a full sync of a
// store's online products into platform_products, page by page.
//
// Contract: Handler.Handle receives a domain.ProductSyncRequested. It loads the sync, starts
// it and its operation, reads the store's sealed credentials (a store that is not verified
// fails the sync with STORE_NOT_VERIFIED) and then, page after page, fetches one page from
// the marketplace outside any transaction and records it in one RLS transaction: the page's
// products are upserted and the sync's next page token, pages done and items synced move on
// together. The page without a next token finishes the sync and its operation, with the
// result {"sync_id", "pages", "items"}.
//
// Re-entrancy (a job may be delivered again at any point of an earlier delivery):
//   - before anything was recorded: the redelivery starts the same sync again (one more
//     attempt) from its first page;
//   - between fetching a page and recording it: the page was not recorded, so the
//     redelivery fetches it again (listing is read-only) and records it once;
//   - after a page was recorded: the redelivery resumes from the saved next page token, never
//     from the start;
//   - after the sync finished: the redelivery sees a finished task and does nothing.
//
// Every page is recorded with compare-and-set on the position it was fetched from (the saved
// token and pages done). When another delivery recorded that page meanwhile, nothing is
// written and the handler continues from the position the database holds, so a page is never
// counted twice.
//
// Errors: rate limits (429) and transient marketplace or database failures are returned so
// the queue retries with backoff; permanent ones (rejected credentials, an unverified store,
// undecryptable credentials) and any failure of the last attempt fail the sync and the
// operation with a client-safe code (worker.FailureOf), never the raw external error.
// Credentials are opened only in memory, right before the calls, and never logged; credentials
// that cannot be opened fail the sync at once with CREDENTIALS_UNREADABLE (worker.OpenCredentials).
package productsync

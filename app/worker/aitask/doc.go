// Package aitask holds the job handler of the ai-task queue: text, category and image tasks
// about a product, run through an OpenAI-compatible provider (docs/external-systems.md:
// no duplicate calls, no double billing).
//
// Contract: Handler.Handle receives a domain.AITaskRequested (the stored task's kind and
// product are authoritative, not the payload's). It loads the task and starts it and its
// operation in one RLS transaction; then, outside any transaction, calls the provider once
// with the task id as Idempotency-Key and a request built from the stored task alone (see
// Content):
//   - text: a chat completion (Config.TextModel) of the client's instruction about the
//     product; output {"text": "..."};
//   - category: a chat completion asking for one category path; output {"category":
//     "A > B > C"};
//   - image: an image generation; the bytes are stored at ImageKey(workspace, task), a pure
//     function of the two ids, so storing twice overwrites; output {"image": {"content_type",
//     "size"}} (never the storage key: the output is shown to clients).
//
// Then, in one transaction, the task succeeds with its output and the provider's request id,
// the usage is recorded in the billing ledger (port.AILedger.Record: insert or nothing) and
// the operation succeeds with {"ai_task_id"}.
//
// Re-entrancy (a job may be delivered again at any point of an earlier delivery):
//   - before the provider call: the redelivery makes the call;
//   - after the provider call, before recording: the redelivery calls again with the same
//     Idempotency-Key and the same request, so a provider that honors the key answers from
//     its cache without running or billing the model again, and the result is recorded once;
//   - after recording: the redelivery sees a finished task and calls nothing.
//
// The ledger holds exactly one row per task: the step that finishes the task, successfully or
// not, records it (a failed task with the usage known, zero when the provider gave no
// answer), and a finished task is never finished again.
//
// Errors: rate limits and transient provider, storage or database failures are returned so
// the queue retries with backoff; permanent ones (a rejected request, the service's key
// refused, an unusable answer) and any failure of the last attempt fail the task and the
// operation with a client-safe code (worker.FailureOf), never the provider's error text.
// Prompts and outputs are never logged.
//
// Content: a task is about the product as it was when the task was requested. The command
// stores a snapshot of the product's content on the task (domain.AITask.Snapshot) in the
// transaction that creates it, and the provider request is a pure function of the stored
// task (kind, the client's instruction, the snapshot): the product's current content is never
// read. Drafts saved after the request, even between a delivery that reached the provider
// and its redelivery, change nothing: every delivery sends the same request with the same
// Idempotency-Key. A task stored without a snapshot (requested before snapshots existed)
// gets one, once, from the product's content in the transaction that starts it; from then
// on the same holds.
package aitask

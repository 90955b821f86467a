// Package commands holds the write side, one file per command (create_store.go for
// CreateStore, …): the command type, its result when it has one of its own, its
// <Command>Handler, the handler's constructor New<Command>Handler (which panics on a nil
// dependency) and Handle, nothing else. What several commands share lives in start.go
// (starting asynchronous work: an operation, its task and their events; the pre-checks two
// commands take alike) and auth.go (sessions). app.Application lists the handlers.
//
// Handlers run inside the transaction the command bus opened (see app/bus): they read and
// change domain state through ports bound to that transaction and publish domain events
// through the outbox port; they never call external systems. A check that needs one (the
// uploaded object's size, a source URL's addresses) runs before the command, outside the
// transaction, and its result travels in the command (see CompleteMediaUpload and
// CreateMaterialTransfer).
package commands

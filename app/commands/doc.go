// Package commands holds one file per command: the command type, its result and its handler.
// Handlers run inside the transaction the command bus opened (see app/bus): they change
// domain state through ports bound to that transaction and publish domain events through the
// outbox port; they never call external systems.
package commands

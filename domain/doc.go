// Package domain holds the entities, state machines, domain events and domain errors of the
// listing service. It imports only the standard library and github.com/google/uuid: it knows
// nothing of HTTP, PostgreSQL, Redis or BullMQ.
package domain

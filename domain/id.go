package domain

import "github.com/google/uuid"

// NewID returns a new id for a row the service creates: a UUIDv7, whose first 48 bits are
// the creation time in milliseconds and the rest random. Ids in creation order keep the
// inserts of every index led by an id (primary keys, the outbox log's index on aggregates)
// on the index's newest pages, instead of spread over all of them, which after each
// checkpoint would write a whole page to the WAL per insert. An id tells its creation time
// to whoever sees it; it grants nothing (access is by workspace membership and RLS).
func NewID() uuid.UUID {
	return uuid.Must(uuid.NewV7())
}

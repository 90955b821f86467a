package domain

import (
	"time"

	"github.com/google/uuid"
)

// Event is a domain event: a fact that happened to an aggregate, published in the transaction
// that made it happen and delivered at least once through the outbox.
//
// Payload contract (seed §3): an event carries IDs, versions and immutable snapshots only,
// never a credential, cookie, password, presigned URL or storage key. Workers read the full
// data in their own RLS transaction. RegisterEvent lets a test walk every event type.
type Event interface {
	// EventType is the stable, past-tense name, e.g. "store.verification_requested". It is
	// the BullMQ job name.
	EventType() string
	// AggregateType and AggregateID name what the event is about, e.g. "store", "<uuid>".
	AggregateType() string
	AggregateID() string
}

// EventEnvelope is an Event with the identity the outbox gives it.
type EventEnvelope struct {
	ID          uuid.UUID // outbox_events.id, the BullMQ jobId
	WorkspaceID uuid.UUID
	OccurredAt  time.Time
	Event       Event
}

var eventSamples []Event

// RegisterEvent records a sample of an event type so that tests can inspect every type's
// fields (see the payload contract on Event). Call it from an init function beside the type.
func RegisterEvent(sample Event) { eventSamples = append(eventSamples, sample) }

// RegisteredEvents returns one sample of every registered event type.
func RegisteredEvents() []Event { return append([]Event(nil), eventSamples...) }

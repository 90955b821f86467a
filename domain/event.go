package domain

import (
	"sort"
	"time"

	"github.com/google/uuid"
)

// Event is a domain event: a fact that happened to an aggregate, published in the transaction
// that made it happen and delivered at least once through the outbox.
//
// Payload contract: an event carries IDs, versions and immutable snapshots only,
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

// IntegrationEvent describes a domain event type that is also an integration event: other
// services may consume it (as a CloudEvent whose type is the event type, on the integration
// event stream; docs/events.md is generated from these descriptions). Its payload is then a
// public contract: fields may be added, never renamed, retyped or removed.
type IntegrationEvent struct {
	// Sample is a value of the event type (its fields make the event's JSON Schema).
	Sample Event
	// Doc says, for the catalogue, when the event is published and what it means.
	Doc string
}

var integrationEvents = map[string]IntegrationEvent{}

// RegisterIntegrationEvent declares sample's event type an integration event (and registers
// it with RegisterEvent). Call it from an init function beside the type; a type declared
// twice panics.
func RegisterIntegrationEvent(sample Event, doc string) {
	t := sample.EventType()
	if _, dup := integrationEvents[t]; dup {
		panic("domain: integration event " + t + " declared twice")
	}
	integrationEvents[t] = IntegrationEvent{Sample: sample, Doc: doc}
	RegisterEvent(sample)
}

// IntegrationEvents returns every integration event type, ordered by event type.
func IntegrationEvents() []IntegrationEvent {
	out := make([]IntegrationEvent, 0, len(integrationEvents))
	for _, e := range integrationEvents {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Sample.EventType() < out[j].Sample.EventType() })
	return out
}

// IsIntegrationEvent reports whether eventType was declared with RegisterIntegrationEvent.
func IsIntegrationEvent(eventType string) bool {
	_, ok := integrationEvents[eventType]
	return ok
}

package domain

import (
	"encoding/json"
	"fmt"
)

// LastLookRequested asks a worker to take a task's last look before it records a final
// failure: to ask the upstream whether the work was done after all (a publication's
// product found by its external_ref) and record success if so, the held failure (Code,
// Message) otherwise. It travels as the task's request event: the same event type (so the
// same job queue), aggregate and fields, with "last_look" added; the outbox gives it an id of
// its own. It is published, in the transaction that decides the failure, instead of the
// failure.
type LastLookRequested struct {
	// Request is the task's request event (Requested.RequestEvent).
	Request Event
	// Code and Message are the client-safe failure recorded when the look finds nothing.
	Code    string
	Message string
}

// LastLookField is the JSON field a LastLookRequested adds to its request event's payload.
const LastLookField = "last_look"

// EventType implements Event: the request's.
func (e LastLookRequested) EventType() string { return e.Request.EventType() }

// AggregateType implements Event: the request's.
func (e LastLookRequested) AggregateType() string { return e.Request.AggregateType() }

// AggregateID implements Event: the request's.
func (e LastLookRequested) AggregateID() string { return e.Request.AggregateID() }

// LastLook is the held failure a LastLookRequested carries in its payload.
type LastLook struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// MarshalJSON writes the request's fields and LastLookField.
func (e LastLookRequested) MarshalJSON() ([]byte, error) {
	raw, err := json.Marshal(e.Request)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("domain.LastLookRequested: %s is not a JSON object: %w", e.Request.EventType(), err)
	}
	look, err := json.Marshal(LastLook{Code: e.Code, Message: e.Message})
	if err != nil {
		return nil, err
	}
	fields[LastLookField] = look
	return json.Marshal(fields)
}

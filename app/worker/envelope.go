package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Envelope is the data of every job, whatever the transport carries it (the BullMQ job's
// data, a GoChannel message's payload): the outbox event it delivers, as JSON. Node.js
// workers read the same document. The payload holds ids and versions only.
type Envelope struct {
	// EventID is the outbox event id, which is also the job id.
	EventID     string          `json:"event_id"`
	WorkspaceID string          `json:"workspace_id"`
	EventType   string          `json:"event_type"`
	Payload     json.RawMessage `json:"payload"`
	OccurredAt  time.Time       `json:"occurred_at"`
	// CorrelationID is the id of the request that caused the event; may be empty.
	CorrelationID string `json:"correlation_id,omitempty"`
	// Trace is the W3C trace context of that request; may be absent.
	Trace *Trace `json:"trace,omitempty"`
}

// Trace is a W3C trace context.
type Trace struct {
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// DecodeEnvelope reads job data. Data that is not an envelope with a workspace id can never
// be handled: the error is Permanent.
func DecodeEnvelope(data []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(data, &e); err != nil {
		return Envelope{}, Permanent(fmt.Errorf("job data is not a job envelope: %w", err))
	}
	if _, err := uuid.Parse(e.WorkspaceID); err != nil {
		return Envelope{}, Permanent(errors.New("job envelope: bad workspace_id"))
	}
	return e, nil
}

// Delivery is what a transport knows of one delivery of a job, besides its envelope.
type Delivery struct {
	// ID is the job id.
	ID string
	// Attempt counts deliveries that ran a handler, this one included, from 1; snoozed
	// deliveries do not count.
	Attempt int
	// Attempts is how many attempts the job may take (at least 1).
	Attempts int
	// Snoozes counts the earlier deliveries that were snoozed, and Snoozed their total delay.
	Snoozes int
	Snoozed time.Duration
	// EnqueuedAt is when the transport received the job (zero: unknown; the envelope's
	// OccurredAt stands in).
	EnqueuedAt time.Time
}

// Job builds the Job of this delivery of e.
func (e Envelope) Job(d Delivery) Job {
	ws, _ := uuid.Parse(e.WorkspaceID) // checked by DecodeEnvelope
	attempts := max(d.Attempts, 1)
	j := Job{ID: d.ID, WorkspaceID: ws, EventType: e.EventType, Payload: e.Payload,
		Attempt: d.Attempt, LastAttempt: d.Attempt >= attempts, Snoozes: d.Snoozes, Snoozed: d.Snoozed,
		CorrelationID: e.CorrelationID}
	if e.Trace != nil {
		j.TraceParent, j.TraceState = e.Trace.TraceParent, e.Trace.TraceState
	}
	return j
}

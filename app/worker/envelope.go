package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

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

// AppendJSON appends e as JSON, byte for byte what json.Marshal(e) writes (the payload
// compacted, strings HTML-escaped), without its reflection. It fails when the payload is
// not valid JSON.
func (e Envelope) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"event_id":`...)
	b = appendJSONString(b, e.EventID)
	b = append(b, `,"workspace_id":`...)
	b = appendJSONString(b, e.WorkspaceID)
	b = append(b, `,"event_type":`...)
	b = appendJSONString(b, e.EventType)
	b = append(b, `,"payload":`...)
	if len(e.Payload) == 0 {
		b = append(b, "null"...)
	} else {
		n := len(b)
		buf := bytes.NewBuffer(b)
		if err := json.Compact(buf, e.Payload); err != nil {
			return nil, fmt.Errorf("worker.Envelope: payload: %w", err)
		}
		b = buf.Bytes()
		if needsHTMLEscape(b[n:]) {
			// json.Marshal also escapes these within a json.RawMessage.
			var esc bytes.Buffer
			json.HTMLEscape(&esc, b[n:])
			b = append(b[:n], esc.Bytes()...)
		}
	}
	b = append(b, `,"occurred_at":`...)
	t, err := e.OccurredAt.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("worker.Envelope: occurred_at: %w", err)
	}
	b = append(b, t...)
	if e.CorrelationID != "" {
		b = append(b, `,"correlation_id":`...)
		b = appendJSONString(b, e.CorrelationID)
	}
	if e.Trace != nil {
		b = append(b, `,"trace":{`...)
		sep := false
		if e.Trace.TraceParent != "" {
			b = append(b, `"traceparent":`...)
			b = appendJSONString(b, e.Trace.TraceParent)
			sep = true
		}
		if e.Trace.TraceState != "" {
			if sep {
				b = append(b, ',')
			}
			b = append(b, `"tracestate":`...)
			b = appendJSONString(b, e.Trace.TraceState)
		}
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// needsHTMLEscape reports whether compact JSON b may hold what json.HTMLEscape changes:
// <, >, & or the first byte of U+2028 and U+2029 (a byte loop: bytes.ContainsAny decodes
// runes when its set is not ASCII).
func needsHTMLEscape(b []byte) bool {
	for _, c := range b {
		if c == '<' || c == '>' || c == '&' || c == 0xE2 {
			return true
		}
	}
	return false
}

// appendJSONString appends s as encoding/json writes a string: HTML characters, U+2028 and
// U+2029 escaped, invalid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// DecodeEnvelope reads job data. Data that is not an envelope with a workspace id can never
// be handled: the error is Permanent.
func DecodeEnvelope(data []byte) (Envelope, error) {
	e, ok := decodePlainEnvelope(data)
	if ok {
		if _, err := uuid.Parse(e.WorkspaceID); err != nil {
			return Envelope{}, Permanent(errors.New("job envelope: bad workspace_id"))
		}
		return e, nil
	}
	e = Envelope{}
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

// decodePlainEnvelope reads an envelope as AppendJSON writes it, its fields in that order,
// when no string of it holds an escape (no backslash anywhere): what json.Unmarshal would
// read, without its reflection. ok is false for any other input, which json.Unmarshal may
// still read.
func decodePlainEnvelope(b []byte) (e Envelope, ok bool) {
	if bytes.IndexByte(b, '\\') >= 0 {
		return Envelope{}, false
	}
	r := plainReader{b: b}
	if !r.lit(`{"event_id":`) || !r.str(&e.EventID) || !r.lit(`,"workspace_id":`) || !r.str(&e.WorkspaceID) ||
		!r.lit(`,"event_type":`) || !r.str(&e.EventType) || !r.lit(`,"payload":`) {
		return Envelope{}, false
	}
	p, ok := r.value()
	if !ok {
		return Envelope{}, false
	}
	e.Payload = bytes.Clone(p)
	var at string
	if !r.lit(`,"occurred_at":`) || !r.str(&at) {
		return Envelope{}, false
	}
	if err := e.OccurredAt.UnmarshalJSON([]byte(`"` + at + `"`)); err != nil {
		return Envelope{}, false
	}
	if r.lit(`,"correlation_id":`) && !r.str(&e.CorrelationID) {
		return Envelope{}, false
	}
	if r.lit(`,"trace":{`) {
		e.Trace = &Trace{}
		sep := false
		if r.lit(`"traceparent":`) {
			if !r.str(&e.Trace.TraceParent) {
				return Envelope{}, false
			}
			sep = true
		}
		if (!sep && r.lit(`"tracestate":`)) || (sep && r.lit(`,"tracestate":`)) {
			if !r.str(&e.Trace.TraceState) {
				return Envelope{}, false
			}
		}
		if !r.lit(`}`) {
			return Envelope{}, false
		}
	}
	if !r.lit(`}`) || len(r.b) != 0 {
		return Envelope{}, false
	}
	return e, true
}

// plainReader reads JSON without escapes from the front of b.
type plainReader struct{ b []byte }

// lit consumes s if b starts with it.
func (r *plainReader) lit(s string) bool {
	if len(r.b) < len(s) || string(r.b[:len(s)]) != s {
		return false
	}
	r.b = r.b[len(s):]
	return true
}

// str consumes a string (no escapes, no control characters, valid UTF-8) into v.
func (r *plainReader) str(v *string) bool {
	if len(r.b) == 0 || r.b[0] != '"' {
		return false
	}
	end := bytes.IndexByte(r.b[1:], '"')
	if end < 0 {
		return false
	}
	raw := r.b[1 : 1+end]
	for _, c := range raw {
		if c < 0x20 {
			return false
		}
	}
	if !utf8.Valid(raw) {
		return false
	}
	*v = string(raw)
	r.b = r.b[2+end:]
	return true
}

// value consumes one JSON value (objects and arrays matched by their brackets outside
// strings, then checked with json.Valid).
func (r *plainReader) value() ([]byte, bool) {
	depth, in := 0, false
	i := 0
	for ; i < len(r.b); i++ {
		c := r.b[i]
		if in {
			if c == '"' {
				in = false
			}
			continue
		}
		switch c {
		case '"':
			in = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				goto end
			}
		}
		if depth < 0 {
			break
		}
	}
end:
	if depth != 0 || in || i == 0 || !json.Valid(r.b[:i]) {
		return nil, false
	}
	v := r.b[:i]
	r.b = r.b[i:]
	return v, true
}

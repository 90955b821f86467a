// Package cloudevent is the CloudEvents 1.0 envelope (JSON structured mode) of the messages
// the service exchanges with other services over Redis streams, and the layout of their
// stream entries.
//
// An Event marshals to exactly one JSON object with the context attributes at the top level,
// the extensions beside them (lower-case names, as the specification requires) and data as
// the raw JSON value it holds. Decode accepts what Encode writes and what any conforming
// producer writes in JSON structured mode with a JSON data value (extensions other than
// the four of Event are ignored); it refuses an envelope without the required attributes
// (specversion "1.0", id, source, type), one naming an attribute twice and attribute names
// in another case than the specification's (data is kept as sent: its reader judges it). FuzzDecode checks
// that it never panics.
//
// A stream entry carries one field, FieldEvent, holding the CloudEvent's JSON bytes
// (commands add FieldSignature). The package depends on the standard library and the JSON v2
// decoder only; it is a contract shared by producers and consumers, not a transport.
package cloudevent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// SpecVersion is the CloudEvents version of every Event.
const SpecVersion = "1.0"

// ContentTypeJSON is the datacontenttype of every event whose data is JSON.
const ContentTypeJSON = "application/json"

// Stream entry fields.
const (
	// FieldEvent holds the CloudEvent's JSON bytes (Encode's output).
	FieldEvent = "event"
	// FieldSignature holds, on command entries only, the hex HMAC-SHA256 of FieldEvent's bytes.
	FieldSignature = "signature"
)

// Extension attribute names.
const (
	ExtWorkspaceID   = "workspaceid"
	ExtTraceparent   = "traceparent"
	ExtIntegrationID = "integrationid"
	ExtCorrelationID = "correlationid"
)

// ErrInvalid is wrapped by every error of Decode and Validate about the envelope's content.
var ErrInvalid = errors.New("cloudevent: invalid event")

// Event is one CloudEvent. The zero value is not valid: set at least ID, Source and Type
// (New sets SpecVersion, Time and DataContentType).
type Event struct {
	// SpecVersion is "1.0".
	SpecVersion string `json:"specversion"`
	// ID is unique per Source; integration events use the outbox event's id.
	ID string `json:"id"`
	// Type names what happened (an integration event's domain event name, publication.published)
	// or the command (listing.publish).
	Type string `json:"type"`
	// Source is a URI reference naming the producer, e.g. /listing or an integration's.
	Source string `json:"source"`
	// Subject names the resource the event is about within Source (e.g. publications/<id>); optional.
	Subject string `json:"subject,omitempty"`
	// Time is when the event occurred (RFC 3339 on the wire); optional.
	Time time.Time `json:"-"`
	// DataContentType is the media type of Data ("application/json"); optional.
	DataContentType string `json:"datacontenttype,omitempty"`
	// Data is the event's payload as raw JSON; empty means no data.
	Data json.RawMessage `json:"data,omitempty"`

	// WorkspaceID is the workspace the event belongs to (extension workspaceid).
	WorkspaceID string `json:"workspaceid,omitempty"`
	// Traceparent is the W3C trace context of the request that caused it (extension traceparent); optional.
	Traceparent string `json:"traceparent,omitempty"`
	// IntegrationID names the integration principal that sent a command (extension integrationid); optional.
	IntegrationID string `json:"integrationid,omitempty"`
	// CorrelationID names the command a reply answers (extension correlationid); optional.
	CorrelationID string `json:"correlationid,omitempty"`
}

// New returns an Event with SpecVersion, DataContentType (JSON) and Time (t, in UTC,
// truncated to microseconds) set, and data marshalled as JSON.
func New(id, typ, source string, t time.Time, data any) (Event, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("cloudevent.New: %w", err)
	}
	return Event{
		SpecVersion:     SpecVersion,
		ID:              id,
		Type:            typ,
		Source:          source,
		Time:            t.UTC().Truncate(time.Microsecond),
		DataContentType: ContentTypeJSON,
		Data:            raw,
	}, nil
}

// MarshalJSON writes the structured-mode JSON object.
func (e Event) MarshalJSON() ([]byte, error) { return e.marshal() }

// marshal writes the JSON object; Data is checked (and compacted) once, by encoding/json.
func (e Event) marshal() ([]byte, error) {
	type plain Event // no methods: no recursion
	w := struct {
		plain
		Time string `json:"time,omitempty"`
	}{plain: plain(e)}
	if !e.Time.IsZero() {
		w.Time = e.Time.UTC().Format(time.RFC3339Nano)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a structured-mode JSON object; it does not validate (Decode does).
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	var w struct {
		plain
		Time string `json:"time,omitempty"`
	}
	// Attribute names match exactly (lower case, as the specification requires) and one given
	// twice is refused; data is kept as sent, for its reader to judge.
	if err := attributesOnce(b); err != nil {
		return err
	}
	if err := jsonv2.Unmarshal(b, &w, jsontext.AllowDuplicateNames(true)); err != nil {
		return err
	}
	*e = Event(w.plain)
	if w.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, w.Time)
		if err != nil {
			return fmt.Errorf("%w: time %q is not RFC 3339", ErrInvalid, w.Time)
		}
		e.Time = t.UTC()
	}
	if string(e.Data) == "null" {
		e.Data = nil
	}
	return nil
}

// attributesOnce refuses a JSON object naming one of its members twice (members of nested
// values are not looked at).
func attributesOnce(b []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return fmt.Errorf("%w: not a JSON object", ErrInvalid)
	}
	seen := map[string]bool{}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if seen[tok.String()] {
			return fmt.Errorf("%w: attribute %q appears more than once", ErrInvalid, tok.String())
		}
		seen[tok.String()] = true
		if err := dec.SkipValue(); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	return nil
}

// Validate reports whether e has the attributes CloudEvents 1.0 requires and data that is
// JSON.
func (e Event) Validate() error {
	if err := e.validateAttributes(); err != nil {
		return err
	}
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		return fmt.Errorf("%w: data is not JSON", ErrInvalid)
	}
	return nil
}

// validateAttributes is Validate without the check of Data.
func (e Event) validateAttributes() error {
	switch {
	case e.SpecVersion != SpecVersion:
		return fmt.Errorf("%w: specversion %q, want %q", ErrInvalid, e.SpecVersion, SpecVersion)
	case e.ID == "":
		return fmt.Errorf("%w: id is empty", ErrInvalid)
	case e.Source == "":
		return fmt.Errorf("%w: source is empty", ErrInvalid)
	case e.Type == "":
		return fmt.Errorf("%w: type is empty", ErrInvalid)
	}
	return nil
}

// Encode validates e and returns its JSON bytes (the value of a stream entry's FieldEvent).
func Encode(e Event) ([]byte, error) {
	if err := e.validateAttributes(); err != nil {
		return nil, err
	}
	b, err := e.marshal()
	if err != nil {
		// Data that is not JSON fails here.
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return b, nil
}

// Decode parses and validates the JSON bytes of one CloudEvent. Errors about the content
// wrap ErrInvalid, and so does malformed JSON.
func Decode(b []byte) (Event, error) {
	var e Event
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&e); err != nil {
		if errors.Is(err, ErrInvalid) {
			return Event{}, err
		}
		return Event{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if dec.More() {
		return Event{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalid)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// EntryValues returns the field/value pairs of the stream entry carrying e (for XADD).
func EntryValues(e Event) (map[string]any, error) {
	b, err := Encode(e)
	if err != nil {
		return nil, err
	}
	return map[string]any{FieldEvent: b}, nil
}

// FromEntry decodes the CloudEvent of a stream entry's field values (as go-redis returns
// them: string values). A missing FieldEvent wraps ErrInvalid.
func FromEntry(values map[string]any) (Event, error) {
	v, ok := values[FieldEvent]
	if !ok {
		return Event{}, fmt.Errorf("%w: entry has no %q field", ErrInvalid, FieldEvent)
	}
	switch b := v.(type) {
	case string:
		return Decode([]byte(b))
	case []byte:
		return Decode(b)
	default:
		return Event{}, fmt.Errorf("%w: entry field %q is a %T", ErrInvalid, FieldEvent, v)
	}
}

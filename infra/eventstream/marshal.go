package eventstream

import (
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/cloudevent"
	"github.com/listingkit/listing/infra/outbox"
)

// Source is the CloudEvents source of every integration event.
const Source = "/listing"

// Stream returns the name of the integration event stream under prefix (STREAM_PREFIX):
// "<prefix>:events".
func Stream(prefix string) string { return prefix + ":" + worker.StreamEvents }

// Metadata keys Unmarshaller sets on a consumed message, besides its UUID (the CloudEvent id).
const (
	MetadataType        = "ce_type"
	MetadataSubject     = "ce_subject"
	MetadataWorkspaceID = "ce_workspaceid"
)

// Marshaller writes an integration event's stream entry (redisstream.Marshaller) from a
// message of the outbox Dispatcher: its payload is the job envelope (worker.Envelope), its
// metadata carries the aggregate (outbox.MetadataAggregateType, MetadataAggregateID). The
// entry is one field, cloudevent.FieldEvent. Unmarshal is Unmarshaller's. Stateless.
type Marshaller struct{ Unmarshaller }

var _ redisstream.MarshallerUnmarshaller = Marshaller{}

// Marshal implements redisstream.Marshaller.
func (Marshaller) Marshal(_ string, msg *message.Message) (map[string]any, error) {
	ev, err := ToCloudEvent(msg)
	if err != nil {
		return nil, err
	}
	return cloudevent.EntryValues(ev)
}

// ToCloudEvent builds the CloudEvent of a Dispatcher message (see Marshaller).
func ToCloudEvent(msg *message.Message) (cloudevent.Event, error) {
	var env worker.Envelope
	if err := json.Unmarshal(msg.Payload, &env); err != nil {
		return cloudevent.Event{}, fmt.Errorf("eventstream: message %s is not a job envelope: %w", msg.UUID, err)
	}
	if env.EventID == "" || env.EventType == "" || env.WorkspaceID == "" {
		return cloudevent.Event{}, fmt.Errorf("eventstream: message %s: the envelope lacks event_id, event_type or workspace_id", msg.UUID)
	}
	ev := cloudevent.Event{
		SpecVersion:     cloudevent.SpecVersion,
		ID:              env.EventID,
		Type:            env.EventType,
		Source:          Source,
		Time:            env.OccurredAt.UTC(),
		DataContentType: cloudevent.ContentTypeJSON,
		Data:            env.Payload,
		WorkspaceID:     env.WorkspaceID,
	}
	if at, id := msg.Metadata.Get(outbox.MetadataAggregateType), msg.Metadata.Get(outbox.MetadataAggregateID); at != "" && id != "" {
		ev.Subject = at + "/" + id
	}
	if env.Trace != nil {
		ev.Traceparent = env.Trace.TraceParent
	}
	return ev, nil
}

// Unmarshaller reads an integration event's stream entry into a watermill message
// (redisstream.Unmarshaller, for consumers using watermill-redisstream's Subscriber): UUID =
// the CloudEvent id, payload = the CloudEvent's JSON bytes as published (decode them with
// cloudevent.Decode), metadata MetadataType, MetadataSubject and MetadataWorkspaceID. An
// entry that is not a CloudEvent is an error wrapping cloudevent.ErrInvalid (the Subscriber
// then logs it and skips it). Stateless.
type Unmarshaller struct{}

// Unmarshal implements redisstream.Unmarshaller.
func (Unmarshaller) Unmarshal(values map[string]any) (*message.Message, error) {
	ev, err := cloudevent.FromEntry(values)
	if err != nil {
		return nil, err
	}
	var raw []byte
	switch v := values[cloudevent.FieldEvent].(type) {
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	}
	msg := message.NewMessage(ev.ID, raw)
	msg.Metadata.Set(MetadataType, ev.Type)
	msg.Metadata.Set(MetadataSubject, ev.Subject)
	msg.Metadata.Set(MetadataWorkspaceID, ev.WorkspaceID)
	return msg, nil
}

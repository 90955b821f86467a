// Package catalog renders docs/events.md, the catalogue of the integration events
// (eventstream), from the code's registry (domain.IntegrationEvents) with a JSON Schema per
// event type. It is used by its test and `make events-doc`, not by the service.
package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/uuid"
	"github.com/invopop/jsonschema"

	"github.com/listingkit/listing/domain"
)

// Path is where the catalogue lives, relative to the repository's root.
const Path = "docs/events.md"

// GoComments reads the doc comments of the Go package in dir (relative to the working
// directory, whose package's import path is base) for Catalog's field descriptions.
func GoComments(base, dir string) (map[string]string, error) {
	r := &jsonschema.Reflector{}
	if err := r.AddGoComments(base, dir); err != nil {
		return nil, fmt.Errorf("catalog.GoComments: %w", err)
	}
	return r.CommentMap, nil
}

// Schema returns the JSON Schema (draft 2020-12) of the data of events like sample:
// properties from the JSON keys, required unless omitempty, descriptions from comments
// (GoComments; may be nil), additional properties allowed (fields may be added).
func Schema(e domain.IntegrationEvent, comments map[string]string) *jsonschema.Schema {
	r := &jsonschema.Reflector{
		Anonymous:                 true,
		AllowAdditionalProperties: true,
		DoNotReference:            true,
		ExpandedStruct:            true,
		CommentMap:                comments,
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			if t == reflect.TypeOf(uuid.UUID{}) {
				return &jsonschema.Schema{Type: "string", Format: "uuid"}
			}
			return nil
		},
	}
	s := r.Reflect(e.Sample)
	s.Title = e.Sample.EventType()
	s.Description = e.Doc
	return s
}

// Catalog renders docs/events.md: the stream's contract and, for every integration event
// type of the registry, what it means and the JSON Schema of its data. comments come from
// GoComments (nil: no field descriptions). The output is deterministic.
func Catalog(events []domain.IntegrationEvent, comments map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(catalogIntro)
	b.WriteString("\n## Event types\n\n| type | subject | published when |\n|---|---|---|\n")
	for _, e := range events {
		fmt.Fprintf(&b, "| [`%s`](#%s) | `%s/<id>` | %s |\n", e.Sample.EventType(), anchor(e.Sample.EventType()),
			e.Sample.AggregateType(), firstSentence(e.Doc))
	}
	for _, e := range events {
		s := Schema(e, comments)
		raw, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("catalog.Catalog: %s: %w", e.Sample.EventType(), err)
		}
		fmt.Fprintf(&b, "\n### `%s`\n\n%s\n\nSubject: `%s/<%s id>`. JSON Schema of `data`:\n\n```json\n%s\n```\n",
			e.Sample.EventType(), e.Doc, e.Sample.AggregateType(), e.Sample.AggregateType(), raw)
	}
	return b.Bytes(), nil
}

// anchor is GitHub's heading anchor of "`t`".
func anchor(t string) string { return strings.ReplaceAll(t, ".", "") }

func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

const catalogIntro = `# Integration events

<!-- Generated from the code's event registry by ` + "`make events-doc`" + ` (infra/eventstream/catalog);
do not edit: TestCatalogIsCurrent fails when this file is stale. -->

The service publishes what happens in a workspace to other services as **integration
events**: CloudEvents 1.0 in JSON structured mode on the Redis stream
` + "`<STREAM_PREFIX>:events`" + ` (` + "`listing:events`" + ` by default), readable with any Redis client.
Which domain events are integration events is declared in the code beside each event
(` + "`domain.RegisterIntegrationEvent`" + `); this catalogue is generated from that registry.

This stream replaces ` + "`<BULLMQ_PREFIX>:operation-events`" + ` (job envelopes with watermill's msgpack
metadata, operation status changes only), which is no longer written: move its readers
here, then delete the old key.

## Stream entries

Each entry has exactly one field, ` + "`event`" + `, holding the CloudEvent's JSON bytes:

| attribute | value |
|---|---|
| ` + "`specversion`" + ` | ` + "`1.0`" + ` |
| ` + "`id`" + ` | the outbox event's id (a UUID); the same on a redelivery: deduplicate on it |
| ` + "`type`" + ` | the event type, below (e.g. ` + "`publication.published`" + `) |
| ` + "`source`" + ` | ` + "`/listing`" + ` |
| ` + "`subject`" + ` | ` + "`<aggregate>/<id>`" + `, e.g. ` + "`publication/0193…`" + ` |
| ` + "`time`" + ` | when the event occurred (RFC 3339, UTC) |
| ` + "`datacontenttype`" + ` | ` + "`application/json`" + ` |
| ` + "`data`" + ` | the event's JSON object (schemas below): ids, versions and snapshots, never a secret |
| ` + "`workspaceid`" + ` | extension: the workspace the event belongs to (always present) |
| ` + "`traceparent`" + ` | extension: the W3C trace context of the request that caused it (when it had one) |

Example:

` + "```json" + `
{"specversion":"1.0","id":"0193a7c4-5e1f-7d2a-9b3c-4d5e6f708192","type":"publication.published","source":"/listing",
 "subject":"publication/6f1c…","time":"2026-12-01T07:30:00.123456Z","datacontenttype":"application/json",
 "data":{"publication_id":"6f1c…","operation_id":"…","product_id":"…","store_id":"…","product_revision":1,"external_product_id":"p-42"},
 "workspaceid":"…","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
` + "```" + `

## Delivery

- **At least once.** Events are written by the business transaction into the outbox and
  appended to the stream after it committed; a dispatcher that fails between the append
  and its bookkeeping appends the event again, with the same ` + "`id`" + `.
- **No order** is promised across events. An operation's status changes carry ` + "`version`" + `: the
  highest version is the current state.
- **An operation publishes two status changes**: ` + "`pending`" + ` when it is accepted (version 1),
  then one when it finishes, ` + "`succeeded`" + ` or ` + "`failed`" + `, carrying ` + "`started_at`" + `, when it
  started running (absent when it never ran). Its start is not published: a ` + "`running`" + `
  event would be a third of the outbox rows and dispatch work of every job. The version
  still counts the start (a finished operation that ran is at version 3, not 2); the
  operation's current state, ` + "`running`" + ` included, is at
  ` + "`GET /v1/workspaces/{ws}/operations/{id}`" + `.
- Fields may be **added** to an event's ` + "`data`" + ` (its schema allows additional properties);
  none is renamed, retyped or removed. A new meaning gets a new type.

## Consuming

Use a consumer group per consuming service (` + "`XGROUP CREATE listing:events <group> $ MKSTREAM`" + `,
or ` + "`0`" + ` to start from the oldest entry kept), read with ` + "`XREADGROUP GROUP <group> <consumer> … STREAMS listing:events >`" + `,
and ` + "`XACK`" + ` each entry once handled. A consumer that restarts first reads its own pending
entries (` + "`XREADGROUP … STREAMS listing:events 0`" + `: read before, not acknowledged), then new ones
(` + "`>`" + `): nothing acknowledged is delivered again, nothing unacknowledged is lost. Entries
pending on a consumer that is gone for good can be taken over with ` + "`XAUTOCLAIM`" + `.

Examples that run in the test suite (` + "`tests/events_test.go`" + `):
- Go: watermill-redisstream's Subscriber with a consumer group and
  ` + "`eventstream.Unmarshaller`" + ` (the message's payload is the CloudEvent's JSON; its UUID the event id).
- Node.js: ` + "`tests/bullmqnode/events-consumer.mjs`" + `, a plain ioredis client.

## Retention

Redis trims the stream whether or not a group has read the entries: **a group that falls
further behind than the retention loses events.** Both bounds are configurable:

| variable | default | bound |
|---|---|---|
| ` + "`EVENTS_MAX_LEN`" + ` | ` + "`1000000`" + ` | entries kept (about: trimmed on each append with ` + "`MAXLEN ~`" + `); 0: none |
| ` + "`EVENTS_RETENTION`" + ` | ` + "`168h`" + ` | age of the entries kept (about: the dispatchers trim with ` + "`XTRIM MINID ~`" + ` every minute); 0: none |

The dispatchers (` + "`app dispatch`" + `, ` + "`app all`" + `) export, read at scrape time, so that loss is
visible before it happens (alert when the lag nears the bounds):

| metric | meaning |
|---|---|
| ` + "`listing_stream_length{stream}`" + ` | entries in the stream |
| ` + "`listing_stream_oldest_entry_age_seconds{stream}`" + ` | age of the oldest entry kept |
| ` + "`listing_stream_retention_max_length{stream}`" + `, ` + "`listing_stream_retention_max_age_seconds{stream}`" + ` | the bounds above |
| ` + "`listing_stream_group_lag{stream,group}`" + ` | entries not yet delivered to the group (when Redis cannot tell: the stream's length) |
| ` + "`listing_stream_group_pending{stream,group}`" + ` | entries delivered to the group and not acknowledged |
| ` + "`listing_stream_group_oldest_unread_age_seconds{stream,group}`" + ` | age of the oldest entry not yet delivered to the group |

The same series describe the other integration streams: ` + "`<STREAM_PREFIX>:commands`" + ` (its group
` + "`listing`" + `: commands not yet taken by a consumer) and ` + "`<STREAM_PREFIX>:command-replies`" + ` (bound:
` + "`COMMAND_REPLIES_MAX_LEN`" + `; the groups of the services reading their replies).
`

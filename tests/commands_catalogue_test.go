package tests

import (
	"context"
	"encoding/json"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/infra/httpapi"
)

// commandRecord is the idempotency record of one command sent as a message, as a build of
// the service stored it (testdata/command_record_publish.json), with what the message sent:
// its id, source and data bytes.
type commandRecord struct {
	Build            string          `json:"build"`
	EventID          string          `json:"event_id"`
	EventSource      string          `json:"event_source"`
	Data             string          `json:"data"`
	Method           string          `json:"method"`
	Path             string          `json:"path"`
	IdempotencyKey   string          `json:"idempotency_key"`
	Fingerprint      []byte          `json:"request_fingerprint"`
	FingerprintKeyID string          `json:"fingerprint_key_id"`
	Status           string          `json:"status"`
	ResponseStatus   int             `json:"response_status"`
	ResponseHeaders  json.RawMessage `json:"response_headers"`
	ResponseBody     []byte          `json:"response_body"`
}

const commandRecordFixture = "testdata/command_record_publish.json"

// A listing.publish command's idempotency record written by the build before the command
// catalogue (commands ran through the HTTP router) answers the same command delivered again to
// this build: the same status and the same body bytes, and nothing runs again. A deploy that
// mixes the two builds answers a command the same on either.
//
// LISTING_CAPTURE_COMMAND_RECORD=1 writes the fixture from the build under test instead.
func TestCommandRecordOfThePreviousBuildReplays(t *testing.T) {
	t.Parallel()
	ce := startCommands(t)
	acct, storeID, products, integID, secret := setupPublishing(t, ce, "cmd-record@example.com")
	ce.start()
	ctx := context.Background()

	if os.Getenv("LISTING_CAPTURE_COMMAND_RECORD") != "" {
		data, err := json.Marshal(map[string]any{"product_id": products[0], "store_id": storeID})
		require.NoError(t, err)
		ev := command("cmd-record-1", "listing.publish", acct.WorkspaceID, integID, json.RawMessage(data))
		ce.send(t, map[string]any{"event": ev, "signature": sign(secret, ev)})
		require.Equal(t, "listing.command.accepted", ce.repliesTo(t, "cmd-record-1", 1)[0].Type)
		rec := commandRecord{Build: os.Getenv("LISTING_CAPTURE_COMMAND_RECORD"), EventID: "cmd-record-1", EventSource: "/tests/erp", Data: string(data)}
		require.NoError(t, ce.DB.Owner.QueryRow(ctx, `SELECT method, path, idempotency_key::text, request_fingerprint, fingerprint_key_id,
			status, response_status, response_headers, response_body FROM idempotency_requests WHERE workspace_id = $1 AND method = 'MSG'`,
			acct.WorkspaceID).Scan(&rec.Method, &rec.Path, &rec.IdempotencyKey, &rec.Fingerprint, &rec.FingerprintKeyID,
			&rec.Status, &rec.ResponseStatus, &rec.ResponseHeaders, &rec.ResponseBody))
		out, err := json.MarshalIndent(rec, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(commandRecordFixture, append(out, '\n'), 0o644))
		return
	}

	raw, err := os.ReadFile(commandRecordFixture)
	require.NoError(t, err)
	var rec commandRecord
	require.NoError(t, json.Unmarshal(raw, &rec))
	// The record, as stored, in this workspace and for this integration's user (the scope; the
	// fingerprint covers method, path and data only).
	var userID string
	require.NoError(t, ce.DB.Owner.QueryRow(ctx, `SELECT user_id::text FROM integrations WHERE id = $1`, integID).Scan(&userID))
	_, err = ce.DB.Owner.Exec(ctx, `INSERT INTO idempotency_requests (id, workspace_id, user_id, method, path, idempotency_key,
		request_fingerprint, fingerprint_key_id, status, response_status, response_headers, response_body, completed_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now())`,
		uuid.New(), acct.WorkspaceID, userID, rec.Method, rec.Path, rec.IdempotencyKey, rec.Fingerprint, rec.FingerprintKeyID,
		rec.Status, rec.ResponseStatus, rec.ResponseHeaders, rec.ResponseBody)
	require.NoError(t, err)
	require.Equal(t, uuid.NewSHA1(uuid.NameSpaceURL, []byte(rec.EventSource+"/"+rec.EventID)).String(), rec.IdempotencyKey)

	before := ce.Count(`SELECT count(*) FROM publications`)
	ev := commandAt(time.Now(), rec.EventID, "listing.publish", acct.WorkspaceID, integID, json.RawMessage(rec.Data))
	ce.send(t, map[string]any{"event": ev, "signature": sign(secret, ev)})
	reply := ce.repliesTo(t, rec.EventID, 1)[0]
	require.Equal(t, "listing.command.accepted", reply.Type, "%s", reply.Data)
	require.Equal(t, string(rec.ResponseBody), string(reply.Data), "the reply's data is the stored body, byte for byte")
	require.Equal(t, 202, rec.ResponseStatus)
	require.Equal(t, before, ce.Count(`SELECT count(*) FROM publications`), "a replay runs nothing")
	require.Equal(t, 1, ce.Count(`SELECT count(*) FROM idempotency_requests WHERE method = 'MSG'`))
}

// noteCommand is a test-only command: a note about a product.
type noteCommand struct {
	ProductID uuid.UUID
	Note      string
}

func (noteCommand) CommandName() string { return "test.note" }

// A command in the catalogue without any HTTP endpoint runs from the command stream: its data
// decoded strictly, its ids checked, through the command bus with the message's idempotency
// (a second delivery answers from the record; the handler ran once).
func TestCommandWithoutAnEndpointRunsFromTheStream(t *testing.T) {
	t.Parallel()
	ce := startCommands(t)
	acct, _, products, integID, secret := setupPublishing(t, ce, "cmd-catalogue@example.com")
	var runs atomic.Int64
	type noteIn struct {
		Note string `json:"note"`
	}
	require.NoError(t, ce.API.Server.Catalogue().Add(httpapi.Command{Type: "listing.test_note",
		Params: []httpapi.Param{{Name: "product_id"}},
		Run: httpapi.Runs(ce.API.App.Bus, bus.HandlerFunc[noteCommand, noteCommand](func(_ context.Context, c noteCommand) (noteCommand, error) {
			runs.Add(1)
			return c, nil
		}), func(_ context.Context, c httpapi.Call, in noteIn) (noteCommand, error) {
			return noteCommand{ProductID: c.IDs["product_id"], Note: in.Note}, nil
		}, func(result any) (bus.Response, error) {
			n := result.(noteCommand)
			body, err := json.Marshal(map[string]string{"product_id": n.ProductID.String(), "note": n.Note})
			return bus.Response{Status: 202, Header: map[string]string{"Content-Type": "application/json"}, Body: body}, err
		})}))
	ce.start()

	signed := func(id string, data any) map[string]any {
		ev := command(id, "listing.test_note", acct.WorkspaceID, integID, data)
		return map[string]any{"event": ev, "signature": sign(secret, ev)}
	}
	entry := signed("cmd-note-1", map[string]any{"product_id": products[0], "note": "fragile"})
	ce.send(t, entry)
	ce.send(t, entry)
	replies := ce.repliesTo(t, "cmd-note-1", 2)
	for _, r := range replies {
		require.Equal(t, "listing.command.accepted", r.Type, "%s", r.Data)
		require.JSONEq(t, `{"product_id":"`+products[0]+`","note":"fragile"}`, string(r.Data))
	}
	require.Equal(t, int64(1), runs.Load(), "the second delivery is answered from the record")
	require.Equal(t, 1, ce.Count(`SELECT count(*) FROM idempotency_requests WHERE method = 'MSG' AND path = '/listing.test_note'`))

	for _, c := range []struct {
		id   string
		data any
		code string
	}{
		{"cmd-note-extra", map[string]any{"product_id": products[0], "note": "x", "Note": "y"}, "UNKNOWN_FIELD"},
		{"cmd-note-no-id", map[string]any{"note": "x"}, "COMMAND_DATA_INVALID"},
	} {
		ce.send(t, signed(c.id, c.data))
		require.Equal(t, c.code, problemCode(t, ce.repliesTo(t, c.id, 1)[0]), c.id)
	}
	require.Equal(t, int64(1), runs.Load())
}

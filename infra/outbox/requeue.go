package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/infra/postgres"
)

// Metadata keys of a job's delivery, for transports that keep no job state of their own
// (the in-process memory transport): Requeue writes them on the outbox row, and the
// dispatcher forwards them on the message like every metadata key (decimal strings; absent
// on a first delivery).
const (
	// MetadataJobAttempt is the attempt this delivery is, from 1.
	MetadataJobAttempt = "job_attempt"
	// MetadataJobSnoozes and MetadataJobSnoozedMs count the job's earlier snoozes and their
	// total delay.
	MetadataJobSnoozes   = "job_snoozes"
	MetadataJobSnoozedMs = "job_snoozed_ms"
	// MetadataClaim is the claim token (locked_by) under which the dispatcher published the
	// event, set on the messages of a ClaimCarrier only: Requeue and Take act on the event
	// only while that claim still holds it.
	MetadataClaim = "outbox_claim"
)

// ClaimCarrier is a publisher whose consumer acts on the outbox row itself (the in-process
// memory transport: Take, Requeue): the dispatcher sets MetadataClaim on its messages.
type ClaimCarrier interface {
	CarriesClaim()
}

// ErrClaimLost is what Take and Requeue return when the claim no longer holds the event:
// its lease ran out and another claim took it, or it was marked or released. Whoever holds
// it now delivers it; the caller must leave it alone.
var ErrClaimLost = errors.New("outbox: the claim no longer holds the event")

// JobDelivery is what Requeue records of the next delivery of a job.
type JobDelivery struct {
	Attempt int
	Snoozes int
	Snoozed time.Duration
}

// requeueSQL hands a leased event back to the outbox for a later delivery: due after $2
// seconds, its lease released, the next delivery's job metadata merged.
// Neither attempt_count (publish attempts) nor last_error change: the publish succeeded.
const requeueSQL = `
	UPDATE outbox_events
	SET next_attempt_at = now() + make_interval(secs => $2),
	    locked_by = NULL, locked_until = NULL, metadata = metadata || $3::jsonb
	WHERE id = $1 AND status = 'pending' AND locked_by = $4`

// takeSQL extends claim $2's lease of event $1 to now + $3 ms, while that claim still holds
// it (its lease not run out).
const takeSQL = `
	UPDATE outbox_events SET locked_until = now() + $3 * interval '1 millisecond'
	WHERE id = $1 AND status = 'pending' AND locked_by = $2 AND locked_until > now()`

// Requeue returns event id of workspace ws, held by claim, to pending, due after `after`,
// with next recorded for its next delivery, so that the outbox delivers it again (its
// backoff, lease and dead letter apply as to any pending event). It is how a transport
// without job state retries or snoozes a job; the claim that published the event then
// finds nothing to mark. An event the claim no longer holds (marked, released, or claimed
// again after its lease ran out) is left alone: ErrClaimLost.
func Requeue(ctx context.Context, pool *pgxpool.Pool, ws uuid.UUID, id, claim string, after time.Duration, next JobDelivery) error {
	if claim == "" {
		return fmt.Errorf("outbox.Requeue: %w (no claim token)", ErrClaimLost)
	}
	meta, err := json.Marshal(map[string]string{
		MetadataJobAttempt:   strconv.Itoa(next.Attempt),
		MetadataJobSnoozes:   strconv.Itoa(next.Snoozes),
		MetadataJobSnoozedMs: strconv.FormatInt(next.Snoozed.Milliseconds(), 10),
	})
	if err != nil {
		return fmt.Errorf("outbox.Requeue: %w", err)
	}
	return execClaimed(ctx, pool, ws, "outbox.Requeue", requeueSQL, id, after.Seconds(), meta, claim)
}

// Take extends claim's lease of event id of workspace ws to lease from now, before its
// consumer starts the job (the memory transport's lock: nobody claims the event again
// while its handler may still call out). ErrClaimLost when the claim no longer holds it
// (its lease ran out while the message waited): the consumer must not run the job.
func Take(ctx context.Context, pool *pgxpool.Pool, ws uuid.UUID, id, claim string, lease time.Duration) error {
	if claim == "" {
		return fmt.Errorf("outbox.Take: %w (no claim token)", ErrClaimLost)
	}
	return execClaimed(ctx, pool, ws, "outbox.Take", takeSQL, id, claim, lease.Milliseconds())
}

// execClaimed runs one statement on an event in a transaction scoped to ws: ErrClaimLost
// when it changed no row.
func execClaimed(ctx context.Context, pool *pgxpool.Pool, ws uuid.UUID, op, sql string, args ...any) error {
	var n int64
	err := postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sql, args...)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, postgres.TranslateError(err))
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", op, ErrClaimLost)
	}
	return nil
}

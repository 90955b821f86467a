package outbox

import (
	"context"
	"encoding/json"
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
)

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
	WHERE id = $1 AND status = 'pending' AND locked_by IS NOT NULL`

// Requeue returns event id of workspace ws to pending, due after `after`, with next recorded
// for its next delivery, so that the outbox delivers it again (its backoff, lease and dead
// letter apply as to any pending event). It is how a transport without job state retries or
// snoozes a job; the claim that published the event then finds nothing to mark. An event no
// longer leased (marked or released) is left alone.
func Requeue(ctx context.Context, pool *pgxpool.Pool, ws uuid.UUID, id string, after time.Duration, next JobDelivery) error {
	meta, err := json.Marshal(map[string]string{
		MetadataJobAttempt:   strconv.Itoa(next.Attempt),
		MetadataJobSnoozes:   strconv.Itoa(next.Snoozes),
		MetadataJobSnoozedMs: strconv.FormatInt(next.Snoozed.Milliseconds(), 10),
	})
	if err != nil {
		return fmt.Errorf("outbox.Requeue: %w", err)
	}
	err = postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, requeueSQL, id, after.Seconds(), meta)
		return err
	})
	if err != nil {
		return fmt.Errorf("outbox.Requeue: %w", postgres.TranslateError(err))
	}
	return nil
}

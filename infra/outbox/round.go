package outbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/listingkit/listing/app/worker"
	"github.com/redis/go-redis/v9"
)

// work runs rounds of up to RoundWorkspaces queued workspaces until ctx is cancelled.
func (d *Dispatcher) work(ctx context.Context) {
	for {
		wss, ok := d.queue.pop(ctx, d.cfg.RoundWorkspaces)
		if !ok {
			return
		}
		d.dispatchRound(ctx, wss)
	}
}

// dispatchRound claims one batch of each of wss (BatchSize, or its share of RoundEvents when
// smaller), requeues the workspaces whose batch was full, held rows included (fairness: every
// other queued workspace gets its batch first; other workers may take their next batch
// meanwhile), publishes what it leased, and marks.
func (d *Dispatcher) dispatchRound(ctx context.Context, wss []uuid.UUID) {
	token := fmt.Sprintf("%s/%d", d.cfg.ID, d.claimSeq.Add(1))
	claimedAt := time.Now() // the leases end at the server's now() + Lease, a little later
	limit := min(d.cfg.BatchSize, max(1, d.cfg.RoundEvents/len(wss)))
	d.refill(ctx, wss)
	rows, err := d.claim(ctx, wss, token, limit)
	d.queue.claimed(wss)
	if err != nil && ctx.Err() == nil {
		// Workspaces whose claim failed are found again by the next discovery.
		d.log.Warn("outbox claim failed", "workspaces", len(wss), "error", SanitizeError(err, d.cfg.ErrorMaxLen))
	}
	if err != nil {
		return
	}
	// Held rows (fair share) wait in the outbox for a slot: nothing to deliver. A row held
	// because a concurrent claim took the slot it chose may leave a slot of its lane free:
	// once the leased rows are delivered, unhold gives it one at once.
	held := heldLanesOf(rows)
	d.held.add(held)
	d.held.retreat(rows)
	byWS := byWorkspace(rows)
	for _, ws := range wss {
		full := len(byWS[ws]) >= limit
		if full {
			d.queue.requeue(ws)
		}
		if d.fair.slots > 0 {
			d.held.claimed(ws, full, held)
		}
	}
	if len(rows) == 0 {
		return
	}
	if rows = slices.DeleteFunc(rows, func(r claimed) bool { return r.Held }); len(rows) > 0 {
		d.deliver(ctx, token, rows, claimedAt)
	}
	if held = d.held.read(held); len(held) > 0 && ctx.Err() == nil {
		if err := d.unhold(ctx, held, false, true); err != nil && ctx.Err() == nil {
			d.log.Warn("outbox fair-share release after a claim failed; the sweep releases them", "error", SanitizeError(err, d.cfg.ErrorMaxLen))
		}
	}
}

// toMessage builds the delivered message: UUID = event id (the BullMQ jobId), payload = job
// data JSON, metadata event_type (the job name), aggregate, correlation and trace.
func toMessage(c claimed) (*message.Message, error) {
	ws := c.WorkspaceID.String()
	occurred := c.CreatedAt
	if t, err := time.Parse(time.RFC3339Nano, c.Metadata[MetadataOccurredAt]); err == nil {
		occurred = t
	}
	jd := worker.Envelope{
		EventID:       c.ID.String(),
		WorkspaceID:   ws,
		EventType:     c.EventType,
		Payload:       c.Payload,
		OccurredAt:    occurred.UTC(),
		CorrelationID: c.Metadata[MetadataCorrelationID],
	}
	if tp, ts := c.Metadata[MetadataTraceParent], c.Metadata[MetadataTraceState]; tp != "" || ts != "" {
		jd.Trace = &worker.Trace{TraceParent: tp, TraceState: ts}
	}
	b, err := jd.AppendJSON(make([]byte, 0, 256+len(c.Payload)))
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(c.ID.String(), b)
	for _, k := range []string{MetadataAggregateType, MetadataAggregateID, MetadataCorrelationID, MetadataTraceParent, MetadataTraceState,
		MetadataJobAttempt, MetadataJobSnoozes, MetadataJobSnoozedMs} {
		if v := c.Metadata[k]; v != "" {
			msg.Metadata.Set(k, v)
		}
	}
	msg.Metadata.Set(MetadataEventType, c.EventType)
	if c.AggregateType != "" {
		msg.Metadata.Set(MetadataAggregateType, c.AggregateType)
		msg.Metadata.Set(MetadataAggregateID, c.AggregateID)
	}
	msg.Metadata.Set("workspace_id", ws)
	return msg, nil
}

// errNotTried marks a claimed row that deliver did not get to publish before its round's
// publish deadline.
var errNotTried = errors.New("outbox: not published before the round's deadline")

// deliver publishes claimed rows grouped by destination and records the outcome. When ctx is
// already cancelled nothing is published: the claims are released. Publishing stops at the
// round's deadline, claimedAt + Lease - Lease/5, so that the marks land while the leases
// still hold even when destinations hang: rows not tried by then are released (no attempt
// counted), not marked failed.
func (d *Dispatcher) deliver(ctx context.Context, token string, rows []claimed, claimedAt time.Time) {
	bg := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		d.release(bg, token, rows)
		return
	}
	pubCtx, cancelPub := context.WithDeadline(bg, claimedAt.Add(d.cfg.Lease-d.cfg.Lease/5))
	defer cancelPub()
	groups := map[string][]int{}
	var order []string
	for i, r := range rows {
		if _, ok := groups[r.Destination]; !ok {
			order = append(order, r.Destination)
		}
		groups[r.Destination] = append(groups[r.Destination], i)
	}
	errs := make([]error, len(rows))
	for i := range errs {
		errs[i] = errNotTried
	}
	for _, dest := range order {
		idx := groups[dest]
		if pubCtx.Err() != nil {
			break
		}
		pub, err := d.pubs.PublisherFor(dest)
		if err != nil {
			for _, i := range idx {
				errs[i] = err
			}
			continue
		}
		d.publishGroup(pubCtx, pub, dest, token, rows, idx, errs)
	}
	var ok, failed, untried []claimed
	var failErrs []error
	published := make(map[string]int, len(order))
	for i, r := range rows {
		switch {
		case errs[i] == nil:
			ok = append(ok, r)
			published[r.Destination]++
		case errors.Is(errs[i], errNotTried):
			untried = append(untried, r)
		default:
			failed = append(failed, r)
			failErrs = append(failErrs, errs[i])
		}
	}
	if len(untried) > 0 {
		d.log.Warn("outbox round deadline reached; releasing the events not yet published", "events", len(untried))
		d.release(bg, token, untried)
	}
	for dest, n := range published {
		d.metrics.Published.WithLabelValues(dest).Add(float64(n))
	}
	d.metrics.Attempts.WithLabelValues("success").Add(float64(len(ok)))
	d.metrics.Attempts.WithLabelValues("failure").Add(float64(len(failed)))
	markCtx, cancel := context.WithTimeout(bg, d.cfg.ShutdownTimeout)
	defer cancel()
	if err := d.mark(markCtx, token, ok, failed, failErrs); err != nil {
		d.log.Error("outbox marking failed; the events will be published again after their lease",
			"events", len(rows), "error", SanitizeError(err, d.cfg.ErrorMaxLen))
	}
}

// publishGroup publishes rows[idx] to dest in one call (a ClaimCarrier's messages carry the
// round's claim token, MetadataClaim); when that fails, unless the
// destination looks unreachable, each message is published alone so that one failing event
// does not fail the others, until one fails as unreachable (then the rest fail with it) or
// ctx (the round's deadline) ends (then the rest stay errNotTried). errs receives the per-row
// outcome.
func (d *Dispatcher) publishGroup(ctx context.Context, pub message.Publisher, dest, token string, rows []claimed, idx []int, errs []error) {
	msgs := make([]*message.Message, 0, len(idx))
	okIdx := make([]int, 0, len(idx))
	_, withClaim := pub.(ClaimCarrier)
	for _, i := range idx {
		m, err := toMessage(rows[i])
		if err != nil {
			errs[i] = err
			continue
		}
		if withClaim {
			m.Metadata.Set(MetadataClaim, token)
		}
		msgs = append(msgs, m)
		okIdx = append(okIdx, i)
	}
	if len(msgs) == 0 {
		return
	}
	publish := func(ms ...*message.Message) error {
		pctx, cancel := context.WithTimeout(ctx, d.cfg.PublishTimeout)
		defer cancel()
		for _, m := range ms {
			m.SetContext(pctx)
		}
		return safePublish(pub, dest, ms)
	}
	err := publish(msgs...)
	if err == nil || len(msgs) == 1 || unreachable(err) {
		for _, i := range okIdx {
			errs[i] = err
		}
		return
	}
	d.log.Warn("outbox batch publish failed; publishing one by one", "destination", dest,
		"events", len(msgs), "error", SanitizeError(err, d.cfg.ErrorMaxLen))
	var down error // set once the destination looks unreachable: the rest fail with it, untried
	for k, m := range msgs {
		switch {
		case down != nil:
			errs[okIdx[k]] = down
		case ctx.Err() != nil: // the round's deadline: left errNotTried
		default:
			errs[okIdx[k]] = publish(m)
			if unreachable(errs[okIdx[k]]) {
				down = errs[okIdx[k]]
			}
		}
	}
}

// unreachable reports whether a publish error says the destination could not be reached
// (connection refused or reset, a network timeout, no free Redis connection, PublishTimeout):
// then no message can get through, and trying the others one by one would only multiply the
// wait.
func unreachable(err error) bool {
	var ne net.Error
	return err != nil && (errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET))
}

// safePublish turns a publisher panic into an error: a poison message must not stop the
// dispatcher.
func safePublish(pub message.Publisher, topic string, msgs []*message.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("publisher panic: %v", r)
		}
	}()
	return pub.Publish(topic, msgs...)
}

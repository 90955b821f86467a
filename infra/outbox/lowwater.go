package outbox

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// lowWater keeps, per workspace, a lower bound of the due times a claim still has to look
// at: the claim's index scan along outbox_events_due (workspace_id, next_attempt_at) starts
// there instead of at the workspace's first entry.
//
// Why: every dispatched event leaves a dead entry in that index (its row was deleted, moved
// to the log). Vacuum and the scans' own pruning remove them once no snapshot can see the
// row; while a transaction holds an older snapshot (a REPEATABLE READ report, a long
// pg_dump), none can be removed, and a claim that starts at the workspace's first entry
// visits the heap for every event dispatched since the snapshot was taken: its time grows
// with the length of the hold. Starting past the low-water mark, it walks only the entries
// dispatched since the previous claim of the workspace (plus the margin below).
//
// What the bound may skip, and what catches it:
//   - An event whose transaction commits after a claim that advanced the mark past its due
//     time (next_attempt_at defaults to the writer's transaction start): the mark is set
//     lowWaterMargin below the claim's now(), so only a writer transaction longer than that
//     is late; and an expired lease (its dispatcher died, or its mark failed), or an event
//     another process released, whose due time is older than the mark. Every
//     FullClaimInterval the marks are forgotten, so each workspace's next claim starts at its
//     first entry again and takes them: they are delayed by at most that interval.
//   - Events this dispatcher releases, or whose claim or mark failed: the marks are
//     forgotten at once.
//
// A claim stores the mark it derives only if no forget happened since it read the marks (a
// claim that started before a release must not set a mark past the released events).
type lowWater struct {
	mu       sync.Mutex
	marks    map[uuid.UUID]time.Time
	seq      uint64        // bumped by every forget
	every    time.Duration // < 0: no marks kept (every claim starts at the first entry)
	margin   time.Duration
	lastFull time.Time
}

// lowWaterMargin is how far below the claim's now() a new mark is set: a writer
// transaction shorter than this whose events commit after the claim is not skipped.
const lowWaterMargin = 5 * time.Second

func newLowWater(every time.Duration) *lowWater {
	return &lowWater{marks: map[uuid.UUID]time.Time{}, every: every, margin: lowWaterMargin, lastFull: time.Now()}
}

// begin returns the marks of wss (the zero time: none, the claim starts at the workspace's
// first entry) and the sequence number to pass to advance.
func (l *lowWater) begin(wss []uuid.UUID) ([]time.Time, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.lastFull) >= l.every {
		l.forgetLocked()
	}
	out := make([]time.Time, len(wss))
	for i, ws := range wss {
		out[i] = l.marks[ws]
	}
	return out, l.seq
}

// advance records the marks derived from a claim that read the marks at seq: per workspace
// that had rows claimed, the lowest due time among them, or the claim's now() less
// lowWaterMargin when lower. Rows below the mark are then leased by a claim, or late.
func (l *lowWater) advance(seq uint64, now time.Time, rows []claimed) {
	if len(rows) == 0 || now.IsZero() || l.every < 0 {
		return
	}
	next := map[uuid.UUID]time.Time{}
	floor := now.Add(-l.margin)
	for _, r := range rows {
		m, ok := next[r.WorkspaceID]
		if !ok {
			m = floor
		}
		if r.DueAt.Before(m) {
			m = r.DueAt
		}
		next[r.WorkspaceID] = m
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq != l.seq {
		return
	}
	for ws, m := range next {
		l.marks[ws] = m
	}
}

// forget drops every mark: the next claim of each workspace starts at its first entry.
func (l *lowWater) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked()
}

func (l *lowWater) forgetLocked() {
	clear(l.marks)
	l.seq++
	l.lastFull = time.Now()
}

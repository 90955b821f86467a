package outbox

import (
	"encoding/binary"
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
//     another process released, whose due time is older than the mark. Time is cut into
//     periods of FullClaimInterval, shifted per workspace (phase, from its id): a claim uses
//     a workspace's mark only if a claim that began in the same period of that workspace
//     derived it, so the first claim of each workspace in each period starts at its first
//     entry and takes them: they are delayed by at most one period. The shift spreads those
//     full scans over the period instead of making every workspace's next claim a full scan
//     at once (under a held snapshot each one walks the workspace's dead entries).
//   - Events this dispatcher releases, or whose claim or mark failed: every mark is
//     forgotten at once.
//
// A claim stores the mark it derives only if no forget happened since it read the marks (a
// claim that started before a release must not set a mark past the released events).
type lowWater struct {
	mu     sync.Mutex
	marks  map[uuid.UUID]mark
	seq    uint64        // bumped by every forget
	every  time.Duration // <= 0: no marks kept (every claim starts at the first entry)
	margin time.Duration
	now    func() time.Time
}

// mark is a workspace's low-water mark and the period (of that workspace) in which the
// claim that derived it began.
type mark struct {
	at     time.Time
	period int64
}

// lowWaterMargin is how far below the claim's now() a new mark is set: a writer
// transaction shorter than this whose events commit after the claim is not skipped.
const lowWaterMargin = 5 * time.Second

func newLowWater(every time.Duration) *lowWater {
	return &lowWater{marks: map[uuid.UUID]mark{}, every: every, margin: lowWaterMargin, now: time.Now}
}

// period returns the number of ws's current period at t: periods last l.every and are
// shifted by a fraction of it derived from ws.
func (l *lowWater) period(ws uuid.UUID, t time.Time) int64 {
	phase := int64(binary.BigEndian.Uint64(ws[8:]) % uint64(l.every))
	return (t.UnixNano() + phase) / int64(l.every)
}

// claimMarks is what begin hands a claim: the marks to start at and what advance needs.
type claimMarks struct {
	at      []time.Time // per workspace; the zero time: none, the scan starts at the first entry
	periods []int64
	seq     uint64
}

// begin returns the marks of wss for a claim beginning now.
func (l *lowWater) begin(wss []uuid.UUID) claimMarks {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := claimMarks{at: make([]time.Time, len(wss)), seq: l.seq}
	if l.every <= 0 {
		return c
	}
	now := l.now()
	c.periods = make([]int64, len(wss))
	for i, ws := range wss {
		c.periods[i] = l.period(ws, now)
		if m, ok := l.marks[ws]; ok && m.period == c.periods[i] {
			c.at[i] = m.at
		}
	}
	return c
}

// advance records the marks derived from a claim of wss that began with c: per workspace
// that had rows claimed, the lowest due time among them, or the claim's now() less
// lowWaterMargin when lower, in the period the claim began in. Rows below the mark are then
// leased by a claim, or late.
func (l *lowWater) advance(c claimMarks, wss []uuid.UUID, now time.Time, rows []claimed) {
	if len(rows) == 0 || now.IsZero() || l.every <= 0 {
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
	if c.seq != l.seq {
		return
	}
	for i, ws := range wss {
		if m, ok := next[ws]; ok {
			l.marks[ws] = mark{at: m, period: c.periods[i]}
		}
	}
}

// epoch returns the number of forgets so far.
func (l *lowWater) epoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// discoveryMark is discovery's low-water mark: outbox_due_workspaces looks only at the due
// entries at or past it, and so does not visit the rows of the events dispatched before it
// (dead, and kept while an older snapshot is held: without it each discovery visited every
// one of them, in every workspace). It is the previous discovery's now() less
// lowWaterMargin: an event due since then is found, whether it was written then (a writer
// transaction shorter than the margin) or its retry's backoff ended. What it may skip (an
// expired lease, an event released by another process, a longer writer transaction; the
// claim's marks skip the same) is found by the full discovery (every due entry) that runs
// at least once per FullClaimInterval, and after every forget of the claim's marks (this
// dispatcher's release or failed claim or mark, whose events the next discovery must find
// again). A discovery that returned DiscoveryLimit workspaces keeps its mark, so that the
// workspaces it left out are found by the next one; a failed discovery makes the next full.
type discoveryMark struct {
	every time.Duration // FullClaimInterval; <= 0: every discovery is full
	at    time.Time     // the next discovery's mark; the zero time: full
	full  time.Time     // when the last full discovery began
	seq   uint64        // the marks' epoch (lowWater.seq) at the discovery that set at
}

// since returns the mark of a discovery beginning at now (the zero time: every due entry)
// and the marks' epoch it read.
func (m *discoveryMark) since(l *lowWater, now time.Time) (time.Time, uint64) {
	seq := l.epoch()
	if m.every <= 0 || m.at.IsZero() || seq != m.seq || now.Sub(m.full) >= m.every {
		m.at = time.Time{}
		m.full = now
	}
	return m.at, seq
}

// advance sets the next discovery's mark after a discovery that began with mark since in
// epoch seq and ran at the server's now; truncated: it returned DiscoveryLimit workspaces.
func (m *discoveryMark) advance(since time.Time, seq uint64, now time.Time, truncated bool) {
	m.seq = seq
	if truncated {
		m.at = since
		return
	}
	m.at = now.Add(-lowWaterMargin)
}

// reset makes the next discovery full.
func (m *discoveryMark) reset() { m.at = time.Time{} }

// forget drops every mark: the next claim of each workspace starts at its first entry.
func (l *lowWater) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.marks)
	l.seq++
}

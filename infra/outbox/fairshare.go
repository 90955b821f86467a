package outbox

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// FairShare configures fair share across workspaces (doc.go, "Fair share"): at most Slots
// request events of one workspace and lane admitted into one of Queues at a time, across
// every dispatcher; the rest held in the outbox until a task of the same workspace, queue and
// lane ends.
type FairShare struct {
	// Slots is the most tasks of one workspace and lane admitted into one queue at once
	// (FAIR_SHARE_SLOTS). 0 turns fair share off: held events go back to the claim.
	Slots int
	// AloneFactor lets a lane take up to AloneFactor × Slots slots while no other workspace
	// has events held in its queue (as this dispatcher knows: its claims' and its sweep's
	// listing, at most SweepInterval old), so that one busy workspace alone keeps the
	// workers busy while each slot waits for its task's end, the wake-up, a round and a
	// claim before its next job. Once another workspace has events held there, the lane takes
	// no slot above Slots (those taken drain with their tasks). A newcomer that is never
	// held (a workspace publishing a few tasks) waits in Redis behind at most AloneFactor ×
	// Slots jobs of the busy one. 0 or 1: Slots always.
	AloneFactor int
	// LaneField is the payload's JSON field naming a request's lane (the store it calls):
	// each lane of a workspace's queue has its own Slots, so that one lane's backlog (a
	// store waiting for its rate limit in the slots it holds) never holds back another's.
	// Requests without the field share the lane "". Empty: one lane per queue.
	LaneField string
	// Queues are the fair-shared queues (the flows' request queues).
	Queues []FairQueue
	// SweepInterval is the period of the sweep that gives free slots to held events no
	// round refilled (a task's end whose wake-up was lost), frees the slots of
	// tasks that ended without releasing them, and releases every held event when fair share
	// is off. Default 1s.
	SweepInterval time.Duration
	// StaleSlotAge is how old a full queue's oldest slot must be before the sweep checks
	// that its tasks are still unfinished. Default 30s.
	StaleSlotAge time.Duration
}

// DefaultAloneFactor is the service's FairShare.AloneFactor: a lane alone in its queue takes
// up to 4 × FAIR_SHARE_SLOTS slots.
const DefaultAloneFactor = 4

// FairQueue is one fair-shared queue: the flow's name (the gauge's label), its request
// events' queue, the JSON field of their payload that holds the task id, and the task table.
type FairQueue struct {
	Flow, Queue, TaskIDField, Table string
}

// fairShare is the claim's view of FairShare: parallel arrays of the queues and their task
// id fields, and the slots (no queues when off).
type fairShare struct {
	queues, fields []string
	slots          int
	// alone is a lane's slots while no other workspace has events held in its queue
	// (AloneFactor × Slots; slots when AloneFactor is 0 or 1).
	alone   int
	lane    string
	byQueue map[string]FairQueue
}

func newFairShare(c FairShare) fairShare {
	f := fairShare{queues: []string{}, fields: []string{}, slots: c.Slots, alone: c.Slots * max(c.AloneFactor, 1), lane: c.LaneField,
		byQueue: map[string]FairQueue{}}
	for _, q := range c.Queues {
		f.byQueue[q.Queue] = q
		if c.Slots > 0 {
			f.queues = append(f.queues, q.Queue)
			f.fields = append(f.fields, q.TaskIDField)
		}
	}
	return f
}

func (c *FairShare) setDefaults() {
	setDefault(&c.SweepInterval, time.Second)
	setDefault(&c.StaleSlotAge, 30*time.Second)
}

func (c FairShare) validate() error {
	if c.Slots < 0 || c.Slots > 100000 {
		return fmt.Errorf("outbox: FairShare.Slots must be in [0, 100000], got %d", c.Slots)
	}
	if c.AloneFactor < 0 || c.AloneFactor > 100 || c.Slots*max(c.AloneFactor, 1) > 100000 {
		return fmt.Errorf("outbox: FairShare.AloneFactor must be in [0, 100] with AloneFactor × Slots at most 100000, got %d", c.AloneFactor)
	}
	for _, q := range c.Queues {
		if q.Queue == "" || q.TaskIDField == "" || q.Table == "" {
			return fmt.Errorf("outbox: FairShare queue %q needs Queue, TaskIDField and Table", q.Queue)
		}
	}
	return nil
}

// heldLanesLimit bounds the (workspace, queue, lane) triples one sweep looks at.
const heldLanesLimit = 10000

// unholdSQL gives, for each (workspace $1[i], queue $2[i], lane $5[i]), its free slots (of
// $6[i]; all of its held events, up to $4, when $3 is 0) to its oldest held events after
// (created_at, id) ($7[i], $8[i]; the zero time for none): back to pending, due now. It
// returns per triple the slots in use and the oldest slot's age in seconds, how many events
// it released, and the (created_at, id) of the last one (null when none).
//
// The walk starts after the lane's front mark (heldLanes.front, the last event a refill
// released), not at the index's first entry: the entries of the events released before
// stay in outbox_events_held, their row versions dead, until an index scan can mark them
// dead (no older snapshot left) or a vacuum removes them, and under load a walk from the
// front passed thousands of them at every refill (a 50,000-event backlog: 17 ms a refill,
// most of the dispatcher's time). An event held again after the mark passed it (a released
// one a claim held again) is older than the mark: the sweep, which walks from the front
// once a SweepInterval, releases it. The update finds its rows by primary key: its status
// condition, "held" as the column's CHECK allows (pending, held, dead_letter), matches no
// partial index's predicate (as pendingByID, claim.go).
const unholdSQL = `
	WITH p AS (SELECT * FROM unnest($1::uuid[], $2::text[], $5::text[], $6::int[], $7::timestamptz[], $8::uuid[])
	           AS p(ws, dest, lane, cap, at, after)),
	u AS (
	  SELECT p.ws, p.dest, p.lane, p.cap, p.at, p.after, count(s.slot) AS used,
	         coalesce(extract(epoch FROM now() - min(s.taken_at)), 0)::float8 AS oldest
	  FROM p LEFT JOIN outbox_fair_slots s ON s.workspace_id = p.ws AND s.destination = p.dest AND s.lane = p.lane
	  GROUP BY p.ws, p.dest, p.lane, p.cap, p.at, p.after),
	x AS (
	  SELECT h.id, h.created_at, u.ws, u.dest, u.lane FROM u CROSS JOIN LATERAL (
	    SELECT o.id, o.created_at FROM outbox_events o
	    WHERE o.workspace_id = u.ws AND o.destination = u.dest AND o.held_lane = u.lane AND o.status = 'held'
	      AND (o.created_at, o.id) > (u.at, u.after)
	    ORDER BY o.created_at, o.id
	    LIMIT CASE WHEN $3::int = 0 THEN $4::int ELSE greatest(u.cap - u.used, 0) END
	    FOR UPDATE SKIP LOCKED) h),
	r AS (
	  UPDATE outbox_events o SET status = 'pending', held_task = NULL, held_lane = NULL, next_attempt_at = now()
	  WHERE o.id = ANY (ARRAY(SELECT id FROM x)) AND o.status NOT IN ('pending', 'dead_letter')
	  RETURNING o.id)
	SELECT u.ws, u.dest, u.lane, u.cap, u.used, u.oldest, l.released, l.at, l.id
	FROM u CROSS JOIN LATERAL (
	  SELECT count(*) AS released, max(x.created_at) AS at,
	         (array_agg(x.id ORDER BY x.created_at DESC, x.id DESC))[1] AS id
	  FROM r JOIN x ON x.id = r.id WHERE x.ws = u.ws AND x.dest = u.dest AND x.lane = u.lane) l`

// staleSlotsSQL frees the slots of queue $2 and lane $4 in the transaction's workspace $1
// taken more than $3 seconds ago whose task (in table %s) is finished or gone: tasks that
// ended before their event was claimed (a task cancelled while its request was pending)
// release nothing themselves.
const staleSlotsSQL = `
	DELETE FROM outbox_fair_slots s
	WHERE s.workspace_id = $1 AND s.destination = $2 AND s.lane = $4 AND s.taken_at < now() - make_interval(secs => $3)
	  AND NOT EXISTS (SELECT 1 FROM %s t WHERE t.id = s.task_id AND t.status IN ('pending', 'running'))`

// sweepFairShare runs the fair-share sweep every SweepInterval until ctx ends.
func (d *Dispatcher) sweepFairShare(ctx context.Context) {
	t := time.NewTicker(d.cfg.FairShare.SweepInterval)
	defer t.Stop()
	for {
		if err := d.sweep(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("outbox fair-share sweep failed", "error", SanitizeError(err, d.cfg.ErrorMaxLen))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// heldLane is one (workspace, queue, lane) triple with held events.
type heldLane struct {
	ws         uuid.UUID
	dest, lane string
}

// sweep is one pass of the fair-share sweep over the lanes with held events: it releases
// held events into free slots (every held event, up to BatchSize per lane, when the queue is
// not fair-shared), queues the workspaces it released events of, and frees the stale slots
// of full lanes (released at the next pass). With nothing held it is one index descent.
func (d *Dispatcher) sweep(ctx context.Context) error {
	rows, err := d.pool.Query(ctx, `SELECT workspace_id, destination, lane FROM outbox_held_lanes($1)`, heldLanesLimit)
	if err != nil {
		return fmt.Errorf("outbox.Dispatcher.sweep: %w", err)
	}
	lanes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (l heldLane, err error) {
		return l, r.Scan(&l.ws, &l.dest, &l.lane)
	})
	if err != nil {
		return fmt.Errorf("outbox.Dispatcher.sweep: %w", err)
	}
	d.held.replace(lanes)
	if err := d.unhold(ctx, lanes, true, true); err != nil {
		return fmt.Errorf("outbox.Dispatcher.sweep: %w", err)
	}
	return nil
}

// heldLanes is what a dispatcher knows of the lanes with held events, per workspace: those
// its claims held rows of, and those the last sweep listed (every lane with held events).
// A round gives their free slots to their held events before it claims (refill), so that
// a slot freed by a task's end is refilled by the round the end's wake-up causes.
type heldLanes struct {
	mu sync.Mutex
	m  map[uuid.UUID][]heldLane
	// dests counts, per queue, the known lanes with held events of each workspace: a lane
	// of a queue where no other workspace has any is alone (FairShare.AloneFactor).
	dests map[string]map[uuid.UUID]int
	// unread holds, per workspace, the lanes whose last claim was full and held rows of
	// them: the lane has pending requests its claims have not read yet, which its next claim
	// admits into its free slots, oldest first. A refill of such a lane would set held
	// requests pending behind them (due now), where the claims would hold them again before
	// reaching them: every admission while a backlog is first read would cost its request
	// a hold, a release and another hold.
	unread map[uuid.UUID][]heldLane
	// front holds, per lane, the last event a refill released (unholdSQL's walk starts
	// after it).
	front map[heldLane]heldMark
}

// heldMark is a position in a lane's held events: (created_at, id).
type heldMark struct {
	at time.Time
	id uuid.UUID
}

// after reports whether m comes after o in the lanes' order (created_at, id).
func (m heldMark) after(o heldMark) bool {
	return m.at.After(o.at) || (m.at.Equal(o.at) && bytes.Compare(m.id[:], o.id[:]) > 0)
}

// retreat moves the front mark of each held row's lane among rows back before the row when
// the row is not after it (a released event a claim held again: the next refill walks from
// it, not the sweep a SweepInterval later).
func (h *heldLanes) retreat(rows []claimed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range rows {
		l := heldLane{ws: r.WorkspaceID, dest: r.Destination, lane: r.Lane}
		cur, ok := h.front[l]
		if !r.Held || !ok {
			continue
		}
		if !(heldMark{at: r.CreatedAt, id: r.ID}).after(cur) {
			h.front[l] = heldMark{at: r.CreatedAt, id: uuid.Nil}
		}
	}
}

// frontOf returns the front mark of l (the zero mark for none).
func (h *heldLanes) frontOf(l heldLane) heldMark {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.front[l]
}

// advance moves the front mark of l to m when m is after it.
func (h *heldLanes) advance(l heldLane, m heldMark) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.front == nil {
		h.front = map[heldLane]heldMark{}
	}
	if m.after(h.front[l]) {
		h.front[l] = m
	}
}

// add records lanes.
func (h *heldLanes) add(lanes []heldLane) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range lanes {
		if !slices.Contains(h.m[l.ws], l) {
			h.m[l.ws] = append(h.m[l.ws], l)
			h.count(l)
		}
	}
}

// count adds l to dests; h.mu is held.
func (h *heldLanes) count(l heldLane) {
	if h.dests == nil {
		h.dests = map[string]map[uuid.UUID]int{}
	}
	if h.dests[l.dest] == nil {
		h.dests[l.dest] = map[uuid.UUID]int{}
	}
	h.dests[l.dest][l.ws]++
}

// replace makes lanes (a sweep's listing) the lanes known.
func (h *heldLanes) replace(lanes []heldLane) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.m)
	clear(h.dests)
	clear(h.unread)
	listed := make(map[heldLane]struct{}, len(lanes))
	for _, l := range lanes {
		h.m[l.ws] = append(h.m[l.ws], l)
		h.count(l)
		listed[l] = struct{}{}
	}
	// The marks of the lanes with nothing held any more go.
	for l := range h.front {
		if _, ok := listed[l]; !ok {
			delete(h.front, l)
		}
	}
}

// alone reports whether no workspace but ws is known to have events held in queue dest.
func (h *heldLanes) alone(ws uuid.UUID, dest string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	byWS := h.dests[dest]
	_, mine := byWS[ws]
	return len(byWS) == 0 || (mine && len(byWS) == 1)
}

// capOf is the slots a lane of ws in queue dest may take now: fairShare.alone while no
// other workspace is known to have events held in dest, else the slots.
func (d *Dispatcher) capOf(ws uuid.UUID, dest string) int {
	if d.fair.alone > d.fair.slots && d.held.alone(ws, dest) {
		return d.fair.alone
	}
	return d.fair.slots
}

// aloneOf returns the (workspace, queue) pairs of wss and the fair-shared queues whose lanes
// may take fairShare.alone slots (capOf), as the claim's parallel arrays.
func (d *Dispatcher) aloneOf(wss []uuid.UUID) (ws []uuid.UUID, dests []string) {
	ws, dests = []uuid.UUID{}, []string{}
	if d.fair.alone <= d.fair.slots {
		return ws, dests
	}
	for _, w := range wss {
		for _, q := range d.fair.queues {
			if d.held.alone(w, q) {
				ws, dests = append(ws, w), append(dests, q)
			}
		}
	}
	return ws, dests
}

// of returns the known lanes of wss but those whose last claim left requests unread.
func (h *heldLanes) of(wss []uuid.UUID) []heldLane {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []heldLane
	for _, ws := range wss {
		for _, l := range h.m[ws] {
			if !slices.Contains(h.unread[ws], l) {
				out = append(out, l)
			}
		}
	}
	return out
}

// read returns lanes but those whose last claim left requests unread.
func (h *heldLanes) read(lanes []heldLane) []heldLane {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(lanes), func(l heldLane) bool { return slices.Contains(h.unread[l.ws], l) })
}

// claimed records the lanes of ws whose claim (full: it read as many rows as it could)
// held rows: those left unread when full, none otherwise.
func (h *heldLanes) claimed(ws uuid.UUID, full bool, held []heldLane) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unread == nil {
		h.unread = map[uuid.UUID][]heldLane{}
	}
	delete(h.unread, ws)
	if !full {
		return
	}
	for _, l := range held {
		if l.ws == ws {
			h.unread[ws] = append(h.unread[ws], l)
		}
	}
}

// refill gives the free slots of the held lanes known of wss to their oldest held events
// (pending, due now), for the claim that follows to admit them. A failure is logged: the
// sweep releases them.
func (d *Dispatcher) refill(ctx context.Context, wss []uuid.UUID) {
	if d.fair.slots == 0 {
		return
	}
	lanes := d.held.of(wss)
	if len(lanes) == 0 {
		return
	}
	if err := d.unhold(ctx, lanes, false, false); err != nil && ctx.Err() == nil {
		d.log.Warn("outbox fair-share refill failed; the sweep releases the held events", "error", SanitizeError(err, d.cfg.ErrorMaxLen))
	}
}

// unhold gives the free slots of lanes to their oldest held events (unholdSQL) and, with
// push, queues the workspaces it released events of; with stale, it also frees the stale
// slots of the full lanes (staleSlotsSQL). A round runs it on the lanes it held rows of,
// after its claim: a row held because a concurrent claim (another dispatcher's) took the
// slot it chose, while another slot of the lane was free, is released at once instead of
// at the next sweep.
func (d *Dispatcher) unhold(ctx context.Context, lanes []heldLane, stale, push bool) error {
	for len(lanes) > 0 {
		// One statement per RoundWorkspaces workspaces, scoped to them.
		var wss []uuid.UUID
		var ws []uuid.UUID
		var dests, lns []string
		var caps []int
		var ats []time.Time
		var afters []uuid.UUID
		seen := map[uuid.UUID]bool{}
		n := 0
		for n < len(lanes) && (seen[lanes[n].ws] || len(wss) < d.cfg.RoundWorkspaces) {
			if !seen[lanes[n].ws] {
				seen[lanes[n].ws] = true
				wss = append(wss, lanes[n].ws)
			}
			ws, dests, lns = append(ws, lanes[n].ws), append(dests, lanes[n].dest), append(lns, lanes[n].lane)
			caps = append(caps, d.capOf(lanes[n].ws, lanes[n].dest))
			// The sweep walks from the front; a refill after its lane's mark.
			m := heldMark{at: time.Unix(0, 0)}
			if !stale {
				if f := d.held.frontOf(lanes[n]); !f.at.IsZero() {
					m = f
				}
			}
			ats, afters = append(ats, m.at), append(afters, m.id)
			n++
		}
		lanes = lanes[n:]
		type state struct {
			heldLane
			capacity int
			used     int
			oldest   float64
			released int
			last     heldMark
		}
		var got []state
		st := scopedStmt{wss: wss, sql: unholdSQL, args: []any{ws, dests, d.fairSlots(), d.cfg.BatchSize, lns, caps, ats, afters},
			read: func(rows pgx.Rows) error {
				for rows.Next() {
					var s state
					var at *time.Time
					var id *uuid.UUID
					if err := rows.Scan(&s.ws, &s.dest, &s.lane, &s.capacity, &s.used, &s.oldest, &s.released, &at, &id); err != nil {
						return err
					}
					if at != nil && id != nil {
						s.last = heldMark{at: *at, id: *id}
					}
					got = append(got, s)
				}
				return rows.Err()
			}}
		if err := inWorkspaces(ctx, d.pool, []scopedStmt{st})[0]; err != nil {
			return err
		}
		for _, s := range got {
			if !stale && s.released > 0 {
				d.held.advance(s.heldLane, s.last)
			}
			if push && s.released > 0 {
				d.queue.push(s.ws)
			}
			q, fair := d.fair.byQueue[s.dest]
			if !stale || !fair || d.fair.slots == 0 || s.used < s.capacity || s.oldest < d.cfg.FairShare.StaleSlotAge.Seconds() {
				continue
			}
			stale := scopedStmt{wss: []uuid.UUID{s.ws}, sql: fmt.Sprintf(staleSlotsSQL, pgx.Identifier{q.Table}.Sanitize()),
				args: []any{s.ws, s.dest, d.cfg.FairShare.StaleSlotAge.Seconds(), s.lane}}
			if err := inWorkspaces(ctx, d.pool, []scopedStmt{stale})[0]; err != nil {
				return err
			}
		}
	}
	return nil
}

// heldLanesOf returns the distinct lanes of the held rows among rows.
func heldLanesOf(rows []claimed) []heldLane {
	var out []heldLane
	seen := map[heldLane]bool{}
	for _, r := range rows {
		l := heldLane{ws: r.WorkspaceID, dest: r.Destination, lane: r.Lane}
		if r.Held && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// fairSlots is the unholdSQL's $3 for the sweep: the slots when fair share is on, else 0
// (release everything).
func (d *Dispatcher) fairSlots() int {
	if len(d.fair.queues) == 0 {
		return 0
	}
	return d.fair.slots
}

// refreshHeld sets listing_fair_share_held{flow} from outbox_held_counts.
func (d *Dispatcher) refreshHeld(ctx context.Context) error {
	rows, err := d.pool.Query(ctx, `SELECT destination, events FROM outbox_held_counts()`)
	if err != nil {
		return fmt.Errorf("outbox.Dispatcher.refreshHeld: %w", err)
	}
	counts := map[string]float64{}
	for rows.Next() {
		var dest string
		var n int64
		if err := rows.Scan(&dest, &n); err != nil {
			rows.Close()
			return fmt.Errorf("outbox.Dispatcher.refreshHeld: %w", err)
		}
		counts[d.flowOf(dest)] += float64(n)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("outbox.Dispatcher.refreshHeld: %w", err)
	}
	for _, q := range d.cfg.FairShare.Queues {
		counts[d.flowOf(q.Queue)] += 0 // every flow shows, at 0 when nothing is held
	}
	for flow, n := range counts {
		d.metrics.FairShareHeld.WithLabelValues(flow).Set(n)
	}
	return nil
}

// flowOf names queue dest's flow for the gauge (the queue itself when not configured).
func (d *Dispatcher) flowOf(dest string) string {
	if q, ok := d.fair.byQueue[dest]; ok && q.Flow != "" {
		return q.Flow
	}
	return dest
}

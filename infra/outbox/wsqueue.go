package outbox

import (
	"context"
	"sync"

	"github.com/google/uuid"
)

// wsQueue holds the workspaces waiting for a batch, each at most once, in two FIFOs: fresh
// workspaces (found by discovery or notification) go before continuing ones (re-queued
// after a full batch), so a new event waits for at most the batches already in flight, and
// backlogs take turns. A workspace is claimed by one round at a time: pop passes over the
// workspaces whose claim is running (they keep their place) until claimed reports it ended.
// Two concurrent claims of a workspace would take the same free slots of a fair-shared lane
// (fair share), one of them holding its rows instead, and would each get a smaller batch;
// one after the other, the second claims what the first left. Publishing and marking still
// overlap the next claim.
type wsQueue struct {
	mu       sync.Mutex
	fresh    []uuid.UUID
	cont     []uuid.UUID
	queued   map[uuid.UUID]struct{}
	claiming map[uuid.UUID]struct{}
	signal   chan struct{}
}

func newWSQueue() *wsQueue {
	return &wsQueue{queued: map[uuid.UUID]struct{}{}, claiming: map[uuid.UUID]struct{}{}, signal: make(chan struct{}, 1)}
}

// claimed reports that the claim of ids (popped together) ended.
func (q *wsQueue) claimed(ids []uuid.UUID) {
	q.mu.Lock()
	for _, id := range ids {
		delete(q.claiming, id)
	}
	more := len(q.fresh)+len(q.cont) > 0
	q.mu.Unlock()
	if more {
		q.notify()
	}
}

// push queues fresh workspaces.
func (q *wsQueue) push(ids ...uuid.UUID) { q.add(false, ids) }

// requeue queues a workspace that just had a full batch, behind every other.
func (q *wsQueue) requeue(id uuid.UUID) { q.add(true, []uuid.UUID{id}) }

func (q *wsQueue) add(cont bool, ids []uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	q.mu.Lock()
	for _, id := range ids {
		if _, ok := q.queued[id]; ok {
			continue
		}
		q.queued[id] = struct{}{}
		if cont {
			q.cont = append(q.cont, id)
		} else {
			q.fresh = append(q.fresh, id)
		}
	}
	q.mu.Unlock()
	q.notify()
}

func (q *wsQueue) notify() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take moves up to n ids not in skip from the front of *from to the end of out; the ids
// it passes over keep their order at the front.
func take(from *[]uuid.UUID, n int, out []uuid.UUID, skip map[uuid.UUID]struct{}) []uuid.UUID {
	src := *from
	var kept []uuid.UUID
	i := 0
	for ; i < len(src) && n > 0; i++ {
		if _, busy := skip[src[i]]; busy {
			kept = append(kept, src[i])
			continue
		}
		out = append(out, src[i])
		n--
	}
	// src[i-len(kept):i] receives the passed-over ids, the front before it is dropped.
	copy(src[i-len(kept):i], kept)
	clear(src[:i-len(kept)])
	*from = src[i-len(kept):]
	return out
}

// pop takes up to n queued workspaces whose claim is not running, fresh ones first (at most
// n-1 of them while a continuing one waits), waiting for at least one, and marks them
// claiming (the caller reports the claim's end with claimed). It returns false when ctx is
// cancelled.
func (q *wsQueue) pop(ctx context.Context, n int) ([]uuid.UUID, bool) {
	for {
		if ctx.Err() != nil {
			return nil, false
		}
		q.mu.Lock()
		// Fresh workspaces first; but a round of several keeps one place for a continuing
		// backlog, so that a steady stream of new workspaces cannot starve it.
		freshMax := n
		if n > 1 && len(q.cont) > 0 {
			freshMax = n - 1
		}
		out := take(&q.fresh, freshMax, nil, q.claiming)
		out = take(&q.cont, n-len(out), out, q.claiming)
		for _, id := range out {
			delete(q.queued, id)
			q.claiming[id] = struct{}{}
		}
		more := len(q.fresh)+len(q.cont) > 0
		q.mu.Unlock()
		if len(out) > 0 {
			if more {
				q.notify()
			}
			return out, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-q.signal:
		}
	}
}

package outbox

import (
	"context"
	"sync"

	"github.com/google/uuid"
)

// wsQueue holds the workspaces waiting for a batch, each at most once, in two FIFOs: fresh
// workspaces (found by discovery or notification) go before continuing ones (re-queued
// after a full batch), so a new event waits for at most the batches already in flight, and
// backlogs take turns.
type wsQueue struct {
	mu     sync.Mutex
	fresh  []uuid.UUID
	cont   []uuid.UUID
	queued map[uuid.UUID]struct{}
	signal chan struct{}
}

func newWSQueue() *wsQueue {
	return &wsQueue{queued: map[uuid.UUID]struct{}{}, signal: make(chan struct{}, 1)}
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

// take moves up to n ids from the front of *from to the end of out.
func take(from *[]uuid.UUID, n int, out []uuid.UUID) []uuid.UUID {
	k := min(n, len(*from))
	out = append(out, (*from)[:k]...)
	clear((*from)[:k])
	*from = (*from)[k:]
	return out
}

// pop takes up to n queued workspaces, fresh ones first (at most n-1 of them while a
// continuing one waits), waiting for at least one. It returns false when ctx is cancelled.
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
		out := take(&q.fresh, freshMax, nil)
		out = take(&q.cont, n-len(out), out)
		for _, id := range out {
			delete(q.queued, id)
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

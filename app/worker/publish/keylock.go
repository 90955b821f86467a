package publish

import (
	"context"
	"sync"

	"github.com/google/uuid"
)

// keyLock is a set of mutexes, one per key while someone holds or waits for it. Waiting
// honors the context. The zero value is ready to use.
type keyLock struct {
	mu    sync.Mutex
	locks map[uuid.UUID]*keyEntry
}

type keyEntry struct {
	ch   chan struct{} // holds one token while the key is locked
	refs int           // holders and waiters
}

// lock takes the key's mutex, or returns ctx's error. Call the returned function once to
// release it.
func (k *keyLock) lock(ctx context.Context, key uuid.UUID) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[uuid.UUID]*keyEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyEntry{ch: make(chan struct{}, 1)}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()

	select {
	case e.ch <- struct{}{}:
		return func() {
			<-e.ch
			k.release(key, e)
		}, nil
	case <-ctx.Done():
		k.release(key, e)
		return nil, ctx.Err()
	}
}

func (k *keyLock) release(key uuid.UUID, e *keyEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(k.locks, key)
	}
}

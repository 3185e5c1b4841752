package driver

import (
	"context"
	"slices"
	"sync"
)

// Queue is a set of per-key FIFO queues of one process's acquirers, so that
// at most one of them at a time talks to the lock service about a key.
//
// A backend takes a key's Turn before it asks its service for the key, and
// passes it on (Turn.Done) when it no longer needs to act alone for the key:
// after a failed try, or, when one grant per key and process is all the
// service allows (a flock per file description, a Mutex key per etcd
// session), when the grant ends. Waiters get the turn in arrival order, a
// waiter whose context ends leaves the queue without losing a hand-off, and
// a key nobody holds or awaits takes no memory: a Queue starts no
// goroutine and keeps no entry for it. The queue also keeps the key out of
// the service for the process's other acquirers: a herd of one process is
// one request.
//
// The zero value is an empty Queue
// ready to use; a Queue must not be copied after first use. It is safe for
// concurrent use.
//
// V is what a backend records with a turn for lookups by key (Turn.Set,
// Queue.Holder), usually its held lease; use struct{} if it needs none.
type Queue[V any] struct {
	mu    sync.Mutex
	lines map[string]*line[V] // keys whose turn is taken; guarded by mu
}

// line is the queue of one key. It exists while the key's turn is taken.
type line[V any] struct {
	turn    *Turn[V]        // the current turn
	waiters []chan *Turn[V] // first served first; each buffered, capacity 1
}

// Turn is the right to act alone for one key within a Queue. Exactly one
// Turn of a key exists at a time.
type Turn[V any] struct {
	q    *Queue[V]
	key  string
	done bool // guarded by q.mu
	v    V    // guarded by q.mu
}

// Try takes key's turn if nobody has it or waits for it, and reports
// whether it did.
func (q *Queue[V]) Try(key string) (*Turn[V], bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lines[key] != nil {
		return nil, false
	}
	return q.startLocked(key), true
}

// Wait takes key's turn, waiting behind those who asked for it before. If
// ctx ends first (or has ended) it returns ctx.Err() and leaves the queue; a
// turn handed to it meanwhile passes to the next waiter.
func (q *Queue[V]) Wait(ctx context.Context, key string) (*Turn[V], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return q.Enter(key).Wait(ctx)
}

// Place is a place in a key's queue, taken by Enter: the turn comes to it
// after those who entered before. Its Wait must be called once, or the
// line stops at it.
type Place[V any] struct {
	q    *Queue[V]
	l    *line[V]
	ch   chan *Turn[V] // nil if the place had the turn at once
	turn *Turn[V]      // the turn taken at Enter, if nobody had it
}

// Enter takes a place in key's queue now, without waiting: whoever enters
// after it is served after it. It lets a backend take its place in line
// atomically with a change of its own state (under its own mutex), as
// Wait, which may block, cannot. The turn comes with the place's Wait.
func (q *Queue[V]) Enter(key string) *Place[V] {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lines[key]
	if l == nil {
		return &Place[V]{turn: q.startLocked(key)}
	}
	ch := make(chan *Turn[V], 1)
	l.waiters = append(l.waiters, ch)
	return &Place[V]{q: q, l: l, ch: ch}
}

// Wait waits for the turn of the place. If ctx ends first (or has ended)
// it returns ctx.Err() and leaves the queue; a turn handed to the place
// meanwhile passes to the next waiter.
func (p *Place[V]) Wait(ctx context.Context) (*Turn[V], error) {
	if p.turn != nil {
		if err := ctx.Err(); err != nil {
			p.turn.Done()
			return nil, err
		}
		return p.turn, nil
	}
	if ctx.Err() == nil {
		select {
		case t := <-p.ch:
			return t, nil
		case <-ctx.Done():
		}
	}
	q := p.q
	q.mu.Lock()
	if i := slices.Index(p.l.waiters, p.ch); i >= 0 {
		p.l.waiters = slices.Delete(p.l.waiters, i, i+1)
		q.mu.Unlock()
		return nil, ctx.Err()
	}
	q.mu.Unlock()
	// Handed to us as we gave up: the send happened under q.mu, so it is
	// in the channel now.
	(<-p.ch).Done()
	return nil, ctx.Err()
}

func (q *Queue[V]) startLocked(key string) *Turn[V] {
	if q.lines == nil {
		q.lines = map[string]*line[V]{}
	}
	t := &Turn[V]{q: q, key: key}
	q.lines[key] = &line[V]{turn: t}
	return t
}

// Done passes the turn to the next waiter, or frees the key if none waits.
// It clears the value set with Set. Calls after the first do nothing, so
// that two paths that may both end a turn can both call it.
func (t *Turn[V]) Done() {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	var zero V
	t.v = zero
	l := q.lines[t.key]
	if len(l.waiters) == 0 {
		delete(q.lines, t.key)
		return
	}
	ch := l.waiters[0]
	l.waiters = slices.Delete(l.waiters, 0, 1)
	l.turn = &Turn[V]{q: q, key: t.key}
	ch <- l.turn // buffered and sent once: never blocks
}

// Key returns the key of the turn.
func (t *Turn[V]) Key() string { return t.key }

// Set records v with the turn, for Holder, until Set is called again or the
// turn is done. A turn that is done ignores it.
func (t *Turn[V]) Set(v V) {
	t.q.mu.Lock()
	defer t.q.mu.Unlock()
	if !t.done {
		t.v = v
	}
}

// Holder returns the value set on key's current turn, or the zero value if
// nobody has the turn or its holder set nothing.
func (q *Queue[V]) Holder(key string) V {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.lines[key]; l != nil {
		return l.turn.v
	}
	var zero V
	return zero
}

// Len returns the number of keys whose turn is taken (and which therefore
// take memory); it is 0 once every turn is done and no one waits.
func (q *Queue[V]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.lines)
}

// Waiting returns the number of acquirers waiting for key's turn, not
// counting the one that has it.
func (q *Queue[V]) Waiting(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.lines[key]; l != nil {
		return len(l.waiters)
	}
	return 0
}

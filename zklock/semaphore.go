package zklock

// Permits of counting semaphores, in the layout of Curator's
// InterProcessSemaphoreV2 (see Semaphores in the package documentation).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

var _ driver.Semaphores = (*Backend)(nil)

// The layout of a semaphore, as Curator's InterProcessSemaphoreV2 has it:
// under the semaphore's path, locksChild holds the nodes of its internal
// mutex (an InterProcessMutex: "_c_<uuid>-lock-<sequence>"), and
// leasesChild the lease nodes, one per live permit, named
// "_c_<uuid>-lease-<sequence>".
const (
	leasesChild = "leases"
	locksChild  = "locks"
	leaseName   = "lease-"
)

// semaphoreChild reports whether name, a child of a lock path, is one of
// the two parents a semaphore at that path keeps there: never a lock node,
// whose names all start with the protection prefix.
func semaphoreChild(name string) bool { return name == leasesChild || name == locksChild }

// AcquirePermit implements driver.Semaphores, as Curator's
// InterProcessSemaphoreV2 acquires a lease at the path KeyPath(key): it
// takes the semaphore's internal mutex (an acquire of the lock at
// KeyPath(key)+"/locks", in arrival order), then, holding it, counts the
// lease nodes under KeyPath(key)+"/leases" and, while there are sem.Limit
// or more, waits for a change of them (a children watch); once there are
// fewer, it creates its lease node, which is the permit, and gives the
// mutex back. The permit's token is the lease node's czxid, drawn by the
// create that grants it; the permit is held as a lock is (see Guarantees),
// with the lease node for the lock node.
//
// Curator's layout stores no limit: sem.Limit is never refused, and the
// limit holds among the askers that name the same one (see Semaphores in
// the package documentation). It names no slots either: a permit asked
// with sem.Slots is refused with an error matching errors.ErrUnsupported,
// before anything is created. A try (opts.Wait false) fails with
// distlock.ErrNotAcquired when the mutex is held (someone is in line
// first) or sem.Limit permits are live. An acquire that fails or is
// cancelled deletes the nodes it created, as a lock's acquire does.
func (b *Backend) AcquirePermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckPermit(ctx, key, sem, opts); err != nil {
		return nil, err
	}
	if sem.Slots {
		return nil, fmt.Errorf("zklock: Curator's semaphore layout has no slots: %w", errors.ErrUnsupported)
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	// Ignored for permits: the semaphore's mutex is an InterProcessMutex,
	// of "-lock-" nodes, as Curator's clients of the semaphore see it.
	opts.Election, opts.Writer = "", false
	l, err := b.permit(ctx, key, sem.Limit, opts)
	if err != nil {
		if ctx.Err() != nil && !errorsIsClosed(err) {
			return nil, driver.Canceled(ctx)
		}
		return nil, err
	}
	return l, nil
}

// permit takes the semaphore's mutex, waits for room under it, grants the
// permit and gives the mutex back, whatever happened.
func (b *Backend) permit(ctx context.Context, key string, limit int, opts driver.AcquireOptions) (*lease, error) {
	dir := b.KeyPath(key)
	mopts := opts
	mopts.OnLost = nil // the mutex is given back before AcquirePermit returns
	m := &acquire{b: b, key: key, dir: dir + "/" + locksChild, opts: mopts}
	mutex, err := m.run(ctx)
	if err != nil {
		return nil, err
	}
	// Not bound by ctx: a mutex left behind would stop the semaphore for
	// everyone (see giveBack).
	defer m.giveBack(mutex)
	r := &room{b: b, key: key, dir: dir + "/" + leasesChild, limit: limit, opts: opts, mutex: mutex}
	if !opts.Wait {
		wctx, cancel := b.request(ctx)
		defer cancel()
		l, held, err := r.try(ctx, wctx, nil)
		if held != nil {
			err = fmt.Errorf("%w: zklock: %d permits live", driver.ErrNotAcquired, limit)
		}
		return l, err
	}
	w := &watcher{wake: make(chan struct{}, 1)}
	defer b.watch(w, "")
	return driver.Wait(ctx, driver.Waiter[*lease]{
		Try: func(ctx context.Context, _ bool) (*lease, *driver.Held, error) {
			return r.try(ctx, ctx, w)
		},
		// The mutex is held in its session only: once it ends, the wait
		// has no place left.
		Closing: mutex.sess.done,
		Closed: func() error {
			if b.ctx.Err() != nil {
				return ErrClosed
			}
			return fmt.Errorf("%w: %w while waiting", driver.ErrUnavailable, b.sessionErr(mutex.sess))
		},
	})
}

// giveBack gives the semaphore's mutex back, whatever happened to the
// permit: it ends the mutex's lease here and deletes its node as a failed
// acquire drops its own (see acquire.drop): one try within the request
// timeout, then, if ZooKeeper did not answer, tries in the background
// until the node is gone or its session has ended. Whether ctx was
// cancelled does not change that bound: a cancelled acquire, like a
// lock's, returns once its nodes are gone, as long as ZooKeeper answers.
func (m *acquire) giveBack(mutex *lease) {
	mutex.end()
	m.drop(&node{path: mutex.path, sess: mutex.sess})
}

// room is the wait, holding the semaphore's mutex, for fewer live permits
// than the limit.
type room struct {
	b     *Backend
	key   string
	dir   string // the leases' parent
	limit int
	opts  driver.AcquireOptions
	mutex *lease
	// watched is set while a children watch on dir is set in the zk
	// client and has not fired: the zk client keeps every watch set until
	// its event, so a watch is set again only once it fired.
	watched bool
}

// try counts the lease nodes, within wctx (ctx, or a try's request
// timeout), and grants the permit if there are fewer than the limit.
// Otherwise, waiting (w not nil), it leaves a children watch on the
// leases set, whose event wakes w, and returns a Held on w's wake-up; a
// single try (w nil) watches nothing. A transient failure while waiting
// is answered with a Held and a backoff, as a lock's waiter does: the
// mutex keeps its place while its session lives.
func (r *room) try(ctx, wctx context.Context, w *watcher) (*lease, *driver.Held, error) {
	b := r.b
	failed := func(err error) (*lease, *driver.Held, error) {
		if w == nil || !errors.Is(err, driver.ErrUnavailable) {
			return nil, nil, err
		}
		w.failures++
		d, _ := driver.ExponentialBackoff(dropRetryMin, dropRetryMax).Backoff(w.failures)
		return nil, &driver.Held{RetryIn: d}, nil
	}
	if w != nil {
		if r.watched && b.took(w)&endsChildren != 0 {
			r.watched = false
		}
		// Registered before the listing that sets the watch: its event
		// comes after the listing's reply.
		b.watch(w, r.dir)
	}
	rctx, cancel := b.request(wctx)
	setWatch := w != nil && !r.watched
	children, err := call(rctx, b, func() ([]string, error) {
		if setWatch {
			c, _, _, err := b.conn.ChildrenW(r.dir)
			return c, err
		}
		c, _, err := b.conn.Children(r.dir)
		return c, err
	}, nil)
	switch {
	case err == nil && setWatch:
		r.watched = true
	case errors.Is(err, zk.ErrNoNode):
		children, err = nil, nil // no lease yet (no watch is set on a missing node)
	}
	err = b.sortErr(ctx, rctx, err)
	cancel()
	if err != nil {
		return failed(err)
	}
	if len(children) >= r.limit {
		if w == nil {
			return nil, &driver.Held{}, nil
		}
		w.failures = 0
		return nil, &driver.Held{Wake: w.wake}, nil
	}
	// With room, the failures go on counting until the lease create
	// succeeds: a create that fails at once each time must not be tried
	// again after the shortest pause each time.
	l, err := r.grant(ctx)
	if err != nil && b.sessionErr(r.mutex.sess) == nil {
		// The create failed, and its node, if any, is dropped (see
		// acquire.create): while the mutex's session lives, a transient
		// failure is tried again, as a failed count is.
		return failed(err)
	}
	return l, nil, err
}

// grant creates our lease node, which is the permit: the create is made
// while we hold the mutex, after a count of fewer leases than the limit,
// so its czxid, the token, is drawn at the grant. The node must be of the
// mutex's session: a create that ran in a later session ran after the
// mutex was gone, and is deleted.
func (r *room) grant(ctx context.Context) (*lease, error) {
	b := r.b
	newID := newUUID
	if b.uuid != nil {
		newID = b.uuid
	}
	uuid, err := newID()
	if err != nil {
		return nil, fmt.Errorf("%w: zklock: random UUID: %w", driver.ErrUnavailable, err)
	}
	a := &acquire{b: b, key: r.key, dir: r.dir, opts: r.opts, uuid: uuid, name: leaseName}
	// The create confirms the session through the leader: the grant's
	// validity counts from its send time (see syncThen).
	sent := time.Now()
	n, _, err := a.create(ctx)
	if err != nil {
		return nil, err
	}
	if n.sess != r.mutex.sess {
		a.drop(n)
		return nil, fmt.Errorf("%w: %w: the semaphore's mutex was held in another session", driver.ErrUnavailable, ErrSessionLost)
	}
	l, err := a.grant(n, sent)
	if err != nil {
		a.drop(n)
		return nil, err
	}
	if a.lostReply {
		a.dropOthers(n)
	}
	return l, nil
}

// dropOthers deletes, after a create of our lease node whose reply was
// lost, the other lease nodes with our protected name: that create may
// have been applied after the claim's listing (which a server that had
// not yet applied it answered), and its node would count against the
// limit, a permit held by nobody, until our release sweeps it. A sync of
// the leases' parent first makes the server that answers the listing
// catch up with the leader. It runs while we still hold the mutex, so
// that no count of another asker sees the extra node; if ZooKeeper does
// not answer within the request timeout, it goes on in the background
// until it succeeds or our session has ended (which deletes the nodes).
func (a *acquire) dropOthers(n *node) {
	b := a.b
	b.dropLater(func(ctx context.Context) error {
		if b.sessionErr(n.sess) != nil {
			return nil
		}
		if _, err := call(ctx, b, func() (string, error) { return b.conn.Sync(a.dir) }, nil); err != nil {
			return err
		}
		found, err := a.find(ctx)
		if err != nil {
			return err
		}
		for _, p := range found {
			if p == n.path {
				continue
			}
			if err := b.deleteNode(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// Permits implements driver.Semaphores: the lease nodes under
// KeyPath(key)+"/leases", whoever created them (this package, or Curator's
// InterProcessSemaphoreV2 on the same path), in token order, each with its
// czxid as Token, its data as Owner and its creation time on the server as
// Since; Waiting is the number of nodes of the semaphore's mutex, which
// every waiter has; Limit is driver.UnknownLimit, since the layout stores
// none. A waiter of Curator's is counted twice: in Holders, since it
// creates its lease node before it waits (this package creates it when
// granted), and in Waiting, by its mutex node. Each request (the two
// listings, and the read of each lease node) has the request timeout of
// its own.
func (b *Backend) Permits(ctx context.Context, key string) (driver.PermitState, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.PermitState{}, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return driver.PermitState{}, err
	}
	st, err := b.permits(ctx, b.KeyPath(key))
	if err != nil {
		return driver.PermitState{}, err
	}
	for i := range st.Holders {
		st.Holders[i].Key = key
	}
	return st, nil
}

func (b *Backend) permits(ctx context.Context, dir string) (driver.PermitState, error) {
	st := driver.PermitState{Limit: driver.UnknownLimit}
	children := func(p string) ([]string, error) {
		rctx, cancel := b.request(ctx)
		defer cancel()
		c, err := call(rctx, b, func() ([]string, error) {
			c, _, err := b.conn.Children(p)
			return c, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		return c, b.sortErr(ctx, rctx, err)
	}
	leases, err := children(dir + "/" + leasesChild)
	if err != nil {
		return st, err
	}
	for _, c := range leases {
		type got struct {
			data []byte
			st   *zk.Stat
		}
		rctx, cancel := b.request(ctx)
		g, err := call(rctx, b, func() (got, error) {
			data, st, err := b.conn.Get(dir + "/" + leasesChild + "/" + c)
			return got{data, st}, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			cancel()
			continue // released meanwhile
		}
		err = b.sortErr(ctx, rctx, err)
		cancel()
		if err != nil {
			return st, err
		}
		st.Holders = append(st.Holders, driver.Holder{
			Token: uint64(g.st.Czxid),
			Owner: string(g.data),
			Since: time.UnixMilli(g.st.Ctime),
		})
	}
	slices.SortFunc(st.Holders, func(x, y driver.Holder) int { return cmp.Compare(x.Token, y.Token) })
	waiting, err := children(dir + "/" + locksChild)
	if err != nil {
		return st, err
	}
	st.Waiting = len(waiting)
	return st, nil
}

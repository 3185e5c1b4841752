package zklock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// maxCreates bounds the creates of one acquire: a create is redone when its
// node turns out to belong to an earlier session, or when the parent was
// reaped between creating it and creating the node.
const maxCreates = 8

// acquire is one Acquire call.
type acquire struct {
	b    *Backend
	key  string
	dir  string // the lock's path, parent of the nodes
	opts driver.AcquireOptions
	uuid string // of our node's protected name
	// lostReply is set once a create's reply was lost: that create may
	// still be applied later, as a node with our protected name that the
	// release must look for.
	lostReply bool
	// name, if not empty, is what our node is named after its protected
	// prefix, in place of lockName or latchName: leaseName for the lease
	// node of a permit (see semaphore.go), which is created without a
	// listing behind it.
	name string
	// shared is set for a shared grant (AcquireShared): its node is a
	// "__READ__" node, granted while no exclusive node is ahead of it.
	shared bool
}

// node is our lock node, known to exist in a live session.
type node struct {
	path  string
	name  string
	czxid int64
	sess  *session
	// created is the send time of the create that made the node, when the
	// acquire's first listing follows it (see list); zero otherwise.
	created time.Time
}

func errorsIsClosed(err error) bool { return errors.Is(err, ErrClosed) }

func (a *acquire) run(ctx context.Context) (*lease, error) {
	newID := newUUID
	if a.b.uuid != nil {
		newID = a.b.uuid
	}
	uuid, err := newID()
	if err != nil {
		return nil, fmt.Errorf("%w: zklock: random UUID: %w", driver.ErrUnavailable, err)
	}
	a.uuid = uuid
	n, first, err := a.create(ctx)
	if err != nil {
		return nil, err
	}
	l, err := a.wait(ctx, n, first)
	if err != nil {
		// Whatever went wrong, our node must not stay to block the queue.
		a.drop(n)
		return nil, err
	}
	return l, nil
}

// data is what our node holds: the owner, as text (Curator writes the
// host's address by default; either is a plain byte string to it); for a
// candidacy, the candidate's value as it is, which Curator's LeaderLatch
// reads as the participant id (UTF-8, empty for none).
func (a *acquire) data() []byte {
	if a.opts.Owner != "" || a.candidacy() {
		return []byte(a.opts.Owner)
	}
	return []byte(hostname())
}

// candidacy reports whether the acquire is a candidacy in an election
// (see Elections in the package documentation).
func (a *acquire) candidacy() bool { return a.opts.Election != "" }

// prefix is what our node's name starts with, the sequence following:
// "_c_<uuid>-lock-" for a lock, "_c_<uuid>-latch-" for a candidacy,
// "_c_<uuid>-lease-" for a permit's lease node (a.name),
// "_c_<uuid>-__READ__" for a shared grant and "_c_<uuid>-__WRIT__" for a
// writer (AcquireOptions.Writer).
func (a *acquire) prefix() string {
	switch {
	case a.name != "":
		return nodePrefix(a.uuid, a.name)
	case a.shared:
		return protectedPrefix + a.uuid + "-" + readName
	case a.candidacy():
		return nodePrefix(a.uuid, latchName)
	case a.opts.Writer:
		return protectedPrefix + a.uuid + "-" + writeName
	}
	return nodePrefix(a.uuid, lockName)
}

// hostname is the host's name, read once: it costs system calls, and
// every acquire writes it.
var hostname = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

// create creates our protected ephemeral sequential node, within the
// request timeout. A create whose reply was lost is looked for by its
// protected name; a node found in an earlier session (its reply lost, then
// the session expired and a new one began) is deleted and the create
// redone. On failure nothing of ours is left: the node is deleted, now or
// by a goroutine that goes on trying.
//
// With the node it returns the wait's first listing, sent right behind the
// create (see prefetch), or nil when there is none.
func (a *acquire) create(ctx context.Context) (*node, <-chan listing, error) {
	b := a.b
	// The create and its checks are bounded by the request timeout, not by
	// ctx: a caller that gives up meanwhile waits for the outcome, so that
	// the node is gone when Acquire returns, as long as ZooKeeper answers.
	rctx, cancel := b.request(b.ctx)
	defer cancel()
	target := a.dir + "/" + a.prefix()
	data := a.data()
	orphan := func(p string, err error) {
		// No answer within the request timeout; this one came later.
		switch {
		case err == nil:
			b.dropNode(p, nil)
		case lostReply(err):
			b.dropProtected(a.dir, a.uuid)
		}
	}
	fail := func(err error, maybeCreated bool) (*node, <-chan listing, error) {
		if maybeCreated {
			b.dropProtected(a.dir, a.uuid)
		}
		if ctx.Err() != nil {
			return nil, nil, driver.Canceled(ctx)
		}
		return nil, nil, b.sortErr(ctx, rctx, err)
	}
	canceled := func(n *node) (*node, <-chan listing, error) {
		a.drop(n)
		return nil, nil, driver.Canceled(ctx)
	}
	b.created.expect(target)
	defer b.created.forget(target)
	for range maxCreates {
		s, err := b.currentSession(ctx, rctx)
		if err != nil {
			return fail(err, false)
		}
		first, listed := a.prefetch(b.created.announce(target))
		sent := time.Now()
		p, err := call(rctx, b, func() (string, error) {
			return b.conn.Create(target, data, zk.FlagEphemeralSequential, b.cfg.acl)
		}, orphan)
		listed(err == nil)
		switch {
		case err == nil:
		case rctx.Err() != nil:
			return fail(err, false) // orphan owns the outcome
		case errors.Is(err, zk.ErrNoNode):
			if err := b.makeParents(rctx, a.dir); err != nil {
				return fail(err, false)
			}
			continue
		case lostReply(err):
			a.lostReply = true
			n, err := a.claim(rctx)
			switch {
			case err != nil:
				return fail(err, true)
			case n == nil:
				continue // not applied, or not in this session: create again
			case ctx.Err() != nil:
				return canceled(n)
			}
			return n, nil, nil
		default:
			return fail(err, false)
		}
		if n := a.known(s, p); n != nil {
			if ctx.Err() != nil {
				return canceled(n)
			}
			n.created = sent
			return n, first, nil
		}
		n, redo, err := a.adopt(rctx, p)
		switch {
		case err != nil:
			return fail(err, true)
		case redo:
			continue
		case ctx.Err() != nil:
			return canceled(n)
		}
		n.created = sent
		return n, first, nil
	}
	return fail(fmt.Errorf("zklock: no node created in a live session after %d creates", maxCreates), true)
}

// listing is the outcome of a listing of the lock's nodes.
type listing struct {
	children []string
	err      error
}

// prefetch sends the wait's first listing right behind the create, as
// soon as the create's request is written (written closes), without
// waiting for its reply: ZooKeeper answers a session's requests in the
// order sent, so the listing runs after the create and shows our node,
// and an acquire that finds it first takes one round trip instead of two.
// The listing is only a first try: wait lists again if it failed or does
// not show our node (its create failed, or the connection changed between
// the two). The caller calls listed once the create's call has returned,
// with whether it succeeded; the listing's channel is closed without a
// listing when none was sent (the create failed before being written, or
// its path is too long to be seen).
func (a *acquire) prefetch(written <-chan struct{}) (<-chan listing, func(ok bool)) {
	b := a.b
	res := make(chan listing, 1)
	if a.name == leaseName {
		// A lease node is granted by its create: nothing waits to list.
		close(res)
		return res, func(bool) {}
	}
	over := make(chan bool, 1)
	started := b.life.Go(func() {
		select {
		case <-written:
		case ok := <-over:
			// The create's request is written before its reply can come,
			// so a create that succeeded was written if it was seen.
			select {
			case <-written:
			default:
				ok = false
			}
			if !ok {
				close(res)
				return
			}
		}
		c, _, err := b.conn.Children(a.dir)
		res <- listing{children: c, err: err}
	})
	if !started {
		close(res)
	}
	return res, func(ok bool) { over <- ok }
}

// find returns the paths of the nodes with our protected name, in queue
// order.
func (a *acquire) find(ctx context.Context) ([]string, error) {
	children, err := call(ctx, a.b, func() ([]string, error) {
		c, _, err := a.b.conn.Children(a.dir)
		return c, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sortNodes(children)
	var found []string
	for _, c := range children {
		if id, ok := protectedID(c); ok && id == a.uuid {
			found = append(found, a.dir+"/"+c)
		}
	}
	return found, nil
}

// claim looks, after a create whose reply was lost, for the nodes with our
// protected name. The first that the current session owns is ours; every
// other one is deleted: one of an earlier session (its create's reply lost
// too, then the session ended, and a server still shows the node) must not
// be taken for ours, since the ensemble deletes it with its session,
// perhaps after it was granted; and it must not stay ahead of ours in the
// queue while a server shows it. It returns nil, with nothing of ours
// left, when the create must be redone.
func (a *acquire) claim(ctx context.Context) (*node, error) {
	// The reply was lost with the connection, and the client may not get
	// a new one at once: it fails the requests it has not sent with
	// ErrNoServer each time it pauses, after a round of failed tries (see
	// hosts). The node may be there all the same, in a
	// session that lives on, so the claim is tried again within ctx (the
	// request timeout) rather than given up to a clean-up that races the
	// grant. Each try starts from a fresh listing.
	for failures := 1; ; failures++ {
		n, err := a.claimOnce(ctx)
		if err == nil || !disconnected(err) || ctx.Err() != nil {
			return n, err
		}
		d, _ := driver.ExponentialBackoff(claimRetryMin, claimRetryMax).Backoff(failures)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
	}
}

// The pauses between claims: full jitter up to claimRetryMin×2^(n-1),
// capped at claimRetryMax (the client's own pause between two rounds of
// its servers is a second).
const (
	claimRetryMin = 50 * time.Millisecond
	claimRetryMax = 500 * time.Millisecond
)

// disconnected reports whether a request failed because the client had no
// connection to ZooKeeper, which a later request may have again.
func disconnected(err error) bool {
	return errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrConnectionClosed)
}

// claimOnce is one try of claim.
func (a *acquire) claimOnce(ctx context.Context) (*node, error) {
	found, err := a.find(ctx)
	if err != nil {
		return nil, err
	}
	var ours *node
	for _, p := range found {
		if ours == nil {
			n, redo, err := a.adopt(ctx, p)
			if err != nil {
				return nil, err
			}
			if !redo {
				ours = n
			}
			continue
		}
		if err := a.b.deleteNode(ctx, p); err != nil {
			// ours stays: claim may try again and adopt it, and if it
			// gives up, the create's failure drops every node with our
			// protected name. Dropped here, it could be deleted in the
			// background while a later try waits with it.
			return nil, err
		}
	}
	return ours, nil
}

// adopt reads our node's stat: a node owned by the current session is
// ours to wait with; one of an earlier session is deleted and the create
// redone (the old session's end would delete it, but not necessarily
// before it is granted a lock nobody holds); one that is gone is created
// again.
func (a *acquire) adopt(ctx context.Context, p string) (*node, bool, error) {
	b := a.b
	st, err := call(ctx, b, func() (*zk.Stat, error) { return b.stat(p) }, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	if s := b.liveSession(st.EphemeralOwner); s != nil {
		return &node{path: p, name: p[len(a.dir)+1:], czxid: st.Czxid, sess: s}, false, nil
	}
	if err := b.deleteNode(ctx, p); err != nil {
		return nil, false, err
	}
	return nil, true, nil
}

// known returns our node at p, created in s, without reading it, when the
// create's reply showed its czxid and s is still the current session. The
// create was sent after s became current (the zk client starts a
// session's connection only after reporting the session), so it ran in s
// unless s ended meanwhile; sessions do not come back, so s current now
// means current throughout, and s is the node's ephemeral owner. It
// returns nil when that is not known: adopt reads the node.
func (a *acquire) known(s *session, p string) *node {
	czxid, ok := a.b.created.take(a.dir+"/"+a.prefix(), p)
	if !ok || a.b.liveSession(s.id) != s {
		return nil
	}
	return &node{path: p, name: p[len(a.dir)+1:], czxid: czxid, sess: s}
}

// deleteNode deletes p; a node already gone is no error.
func (b *Backend) deleteNode(ctx context.Context, p string) error {
	_, err := call(ctx, b, func() (struct{}, error) { return struct{}{}, b.conn.Delete(p, -1) }, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// stat returns p's stat, or zk.ErrNoNode.
func (b *Backend) stat(p string) (*zk.Stat, error) {
	ok, st, err := b.conn.Exists(p)
	if err == nil && !ok {
		return nil, zk.ErrNoNode
	}
	return st, err
}

// makeParents creates the lock's path and its parents, as container nodes
// (which the ensemble deletes once their last child is gone) where the
// ensemble supports them, persistent nodes otherwise.
func (b *Backend) makeParents(ctx context.Context, dir string) error {
	parts := strings.Split(dir[1:], "/")
	for i := range parts {
		p := "/" + strings.Join(parts[:i+1], "/")
		_, err := call(ctx, b, func() (string, error) {
			if !b.noContainers.Load() {
				r, err := b.conn.CreateContainer(p, nil, zk.FlagContainer, b.cfg.acl)
				if !unsupported(err) {
					return r, err
				}
				b.noContainers.Store(true)
			}
			return b.conn.Create(p, nil, 0, b.cfg.acl)
		}, nil)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// unsupported reports whether a create was refused as an unknown operation,
// the answer of a server older than 3.5 to a container create.
func unsupported(err error) bool {
	return err != nil && (errors.Is(err, zk.ErrUnknown) || strings.HasPrefix(err.Error(), "unknown error"))
}

// wait waits until our node is first of the lock's nodes (for a shared
// grant, until no exclusive node is ahead of it), watching only the node
// it waits for (see ahead), so that a release wakes only the waiters just
// behind it; without opts.Wait it looks once. first, if not nil, brings its first listing
// (see prefetch).
func (a *acquire) wait(ctx context.Context, n *node, first <-chan listing) (*lease, error) {
	b := a.b
	if !a.opts.Wait {
		wctx, cancel := b.request(ctx)
		defer cancel()
		l, held, err := a.try(ctx, wctx, n, first, nil)
		if held != nil {
			err = fmt.Errorf("%w: zklock: held", driver.ErrNotAcquired)
		}
		return l, err
	}
	w := &watcher{wake: make(chan struct{}, 1)}
	defer b.watch(w, "")
	return driver.Wait(ctx, driver.Waiter[*lease]{
		Try: func(ctx context.Context, _ bool) (*lease, *driver.Held, error) {
			l, held, err := a.try(ctx, ctx, n, first, w)
			first = nil
			return l, held, err
		},
		// Close ends the current session; n's, if another, has ended.
		Closing: n.sess.done,
		Closed: func() error {
			if b.ctx.Err() != nil {
				return ErrClosed
			}
			return fmt.Errorf("%w: %w while waiting", driver.ErrUnavailable, b.sessionErr(n.sess))
		},
	})
}

// try lists the lock's nodes, within wctx (ctx, or a try's request
// timeout), until it can tell: it returns the lease when our node is
// granted (see ahead); otherwise it watches the node ours waits for,
// whose next event wakes w, and returns a Held on w's wake-up (a single
// try, without w, watches nothing). It lists again at once after deleting
// late nodes of ours, or when the watched node is gone before its watch.
//
// While waiting (w not nil), a request that fails for a reason that may
// pass (the connection broke, ZooKeeper did not answer in time) is tried
// again after a pause, in a Held: the node keeps its place in the queue
// as long as the session lives, so a waiter goes on until the session
// ends or ctx does.
func (a *acquire) try(ctx, wctx context.Context, n *node, first <-chan listing, w *watcher) (*lease, *driver.Held, error) {
	b := a.b
	failed := func(err error) (*lease, *driver.Held, error) {
		if w == nil || !errors.Is(err, driver.ErrUnavailable) {
			return nil, nil, err
		}
		w.failures++
		d, _ := driver.ExponentialBackoff(dropRetryMin, dropRetryMax).Backoff(w.failures)
		return nil, &driver.Held{RetryIn: d}, nil
	}
	for {
		rctx, cancel := b.request(wctx)
		children, confirmed, serr, err := a.list(rctx, n, first)
		first = nil
		err = b.sortErr(ctx, rctx, err)
		if serr != nil {
			serr = b.sortErr(ctx, rctx, serr)
		}
		cancel()
		if err != nil {
			return failed(err)
		}
		if w != nil {
			w.failures = 0
		}
		sortNodes(children)
		if late := a.late(children, n.name); len(late) > 0 {
			if err := a.dropLate(wctx, late); err != nil {
				return failed(b.sortErr(ctx, wctx, err))
			}
			continue
		}
		i := slices.Index(children, n.name)
		if i < 0 {
			return nil, nil, a.vanished(n)
		}
		ahead := a.ahead(children, i)
		switch {
		case ahead < 0 && serr != nil:
			// Not confirmed through the leader: the listing may be stale.
			return failed(serr)
		case ahead < 0:
			l, err := a.grant(n, confirmed)
			return l, nil, err
		case w == nil:
			return nil, &driver.Held{}, nil
		}
		pred := a.dir + "/" + children[ahead]
		if b.beforeWatch != nil {
			b.beforeWatch(pred)
		}
		// Registered before the read that sets the watch: its event
		// comes after the read's reply.
		b.watch(w, pred)
		rctx, cancel = b.request(wctx)
		// GetW, not ExistsW: on a node that is gone ExistsW leaves a watch
		// for its creation behind, which nothing would ever fire.
		_, err = call(rctx, b, func() (struct{}, error) {
			_, _, _, err := b.conn.GetW(pred)
			return struct{}{}, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			cancel()
			continue // the predecessor went between listing and watching
		}
		err = b.sortErr(ctx, rctx, err)
		cancel()
		if err != nil {
			return failed(err)
		}
		return nil, &driver.Held{Wake: w.wake}, nil
	}
}

// ahead returns the index of the node our node, at index i of the sorted
// children, waits for, or -1 when it is granted. An exclusive node waits
// for the node just before it, whatever its kind: it is granted once
// first. A shared grant's node waits for the last exclusive node before
// it (any node but a reader's and a semaphore's parents, so that locks,
// candidacies and writers of this package and of Curator's recipes all
// block it, waiting or holding): readers overlap, and a writer that waits
// blocks the readers behind it. Curator's read lock waits for the first
// write node before its own instead; either wakes the reader once the
// writers ahead of it are gone.
func (a *acquire) ahead(children []string, i int) int {
	if !a.shared {
		return i - 1
	}
	for j := i - 1; j >= 0; j-- {
		if c := children[j]; !reader(c) && !semaphoreChild(c) {
			return j
		}
	}
	return -1
}

// watcher is one waiter's wake-up: wake receives a value when ZooKeeper
// reports an event on the node it watches (see Backend.watch).
type watcher struct {
	wake     chan struct{}
	path     string // the watched node, "" for none; guarded by Backend.watchMu
	fired    events // since the last took; guarded by Backend.watchMu
	failures int    // transient failures in a row (see acquire.try)
}

// events is a set of kinds of node events (zk.EventType), among them
// zk.EventNotWatching: the zk client dropped every watch of the session.
type events uint8

func eventSet(types ...zk.EventType) events {
	var s events
	for _, t := range types {
		s |= 1 << (t + 2) // EventNotWatching is -2, the lowest
	}
	return s
}

// watch makes w watch path in place of what it watched before, or nothing
// if path is "". The zk client gives each watch a channel of its own, of
// its own type; onEvent sees every event, and wakes the waiters of its
// path, so that waiting needs no goroutine per watch.
func (b *Backend) watch(w *watcher, path string) {
	b.watchMu.Lock()
	defer b.watchMu.Unlock()
	if ws := b.watchers[w.path]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(b.watchers, w.path)
		}
	}
	if path != w.path {
		w.fired = 0
	}
	w.path = path
	if path == "" {
		return
	}
	if b.watchers == nil {
		b.watchers = map[string]map[*watcher]struct{}{}
	}
	ws := b.watchers[path]
	if ws == nil {
		ws = map[*watcher]struct{}{}
		b.watchers[path] = ws
	}
	ws[w] = struct{}{}
}

// wakeWatchers wakes the waiters that watch the path of ev, and tells
// them what it was.
func (b *Backend) wakeWatchers(ev zk.Event) {
	b.watchMu.Lock()
	defer b.watchMu.Unlock()
	for w := range b.watchers[ev.Path] {
		w.fired |= eventSet(ev.Type)
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// took returns the kinds of the events w was told of since the last
// call, and forgets them.
func (b *Backend) took(w *watcher) events {
	b.watchMu.Lock()
	defer b.watchMu.Unlock()
	fired := w.fired
	w.fired = 0
	return fired
}

// list lists the lock's nodes, with the time from which the leader
// confirmed our session, or the error that kept it from confirming it: a
// listing may come from a server cut off from the leader, which expired
// our session meanwhile, and is taken for a grant only once confirmed. The listing sent
// behind the create (first, if not nil) is taken if it shows our node: it
// ran after the create, like one sent now, and is the one an uncontended
// acquire needs; it is returned with the create's send time. Otherwise,
// the create having been answered, a new listing is sent behind a sync
// (see syncThen), and returned with the sync's send time, or the sync's
// error.
func (a *acquire) list(ctx context.Context, n *node, first <-chan listing) (children []string, confirmed time.Time, serr, err error) {
	if first != nil {
		select {
		case r, ok := <-first:
			if ok && r.err == nil && slices.Contains(r.children, n.name) {
				// It ran after our create (it shows our node), which the
				// leader committed after its send, in our live session: the
				// create confirms the listing, as a sync would.
				return r.children, n.created, nil, nil
			}
		case <-ctx.Done():
			return nil, time.Time{}, nil, ctx.Err()
		}
	}
	children, sent, serr, err := syncThen(ctx, a.b, a.dir, func() ([]string, error) {
		c, _, err := a.b.conn.Children(a.dir)
		return c, err
	})
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	if serr != nil {
		return children, time.Time{}, serr, nil
	}
	return children, sent, nil, nil
}

// syncThen sends a sync of path through the server of the session's
// connection to the leader, and then's request as soon as the sync's is
// written, without waiting for its answer. It returns then's value, the
// sync's send time, the sync's error and then's. The sync's answer shows that the
// leader had not expired the session when the sync reached it, after its
// send time (see Guarantees in the package doc): a server cut off from
// the leader answers reads, and pings, from its own state until it gives
// up on the leader, but it cannot answer a sync. ZooKeeper serves a
// session's requests in order, so then's request, written after a sync
// (ours, or another caller's of the same path sent meanwhile), is
// answered after it, from the ensemble's state at least as new as the
// leader's when that sync reached it; the two take one round trip, where
// one after the other took two. then is not called when the sync failed
// before it was written.
func syncThen[T any](ctx context.Context, b *Backend, path string, then func() (T, error)) (v T, sent time.Time, serr, err error) {
	sent = time.Now()
	written := b.syncs.announce(path)
	defer b.syncs.forget(path, written)
	synced := make(chan error, 1)
	if !b.life.Go(func() {
		_, err := call(ctx, b, func() (string, error) { return b.conn.Sync(path) }, nil)
		synced <- err
	}) {
		return v, sent, ErrClosed, ErrClosed
	}
	answered := false
	select {
	case <-written:
	case serr = <-synced:
		// Failed before being written, or written unseen (a path too
		// long for the frame head the connection keeps): then goes
		// after the answer.
		answered = true
		if serr != nil {
			return v, sent, serr, serr
		}
	}
	v, err = call(ctx, b, then, nil)
	if !answered {
		serr = <-synced
	}
	return v, sent, serr, err
}

// late returns the paths of the nodes other than ours (name) that have our
// protected name: creates of this acquire whose reply was lost and that a
// claim's listing did not show, applied later (a server forwards a create
// to the leader; the server that answered the listing may not have had it
// yet). They are ours, and nobody else deletes them while the session
// lives: ahead of our node one would be our predecessor, the lock held by
// nobody; behind it, the lock of everyone after us.
func (a *acquire) late(children []string, name string) []string {
	var late []string
	for _, c := range children {
		if id, ok := protectedID(c); ok && id == a.uuid && c != name {
			late = append(late, a.dir+"/"+c)
		}
	}
	return late
}

// dropLate deletes the late nodes, each within the request timeout.
func (a *acquire) dropLate(ctx context.Context, late []string) error {
	for _, p := range late {
		rctx, cancel := a.b.request(ctx)
		err := a.b.deleteNode(rctx, p)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// vanished is the error of an acquire whose node is gone while it waited.
func (a *acquire) vanished(n *node) error {
	if err := a.b.sessionErr(n.sess); err != nil {
		return fmt.Errorf("%w: %w while waiting", driver.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w: the waiting node %s was deleted", driver.ErrUnavailable, ErrSessionLost, n.path)
}

// grant reports the grant once a listing showed our node first, and a
// request sent at sent, through the leader, confirmed the session (the
// sync the listing followed, or the create; see syncThen), after checking that the node's session, its ephemeral owner
// (read from the node, or known from the create, see known), is still the
// current one: a node of a session that ended meanwhile would be a lock
// held by nobody, and granted to the next in line. The listing needs no
// read of the node to follow it: our protected name is ours alone, and
// with the session current since the node was created, the listing ran in
// that session, on a server that still had the node; the confirmation
// shows that the leader had not expired the session, so had not deleted
// the node, after sent.
func (a *acquire) grant(n *node, sent time.Time) (*lease, error) {
	b := a.b
	if b.beforeGrant != nil {
		b.beforeGrant(n.path)
	}
	if b.liveSession(n.sess.id) != n.sess {
		return nil, a.vanished(n)
	}
	l := &lease{
		b: b, sess: n.sess, key: a.key, path: n.path,
		token:    uint64(n.czxid),
		validity: driver.Validity{Sent: sent, TTL: n.sess.validity()},
		onLost:   a.opts.OnLost,
		done:     make(chan struct{}),
	}
	if a.lostReply {
		l.sweep = a.uuid
	}
	if err := b.register(l); err != nil {
		return nil, err
	}
	return l, nil
}

// dropNode deletes p, one of our nodes that may linger, now or, if
// ZooKeeper does not answer within the request timeout, in a goroutine
// that tries until it is gone, its session (sess, if known) has ended or
// the Backend is closed: either end deletes the node with the session.
func (b *Backend) dropNode(p string, sess *session) {
	b.dropLater(func(ctx context.Context) error {
		if sess != nil && b.sessionErr(sess) != nil {
			return nil
		}
		return b.deleteNode(ctx, p)
	})
}

// drop deletes n, our node, as dropNode does, for an acquire that does
// not keep it; after a create whose reply was lost, with every other node
// of our protected name (see dropProtected): that create may have been
// applied where a claim's listing did not show it, and its node would
// otherwise stay until the session ends, a place in the queue or, under
// a semaphore's leases, a permit held by nobody.
func (a *acquire) drop(n *node) {
	if a.lostReply {
		a.b.dropProtected(a.dir, a.uuid)
		return
	}
	a.b.dropNode(n.path, n.sess)
}

// dropProtected deletes our node of uuid under dir, if it exists, as
// dropNode does: it is the clean-up of a create whose reply was lost.
func (b *Backend) dropProtected(dir, uuid string) {
	a := &acquire{b: b, dir: dir, uuid: uuid}
	b.dropLater(func(ctx context.Context) error {
		found, err := a.find(ctx)
		if err != nil {
			return err
		}
		for _, p := range found {
			if err := b.deleteNode(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// The pauses between the tries of a clean-up: after the n-th failure, a
// random time up to dropRetryMin×2^(n-1), capped at dropRetryMax.
const (
	dropRetryMin = 100 * time.Millisecond
	dropRetryMax = 2 * time.Second
)

// dropLater runs op once, bounded by the request timeout, and, if it
// fails, again in a goroutine until it succeeds or the Backend is closed.
func (b *Backend) dropLater(op func(ctx context.Context) error) {
	try := func(ctx context.Context) error {
		rctx, cancel := b.request(ctx)
		defer cancel()
		return op(rctx)
	}
	if try(b.ctx) == nil {
		return
	}
	b.life.Go(func() {
		pauses := driver.ExponentialBackoff(min(dropRetryMin, b.cfg.requestTimeout), dropRetryMax)
		_ = driver.Retry(b.ctx, pauses, try)
	})
}

package distlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// A scope is the context of a lock or of a lock set, and its place in the
// tree of contexts. A lock's scope stands for its grant; a set's scope
// stands for the grants of its parts. A scope ends when what it stands for
// ends (the grant ends; a part ends, or the set is released) or when the
// scope it was created under (its parent: the scope of the context passed
// to Acquire or AcquireAll) ends. It ends the scopes created under it (its
// kids) at once, in the same goroutine, before anything else happens.
//
// A scope that ends only because its parent ended leaves its grants held:
// their holder still has to release them, and until then they are renewed
// as usual. Its cause is then an *EnclosingError, never a lost or released
// lock's error.
//
// States: live, then ended (over holds the cause, and ctx is cancelled with
// it), for good.
//
// Its context is made at the first call of context: most locks are
// released without anyone asking for theirs, and then cost no cancelCtx.
// One made after the scope ended is cancelled at once, with the cause.
//
// Who guards what: parent, g, parts, locks and ended are set before the
// scope is published and never change; over and freed are atomics, each
// set once; mu (a leaf in the lock order, see grant) guards kids and
// closed, and ctx and cancel until made is set (then they never change,
// and ctx is read without it).
type scope struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	made   atomic.Bool
	parent *scope

	g     *grant   // a lock's scope: the grant
	parts []*grant // a set's scope: the parts' grants, sorted by key
	locks []*Lock  // a set's scope: its handles on them, in the same order
	freed atomic.Bool

	over  atomic.Pointer[error]
	ended sync.WaitGroup // done once s and its kids have ended (Add(1) at creation)

	mu     sync.Mutex
	kids   map[*scope]struct{} // scopes that end when this one ends
	closed bool                // ended: adopts no more kids

	hold holdCtx // ctx's parent
}

// ownErr is why what s stands for ended, at now (ns since epoch): for a
// lock, its grant's end, deadline or MaxHold; for a set, its release or its
// first part that ended (a *KeyError with Op "hold" naming it).
func (s *scope) ownErr(now int64) error {
	if s.g != nil {
		return s.g.errAt(now)
	}
	if s.freed.Load() {
		return ErrReleased
	}
	for i, g := range s.parts {
		if s.locks[i].released.Load() { // a reentered part's grant lives on
			return &KeyError{Op: "hold", Key: g.key, Err: ErrReleased}
		}
		if err := g.errAt(now); err != nil {
			return &KeyError{Op: "hold", Key: g.key, Err: err}
		}
	}
	return nil
}

// why decides whether s has ended at now (ns since epoch), and why: it is
// the one answer behind Err, Done (through the cancellation it leads to),
// Deadline and reentry. What s stands for comes first, so a lock's Err
// describes that lock; then the recorded end; then the scopes above s,
// whose ends reach s's context an instant later.
func (s *scope) why(now int64) error {
	if err := s.ownErr(now); err != nil {
		return err
	}
	if p := s.over.Load(); p != nil {
		return *p
	}
	for p := s.parent; p != nil; p = p.parent {
		if err := p.ownErr(now); err != nil {
			return p.enclosing(err)
		}
		if o := p.over.Load(); o != nil {
			return p.enclosing(*o)
		}
	}
	return nil
}

// enclosing is the cause of a kid of s that ends because s ended with
// cause: the first enclosing lock's end, passed down unchanged.
func (s *scope) enclosing(cause error) error {
	if e, ok := errors.AsType[*EnclosingError](cause); ok {
		return e
	}
	if s.g != nil {
		return &EnclosingError{Key: s.g.key, Err: cause}
	}
	if ke, ok := cause.(*KeyError); ok { // a set's part ended
		return &EnclosingError{Key: ke.Key, Err: ke.Err}
	}
	return &EnclosingError{Err: cause} // the set was released
}

// causeFor is the cause of kid when s ends with cause: what kid stands
// for, if that ended (a set ended by one of its parts names the part, as
// its Err does, whichever of its enders reaches it first); otherwise the
// end of s, which kid was created under.
func (s *scope) causeFor(kid *scope, cause error) error {
	if err := kid.ownErr(nowNanos()); err != nil {
		return err
	}
	return s.enclosing(cause)
}

// end ends s with cause, then its kids, and takes s out of the scopes that
// would end it. Ending an ended scope waits until s and its kids have
// ended, as another goroutine may still be ending them: a release gives
// the lease back next.
func (s *scope) end(cause error) {
	if !s.over.CompareAndSwap(nil, errPtr(cause)) {
		s.ended.Wait()
		return
	}
	s.mu.Lock()
	cancel, kids := s.cancel, s.kids
	s.kids, s.closed = nil, true
	s.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
	for k := range kids {
		k.end(s.causeFor(k, cause))
	}
	s.ended.Done() // the scopes are a DAG: no end waits for its own caller
	for _, e := range s.enders() {
		e.mu.Lock()
		delete(e.kids, s)
		e.mu.Unlock()
	}
}

// enders are the scopes whose end ends s: its parent and, for a set, its
// parts' scopes.
func (s *scope) enders() []*scope {
	var es []*scope
	if s.parent != nil {
		es = append(es, s.parent)
	}
	for _, g := range s.parts {
		es = append(es, g.scope)
	}
	return es
}

// adopt makes kid end when s ends. A kid that has ended already is left
// alone (nothing would take it out of kids again); if s has ended, kid ends
// now.
func (s *scope) adopt(kid *scope) {
	s.mu.Lock()
	if kid.over.Load() != nil {
		s.mu.Unlock()
		return
	}
	if !s.closed {
		if s.kids == nil {
			s.kids = map[*scope]struct{}{}
		}
		s.kids[kid] = struct{}{}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	kid.end(s.causeFor(kid, *s.over.Load()))
}

// heldKey is the context key under which scope contexts record their locks.
type heldKey struct{}

// heldNode links the locks a context was derived from, innermost first.
type heldNode struct {
	c     *Client
	key   string
	g     *grant // the lock, for reentrant acquisition
	scope *scope // the scope whose context it is: g's, or its set's
	next  *heldNode
}

func nearestHeld(ctx context.Context) *heldNode {
	n, _ := ctx.Value(heldKey{}).(*heldNode)
	return n
}

// parentScope is the scope that locks acquired under ctx are created in,
// or nil.
func parentScope(ctx context.Context) *scope {
	if n := nearestHeld(ctx); n != nil {
		return n.scope
	}
	return nil
}

// findHeld returns the node of c's lock on key among ctx's locks.
func findHeld(ctx context.Context, c *Client, key string) *heldNode {
	for n := nearestHeld(ctx); n != nil; n = n.next {
		if n.c == c && n.key == key && !n.g.cfg.permit {
			return n
		}
	}
	return nil
}

// ctxHolds reports whether ctx was derived from g's context, or from the
// context of a set g is part of.
func ctxHolds(ctx context.Context, g *grant) bool {
	for n := nearestHeld(ctx); n != nil; n = n.next {
		if n.g == g {
			return true
		}
	}
	return false
}

// newScope makes the scope of the context derived from parent (its values,
// not its cancellation) that records nodes as its locks.
func newScope(parent context.Context, nodes *heldNode) *scope {
	s := &scope{hold: holdCtx{parent: parent, nodes: nodes}}
	s.init()
	return s
}

// init readies a scope whose hold is set; a lock's scope lives in its
// grant and is readied there.
func (s *scope) init() {
	s.parent = parentScope(s.hold.parent)
	s.ended.Add(1)
}

// context returns the scope's context, making it if need be: cancelled
// already, with the scope's cause, if the scope has ended.
func (s *scope) context() context.Context {
	if s.made.Load() {
		return s.ctx
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.made.Load() {
		s.ctx, s.cancel = context.WithCancelCause(&s.hold)
		if s.closed { // end has run past its cancel: do its part
			s.cancel(*s.over.Load())
		}
		s.made.Store(true)
	}
	return s.ctx
}

// holdCtx is what a scope's context derives from: the values of the
// context the lock was acquired with, and its locks under heldKey, but
// none of its cancellation or deadline (context.WithoutCancel and
// context.WithValue in one; see TestCycleAllocs). Only the
// scope's own cancelCtx derives from it: that answers the lookups of its
// cancellation itself, and takes a nil Done as "never cancelled".
type holdCtx struct {
	parent context.Context
	nodes  *heldNode
}

func (*holdCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*holdCtx) Done() <-chan struct{}       { return nil }
func (*holdCtx) Err() error                  { return nil }

func (h *holdCtx) Value(key any) any {
	if _, ok := key.(heldKey); ok {
		return h.nodes
	}
	return h.parent.Value(key)
}

func (h *holdCtx) String() string { return "distlock lock context" }

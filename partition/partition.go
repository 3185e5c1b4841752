package partition

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

// KeyPrefix starts the lock keys of every group: the group named GROUP
// keeps its members at KeyPrefix+GROUP+"/members/"+ID and its units at
// KeyPrefix+GROUP+"/units/"+UNIT (see the package documentation).
const KeyPrefix = "partition/"

// Defaults of the options.
const (
	DefaultReconcile = time.Second
	DefaultMinHold   = 5 * time.Second
)

// MaxUnits is the most units a group can have.
const MaxUnits = 1 << 16

// ErrMoved is the cause (context.Cause) of a unit's context that ended
// because the unit was planned to another member, and of a wait for a
// unit that is no longer this member's.
var ErrMoved = errors.New("partition: unit moved to another member")

// ErrLeft is the cause of a unit's context that ended because its member
// lost its membership (its member lock) or Run returned.
var ErrLeft = errors.New("partition: member left the group")

// A Partition is one member's view of a group: the group's units, and
// this member's id. Members in other processes take part through
// Partitions of the same group, units and options over Clients of the same
// service. Its methods are safe for concurrent use.
type Partition struct {
	c         *distlock.Client
	group     string
	units     []string
	member    string
	prefix    string // KeyPrefix+group+"/"
	reconcile time.Duration
	minHold   time.Duration
	lockOpts  []distlock.LockOption
}

// Option configures a Partition.
type Option func(*config)

type config struct {
	member    string
	reconcile time.Duration
	minHold   time.Duration
	lockOpts  []distlock.LockOption
}

// WithMember sets the member's id: unique among the live members of the
// group, a valid key without "/"; give a worker the same id across its
// restarts where it has one (a pod's name). Default: the host name and
// the process id, "HOST-PID", which a restart changes. Two live members
// with one id are one member: the second waits until the first leaves.
func WithMember(id string) Option { return func(c *config) { c.member = id } }

// WithReconcile sets how often the member reads the group's members and
// acts on the assignment: it takes units planned to it and gives up units
// planned elsewhere. A change of membership is acted on within one
// interval (each member's interval jittered by ±25%). Default:
// DefaultReconcile.
func WithReconcile(d time.Duration) Option { return func(c *config) { c.reconcile = d } }

// WithMinHold sets how long a member keeps a unit at least before giving
// it up for a planned move, so that members coming and going quickly do
// not move units back and forth. It does not delay a move forced by a
// loss. Default: DefaultMinHold.
func WithMinHold(d time.Duration) Option { return func(c *config) { c.minHold = d } }

// WithLockOptions sets the options of the member's lock and of each
// unit's lock (TTL, renewal, drift, at-risk window...), over the Client's
// defaults. WithWait, WithLockOwner, WithShared, WithWriter, WithElection
// and WithMaxHold are the Partition's own and are overridden (a unit is
// given up by returning from fn, never by a bound on its hold); Run
// refuses WithSemaphore with an error matching distlock.ErrInvalidOption,
// and any invalid option as Acquire does.
func WithLockOptions(opts ...distlock.LockOption) Option {
	return func(c *config) { c.lockOpts = append(c.lockOpts, opts...) }
}

// New returns the member of group over c that takes part in sharing
// units. group is any name that leaves a valid key with KeyPrefix; units
// is the fixed list of the group's unit names (Count(n) gives "0".."n-1"),
// each a valid key without "/", with no duplicates, at most MaxUnits of
// them. Every member of the group must be given the same units. An error
// matching distlock.ErrInvalidKey reports a bad group, member id or unit
// name, and distlock.ErrInvalidOption a bad option, a unit listed twice or
// a nil Client. The options of the locks (WithLockOptions) are checked by
// Run.
func New(c *distlock.Client, group string, units []string, opts ...Option) (*Partition, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: partition: nil client", distlock.ErrInvalidOption)
	}
	cfg := config{reconcile: DefaultReconcile, minHold: DefaultMinHold}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.member == "" {
		cfg.member = defaultMember()
	}
	p := &Partition{
		c:         c,
		group:     group,
		member:    cfg.member,
		prefix:    KeyPrefix + group + "/",
		reconcile: cfg.reconcile,
		minHold:   cfg.minHold,
		lockOpts:  cfg.lockOpts,
	}
	if group == "" {
		return nil, fmt.Errorf("%w: partition: empty group", distlock.ErrInvalidKey)
	}
	if err := distlock.ValidateKey(p.prefix + "members/"); err != nil {
		return nil, fmt.Errorf("partition: group %q: %w", group, err)
	}
	if err := p.checkName("member id", cfg.member, p.MemberKey(cfg.member)); err != nil {
		return nil, err
	}
	switch {
	case cfg.reconcile <= 0:
		return nil, fmt.Errorf("%w: partition: reconcile interval %v is not positive", distlock.ErrInvalidOption, cfg.reconcile)
	case cfg.minHold < 0:
		return nil, fmt.Errorf("%w: partition: minimum hold %v is negative", distlock.ErrInvalidOption, cfg.minHold)
	case len(units) == 0:
		return nil, fmt.Errorf("%w: partition: no units", distlock.ErrInvalidOption)
	case len(units) > MaxUnits:
		return nil, fmt.Errorf("%w: partition: %d units, more than %d", distlock.ErrInvalidOption, len(units), MaxUnits)
	}
	seen := make(map[string]bool, len(units))
	for _, u := range units {
		if err := p.checkName("unit", u, p.UnitKey(u)); err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, fmt.Errorf("%w: partition: unit %q listed twice", distlock.ErrInvalidOption, u)
		}
		seen[u] = true
	}
	p.units = append([]string(nil), units...)
	return p, nil
}

// checkName checks a member id or unit name, and the key it makes.
func (p *Partition) checkName(what, name, key string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: partition: empty %s", distlock.ErrInvalidKey, what)
	case strings.Contains(name, "/"):
		return fmt.Errorf("%w: partition: %s %q contains \"/\"", distlock.ErrInvalidKey, what, name)
	}
	if err := distlock.ValidateKey(key); err != nil {
		return fmt.Errorf("partition: %s %q: %w", what, name, err)
	}
	return nil
}

// defaultMember is "HOST-PID".
func defaultMember() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	host = strings.ReplaceAll(host, "/", "_")
	return host + "-" + strconv.Itoa(os.Getpid())
}

// Group returns the group's name.
func (p *Partition) Group() string { return p.group }

// Member returns this member's id.
func (p *Partition) Member() string { return p.member }

// Units returns the group's units, in the order New was given them.
func (p *Partition) Units() []string { return append([]string(nil), p.units...) }

// MemberKey returns the lock key that the member id holds while it is a
// member of the group.
func (p *Partition) MemberKey(id string) string { return p.prefix + "members/" + id }

// UnitKey returns the lock key of unit: its owner holds it.
func (p *Partition) UnitKey(unit string) string { return p.prefix + "units/" + unit }

// A Unit is one unit of work while this member owns it: its name, the
// token of the grant and the grant itself.
type Unit struct {
	// Name is the unit's name, one of the group's units.
	Name string
	// Token is the fencing token of this ownership of the unit: strictly
	// greater than every earlier owner's. Pass it with every write made
	// for the unit, and let the storage refuse an older one (package
	// fence).
	Token uint64
	// Lock is the unit's lock: for what takes a lock, a backend's
	// check-and-write helper above all. Do not release it (return from
	// the function instead), nor change its owner: its owner is the
	// member's id, which Assignment reads.
	Lock *distlock.Lock
}

// Run makes this member a member of the group and calls fn once for each
// unit it owns, each call in its own goroutine, until ctx ends. fn's
// context ends when the unit is lost (before another member can be
// granted it: it is the unit lock's context), planned to another member
// (ErrMoved), or when the member leaves (ErrLeft) or ctx ends; fn must
// then return, and the unit is released only after it has.
//
// When fn returns nil, the unit is released and taken again at the next
// reconcile if it is still planned here, and fn is called again with a new
// token. When fn returns an error while its unit lived, Run ends every
// unit and returns that error. A lost membership ends every unit too, and
// Run joins again. Transient failures of the service (an error matching
// distlock.ErrUnavailable) are tried again, backing off up to a second;
// Run returns any other error, and ctx.Err() when ctx ends.
//
// The backend must list holders (driver.Lister; every backend of this
// repository does), or Run returns an error matching
// errors.ErrUnsupported.
func (p *Partition) Run(ctx context.Context, fn func(ctx context.Context, u Unit) error) error {
	if fn == nil {
		return fmt.Errorf("%w: partition: nil function", distlock.ErrInvalidOption)
	}
	backoff := distlock.ExponentialBackoff(10*time.Millisecond, time.Second)
	for failures := 0; ; {
		m, err := p.c.Acquire(ctx, p.MemberKey(p.member), p.opts()...)
		switch {
		case ctx.Err() != nil:
			if err == nil {
				m.Release(context.WithoutCancel(ctx))
			}
			return ctx.Err()
		case errors.Is(err, distlock.ErrUnavailable):
			failures++
			if !sleep(ctx, backoff, failures) {
				return ctx.Err()
			}
			continue
		case err != nil:
			return fmt.Errorf("partition: join %q: %w", p.group, err)
		}
		failures = 0
		if m.Permit() {
			m.Release(context.WithoutCancel(ctx))
			return fmt.Errorf("%w: partition: WithSemaphore among the lock options", distlock.ErrInvalidOption)
		}
		s := &session{p: p, fn: fn, member: m, units: map[string]*holding{}, results: make(chan result)}
		err = s.serve(ctx)
		m.Release(context.WithoutCancel(ctx))
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return err
		}
	}
}

// opts are the options of the member's lock and of each unit's.
func (p *Partition) opts() []distlock.LockOption {
	return append(append([]distlock.LockOption(nil), p.lockOpts...),
		distlock.WithWait(true), distlock.WithLockOwner(p.member), distlock.WithShared(false),
		distlock.WithWriter(false), distlock.WithElection(""), distlock.WithMaxHold(0))
}

// sleep waits out the backoff after failures, or until ctx ends (false).
func sleep(ctx context.Context, backoff distlock.RetryStrategy, failures int) bool {
	d, _ := backoff.Backoff(failures)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// session is one membership: from joining to leaving.
type session struct {
	p       *Partition
	fn      func(context.Context, Unit) error
	member  *distlock.Lock
	units   map[string]*holding // units being taken, held, or given up
	results chan result
	members []string          // as last read; nil before the first read
	plan    map[string]string // Assign of members
}

// holding is one unit taken by the session, from the wait for its lock
// to its release.
type holding struct {
	cancel  context.CancelCauseFunc
	granted chan time.Time // receives when the unit's lock was granted
	since   time.Time      // when granted, once known; zero before
	ending  bool           // cancelled: being given up
}

// result is how a holding ended.
type result struct {
	unit    string
	err     error // fn's error, or the acquire's
	fnErr   bool  // err is fn's
	stopped bool  // ended by the session, or by the loss of its lock
}

// serve runs the membership until the member lock is lost (nil), ctx
// ends, or a unit fails (its error).
func (s *session) serve(ctx context.Context) error {
	defer s.stopAll()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.member.Done():
			return nil
		case r := <-s.results:
			delete(s.units, r.unit)
			if err := s.failed(r); err != nil {
				return err
			}
			if r.stopped && s.plan[r.unit] == s.p.member && ctx.Err() == nil {
				// Given up for a plan that has changed back, or lost: wait
				// for the unit again now rather than at the next reconcile.
				s.take(ctx, r.unit)
			}
		case <-timer.C:
			next, err := s.reconcile(ctx)
			if err != nil {
				return err
			}
			timer.Reset(next)
		}
	}
}

// failed returns the error that ends Run, if r has one.
func (s *session) failed(r result) error {
	switch {
	case r.err == nil, r.stopped:
		return nil
	case r.fnErr:
		return fmt.Errorf("partition: unit %q: %w", r.unit, r.err)
	case errors.Is(r.err, distlock.ErrUnavailable), errors.Is(r.err, context.Canceled), errors.Is(r.err, context.DeadlineExceeded):
		return nil // taken again at the next reconcile
	default:
		return fmt.Errorf("partition: unit %q: %w", r.unit, r.err)
	}
}

// readMembers lists the members, bounded by the reconcile interval (at
// least a second) and by the membership, so that a service that does not
// answer cannot hide the loss of the member lock.
func (s *session) readMembers(ctx context.Context) ([]distlock.Holder, error) {
	lctx, cancel := context.WithTimeout(ctx, max(s.p.reconcile, time.Second))
	defer cancel()
	stop := context.AfterFunc(s.member.Context(), cancel)
	defer stop()
	return s.p.c.List(lctx, s.p.prefix+"members/")
}

// reconcile reads the members and acts on the assignment: it takes the
// units planned here and gives up the others. A failed read changes
// nothing, and before the first read succeeds the session takes nothing.
// It returns when to reconcile next: the jittered interval, or sooner when
// a unit to give up reaches its minimum hold; an error returned ends the
// session.
func (s *session) reconcile(ctx context.Context) (time.Duration, error) {
	d := s.p.reconcile
	next := d*3/4 + rand.N(d/2+1)
	hs, err := s.readMembers(ctx)
	switch {
	case err == nil:
		if ids := s.p.memberIDs(hs); s.plan == nil || !slices.Equal(ids, s.members) {
			s.members = ids
			all := ids
			if !slices.Contains(all, s.p.member) { // it holds its lock: a read just before its grant
				all = append(slices.Clone(ids), s.p.member)
			}
			s.plan = Assign(s.p.group, all, s.p.units)
		}
	case errors.Is(err, errors.ErrUnsupported):
		return 0, fmt.Errorf("partition: read the members of %q: %w", s.p.group, err)
	}
	if s.plan == nil {
		return next, nil
	}
	now := time.Now()
	for _, u := range s.p.units {
		h, taken := s.units[u]
		mine := s.plan[u] == s.p.member
		switch {
		case mine && !taken:
			s.take(ctx, u)
		case !mine && taken && !h.ending:
			if h.since.IsZero() {
				select {
				case t := <-h.granted:
					h.since = t
				default:
				}
			}
			if wait := h.since.Add(s.p.minHold).Sub(now); !h.since.IsZero() && wait > 0 {
				next = min(next, wait)
				continue
			}
			// Not granted yet (hold gives up a grant that comes now
			// without calling fn), or held for the minimum hold.
			h.ending = true
			h.cancel(ErrMoved)
		}
	}
	return next, nil
}

// memberIDs returns the member ids among the holders of the members'
// prefix, sorted.
func (p *Partition) memberIDs(hs []distlock.Holder) []string {
	var ids []string
	for _, h := range hs {
		id, ok := strings.CutPrefix(h.Key, p.prefix+"members/")
		if ok && id != "" && !strings.Contains(id, "/") && !h.Shared && !h.HasSlot {
			ids = append(ids, id)
		}
	}
	return distinct(ids)
}

// take starts taking unit: waiting for its lock, then running fn.
func (s *session) take(ctx context.Context, unit string) {
	uctx, cancel := context.WithCancelCause(ctx)
	h := &holding{cancel: cancel, granted: make(chan time.Time, 1)}
	s.units[unit] = h
	go func() {
		r := s.hold(uctx, unit, h)
		cancel(nil)
		s.results <- r
	}()
}

// hold takes unit's lock, runs fn under it and releases it.
func (s *session) hold(ctx context.Context, unit string, h *holding) result {
	l, err := s.p.c.Acquire(ctx, s.p.UnitKey(unit), s.p.opts()...)
	if err != nil {
		return result{unit: unit, err: err, stopped: ctx.Err() != nil}
	}
	h.granted <- time.Now()
	if ctx.Err() != nil { // given up as it was granted
		_ = l.Release(context.WithoutCancel(ctx))
		return result{unit: unit, stopped: true}
	}
	fctx, cancel := context.WithCancelCause(l.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	err = s.fn(fctx, Unit{Name: unit, Token: l.Token(), Lock: l})
	stop()
	cancel(nil)
	lived := l.Err() == nil && ctx.Err() == nil
	// A release not confirmed is retried by the Client in the background;
	// the unit has been given up here either way.
	_ = l.Release(context.WithoutCancel(ctx))
	if !lived {
		return result{unit: unit, stopped: true}
	}
	return result{unit: unit, err: err, fnErr: err != nil}
}

// stopAll ends every unit and waits until each is released.
func (s *session) stopAll() {
	for _, h := range s.units {
		h.cancel(ErrLeft)
	}
	for len(s.units) > 0 {
		r := <-s.results
		delete(s.units, r.unit)
	}
}

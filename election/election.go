package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock"
)

// KeyPrefix starts the lock key of every election: the election named
// NAME is the key KeyPrefix+NAME (see the package documentation).
const KeyPrefix = "election/"

// ErrNoLeader is matched by the error of Leader when the election has no
// leader.
var ErrNoLeader = errors.New("election: no leader")

// An Election is one named election over a Client: its candidates
// campaign for terms, one term at a time. Candidates in other processes
// take part through Elections of the same name over Clients of the same
// service. An Election holds no state of its own besides its name and
// options; it is safe for concurrent use, and one Election serves any
// number of candidates.
type Election struct {
	c        *distlock.Client
	name     string
	key      string
	lockOpts []distlock.LockOption
}

// Option configures an Election.
type Option func(*config)

type config struct {
	lockOpts []distlock.LockOption
}

// WithLockOptions sets the options of the lock that each term is (its TTL,
// renewal, drift, at-risk window...), over the Client's defaults.
// Campaign refuses a bad one with an error matching
// distlock.ErrInvalidOption. WithMaxDepth, WithLockOwner and
// WithElection are the Election's own and are overridden. Campaign waits
// unless WithWait(false) is among them: Campaign is then one try, which
// fails with an error matching distlock.ErrNotAcquired when the election
// has a leader. Default: none.
func WithLockOptions(opts ...distlock.LockOption) Option {
	return func(c *config) { c.lockOpts = append(c.lockOpts, opts...) }
}

// New returns the election named name over c. The name is any valid key
// (see distlock.ValidateKey) that leaves room for KeyPrefix; an error
// matching distlock.ErrInvalidKey reports one that does not, and
// distlock.ErrInvalidOption a nil Client.
func New(c *distlock.Client, name string, opts ...Option) (*Election, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: election: nil client", distlock.ErrInvalidOption)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: election: empty name", distlock.ErrInvalidKey)
	}
	key := KeyPrefix + name
	if err := distlock.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("election: name: %w", err)
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return &Election{c: c, name: name, key: key, lockOpts: cfg.lockOpts}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Key returns the lock key the election's terms hold: KeyPrefix+Name.
func (e *Election) Key() string { return e.key }

// Campaign waits until the candidate is elected (or tries once, with
// WithLockOptions(distlock.WithWait(false))), and returns its term,
// with value as the leader's value (what Leader and Observe report until
// Proclaim changes it). Candidates are elected one at a time, each when
// the term before has ended (resigned, lost, or its holder gone); on most
// backends in the order they started waiting, within one process.
//
// If ctx ends first, Campaign returns an error matching both
// distlock.ErrNotAcquired and ctx.Err(), and never a term: a term granted
// as ctx ended is resigned. A candidate cannot campaign with a context
// that comes from a term of the same election (the error matches
// distlock.ErrTooDeep). value must be valid UTF-8 of at most
// distlock.MaxOwnerLen bytes (distlock.ErrInvalidOption).
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	t, err := e.campaign(ctx, value)
	if err != nil {
		return nil, fmt.Errorf("election: campaign: %w", err)
	}
	return t, nil
}

// Leader returns the current leader: the value and token of the live
// term, as the service has them now. With no leader it returns an error
// matching ErrNoLeader. A backend that cannot read a key's holder gives an
// error matching errors.ErrUnsupported.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	l, err := e.leader(ctx)
	if err != nil {
		return Leader{}, err
	}
	if l.Token == 0 {
		return Leader{}, fmt.Errorf("%w in %q", ErrNoLeader, e.name)
	}
	return l, nil
}

// Observe sends the leader on the returned channel: first the current
// one, then each change, in term order: a new term (a larger Token), a new
// value in the same term (Proclaim), and a Leader with Token 0 when the
// election has no leader (a resignation, a lost term, before the first
// term). It is woken by the service where the backend can watch a key
// (see distlock.Client.Watch), and polls otherwise. It reports states, not
// events: a slow receiver gets the latest leader, and a term that begins
// and ends between two reads of the service is not seen. Tokens never
// decrease, as terms' tokens do not.
//
// The channel is closed when ctx ends or the Client is closed, and at
// once when the backend cannot read a key's holder (Leader says so).
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	return e.observe(ctx)
}

// Leader is the leader of an election: its value and the token of its
// term. The zero Leader (Token 0) means no leader.
type Leader struct {
	Value string
	Token uint64
}

// Run campaigns for value and calls fn with the term while it leads;
// fn's context ends when the term ends or ctx does. When fn returns, Run
// resigns the term and, unless fn failed, campaigns again (a term lost
// under fn, whatever fn returned, is campaigned for again too). Run
// returns fn's error when fn fails while its term lives, Campaign's when
// it fails for any reason but distlock.ErrUnavailable (tried again,
// backing off up to a second), and ctx.Err() when ctx ends.
func Run(ctx context.Context, e *Election, value string, fn func(ctx context.Context, t *Term) error) error {
	backoff := distlock.ExponentialBackoff(10*time.Millisecond, time.Second)
	for failures := 0; ; {
		t, err := e.Campaign(ctx, value)
		switch {
		case ctx.Err() != nil:
			if err == nil {
				// Elected as ctx ended: a term left held would keep the
				// election leading for nobody while the Client renews it.
				t.Resign(context.WithoutCancel(ctx))
			}
			return ctx.Err()
		case errors.Is(err, distlock.ErrUnavailable):
			failures++
			d, _ := backoff.Backoff(failures)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
			continue
		case err != nil:
			return err
		}
		failures = 0
		lost, err := lead(ctx, t, fn)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !lost:
			return err
		}
	}
}

// lead runs fn under t, resigns t, and reports whether t ended before fn
// returned.
func lead(ctx context.Context, t *Term, fn func(ctx context.Context, t *Term) error) (lost bool, err error) {
	fctx, cancel := context.WithCancelCause(t.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer func() {
		stop()
		cancel(nil)
		lost = t.Err() != nil
		// A resignation not confirmed is retried by the Client in the
		// background; the term has ended here either way.
		_ = t.Resign(context.WithoutCancel(ctx))
	}()
	return false, fn(fctx, t)
}

// A Term is one candidate's leadership, from Campaign to its end: its
// Token, and a Context that ends when it does. Its methods are safe for
// concurrent use. A Term must not be copied.
//
// What a Term promises, as a Lock does: while its context is not done, no
// other candidate can have been elected, with the clock drift and safety
// margin of its lock allowed for. What it cannot promise: that this
// process is not paused between checking and acting. Pass Token to the
// storage and let it refuse an older term (see package fence).
type Term struct {
	g     *distlock.Lock // the term's grant of the election's key
	mu    sync.Mutex
	value string
}

// Token returns the term's fencing token: strictly greater than the token
// of every earlier term of the election, and of every lock of its key.
func (t *Term) Token() uint64 { return t.g.Token() }

// Context returns a context that is cancelled when the term ends: lost
// (before another candidate can be elected) or resigned. context.Cause of
// it is why.
func (t *Term) Context() context.Context { return t.g.Context() }

// Done returns a channel that is closed when the term's context ends.
func (t *Term) Done() <-chan struct{} { return t.g.Done() }

// Err returns nil while the term lives; then why it ended: an error
// matching distlock.ErrLockLost when it was lost, distlock.ErrReleased
// after Resign. As Lock.Err, it is exact when called, ahead of the
// context's cancellation: check it just before acting as the leader.
func (t *Term) Err() error { return t.g.Err() }

// Lock returns the lock that the term is: the grant of the election's
// key, with the term's Token, Context and deadline. It is for what takes a
// lock, a backend's check-and-write helper above all (etcdlock's Fence,
// filelock's File), so that the storage refuses the writes of an ended
// term as it refuses those of a lost lock; the helpers that take a token
// take Token.
// Its Release is the term's Resign, its Refresh renews the term, and
// locks acquired under its Context nest in the term. Do not change its
// owner with Lock.SetOwner: Proclaim does that, and keeps Value true.
func (t *Term) Lock() *distlock.Lock { return t.g }

// AtRisk returns a channel that is closed when the term is at risk: its
// renewals have not been confirmed in time and its end is near (see
// distlock.Lock.AtRisk).
func (t *Term) AtRisk() <-chan struct{} { return t.g.AtRisk() }

// Deadline returns the local time at which the term's context will be
// cancelled unless a renewal of its lock is confirmed first; ok is false
// when the term has no time bound or has ended (see
// distlock.Lock.Deadline).
func (t *Term) Deadline() (deadline time.Time, ok bool) { return t.g.Deadline() }

// Value returns the leader's value: Campaign's, or the last Proclaim's.
func (t *Term) Value() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.value
}

// Proclaim replaces the leader's value, in the same term. It fails with
// an error matching distlock.ErrLockLost when the term was lost,
// distlock.ErrNotHeld after Resign, and errors.ErrUnsupported on a backend
// that cannot change the value of a held grant.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.g.SetOwner(ctx, value); err != nil {
		return fmt.Errorf("election: proclaim: %w", err)
	}
	t.value = value
	return nil
}

// Resign ends the term: its context is cancelled, then the service is
// told, and another candidate can be elected. It is owner-checked: a term
// that had been lost returns an error matching distlock.ErrLockLost and
// ends nothing, a later term least of all; a second Resign returns
// distlock.ErrNotHeld. If ctx is done, the resignation uses a fresh
// context bounded by the TTL; one not confirmed is retried in the
// background.
func (t *Term) Resign(ctx context.Context) error {
	if err := t.g.Release(ctx); err != nil {
		return fmt.Errorf("election: resign: %w", err)
	}
	return nil
}

package distlocktest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Factory returns a fresh Backend, as one more process would have it: its
// own connections or session. It should close them with t.Cleanup.
type Factory func(t *testing.T) driver.Backend

// Option adapts the suite to a backend.
type Option func(*suite)

// WithTTL sets the short lease TTL the suite uses where it waits for leases
// to lapse. Default: 1s. Session backends whose service has a minimum lease
// TTL set at least that.
func WithTTL(ttl time.Duration) Option { return func(s *suite) { s.ttl = ttl } }

// WithRevoke gives the suite a way to make the service drop the current
// grant of key, as it does when a lease expires on the server or a session
// ends. Session backends, whose grants do not lapse while their session
// lives, must provide it; without it the suite lets TTL grants lapse. With
// it the suite revokes grants where it would otherwise let them lapse, so a
// TTL backend that gives it runs the suite without it too: a silent expiry
// that leaves a waiter asleep, or that gives a token again, shows only then.
// In RunSemaphore, revoke drops every live permit of the semaphore kept at
// key.
func WithRevoke(revoke func(t *testing.T, key string)) Option {
	return func(s *suite) { s.revoke = revoke }
}

// WithUnstoredLimit says that the backend's layout for permits stores no
// semaphore limit (its Permits reports driver.UnknownLimit), so that a
// permit naming another limit cannot be refused: RunSemaphore then skips
// its tests of refused limits and expects driver.UnknownLimit where it
// reads the limit. The backend's documentation says so.
func WithUnstoredLimit() Option { return func(s *suite) { s.unstoredLimit = true } }

// WithoutSlots says that the backend's permits cannot name slots (its
// layout has none): RunSemaphore then checks, in place of its test of
// slots, that a permit asked with slots is refused with an error matching
// errors.ErrUnsupported, leaving no permit behind. The backend's
// documentation says so.
func WithoutSlots() Option { return func(s *suite) { s.noSlots = true } }

// WithUnreachable gives the suite a Backend whose service cannot be reached,
// to check that acquiring fails with distlock.ErrUnavailable in bounded time.
func WithUnreachable(f Factory) Option { return func(s *suite) { s.unreachable = f } }

// WithLeakOptions passes options to the goroutine-leak check run after each
// test (for example goleak.IgnoreTopFunction for a driver's pool).
func WithLeakOptions(opts ...goleak.Option) Option {
	return func(s *suite) { s.leakOpts = append(s.leakOpts, opts...) }
}

// WithPartitionUnits sets how many units RunPartition's group test shares
// among its 8 members: 64 by default. A backend that holds a connection
// per lock (pglock's session mode) gives fewer, so that 8 members' pools
// fit the server's connections on a small test machine.
func WithPartitionUnits(n int) Option { return func(s *suite) { s.partUnits = n } }

type suite struct {
	partUnits   int // WithPartitionUnits; 0: 64
	newBackend  Factory
	ttl         time.Duration
	revoke      func(t *testing.T, key string)
	unreachable Factory
	// unstoredLimit: the backend stores no semaphore limit (WithUnstoredLimit)
	unstoredLimit bool
	// noSlots: the backend's permits cannot name slots (WithoutSlots)
	noSlots   bool
	leakOpts  []goleak.Option
	run       string // unique per Run, so keys never collide on a reused server
	seq       atomic.Int64
	probed    bool // the probe has set unbounded
	unbounded bool // grants have no TTL (Validity.TTL == 0): they never lapse by themselves
}

// suiteTest is one test of a suite, run as a subtest.
type suiteTest struct {
	name string
	fn   func(t *testing.T)
}

// newSuite returns a suite of the backends newBackend returns, with opts.
func newSuite(newBackend Factory, opts []Option) *suite {
	s := &suite{newBackend: newBackend, ttl: time.Second, run: rand.Text()[:8]}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s
}

// runTests runs tests one after another, each as a subtest that checks for
// leaked goroutines and starts with the probe.
func (s *suite) runTests(t *testing.T, tests []suiteTest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.checkLeaks(t)
			s.probe(t)
			tc.fn(t)
		})
	}
}

// pushBound is how soon after a release a waiter must be served. Waiting is
// push-based, so a waiter is normally served within milliseconds; the bound
// is generous for loaded machines and far below the TTLs the suite uses, so
// only a backend that waits for expiry or polls slowly fails it.
const pushBound = 2 * time.Second

// Run runs the conformance suite against the backends newBackend returns.
// The tests run one after another (several wait for leases to lapse), each
// as a subtest.
func Run(t *testing.T, newBackend Factory, opts ...Option) {
	s := newSuite(newBackend, opts)
	s.runTests(t, []suiteTest{
		{"MutualExclusion/OneKey", s.testMutexOneKey},
		{"MutualExclusion/ManyKeys", s.testMutexManyKeys},
		{"Tokens/IncreaseAcrossReleaseExpiryAndLoss", s.testTokens},
		{"OwnerChecked/ReleaseAndRefreshAfterExpiry", s.testOwnerChecked},
		{"OwnerChecked/ClientReleaseAfterLoss", s.testClientReleaseAfterLoss},
		{"Loss/NoRenewalCancelsBeforeNextGrant", s.testLossNoRenewal},
		{"Loss/PartitionCancelsBeforeNextGrant", s.testLossPartition},
		{"Loss/RevokedGrantIsReported", s.testLossRevoked},
		{"Loss/MaxHold", s.testMaxHold},
		{"Renewal/KeepsLockPastTTL", s.testRenewal},
		{"Wait/ReleaseWakesWaiter", s.testReleaseWakesWaiter},
		{"Wait/TryAcquire", s.testTryAcquire},
		{"Wait/ContextCancelled", s.testCancelWhileWaiting},
		{"Reentrancy", s.testReentrancy},
		{"Reentrancy/Concurrent", s.testReentrancyConcurrent},
		{"Nesting/EnclosingEndsContextNotGrant", s.testNesting},
		{"AcquireAll/OppositeOrderTransfers", s.testTransfers},
		{"AcquireAll/AllOrNothing", s.testAllOrNothing},
		{"AcquireAll/LostIfAnyPartLost", s.testSetLost},
		{"Do", s.testDo},
		{"Close", s.testClose},
		{"BackendClose/EndsWaiters", s.testBackendClose},
		{"BadInput/Keys", s.testBadKeys},
		{"BadInput/OddKeysAreDistinct", s.testOddKeys},
		{"BadInput/Options", s.testBadOptions},
		{"BadInput/DoubleReleaseAndRefreshAfterEnd", s.testDoubleRelease},
		{"BadInput/Unreachable", s.testUnreachable},
	})
}

// probe finds out, in the first test that runs, whether the backend's
// grants are bounded by a TTL. Its Backend is closed with that test: one
// that lived through the run would start goroutines inside later tests
// when it reconnected (a session client does on a slow ping), and fail
// their leak checks.
func (s *suite) probe(t *testing.T) {
	if s.probed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, key := s.newBackend(t), s.key(t)
	// A service that is unavailable for a moment is tried again, as a
	// Client would: the probe is often the first request to fresh servers,
	// which a loaded machine may not answer within a short TTL's timeouts.
	pauses := distlock.ExponentialBackoff(10*time.Millisecond, time.Second)
	var l driver.Lease
	var err error
	for failures := 1; ; failures++ {
		l, err = b.Acquire(ctx, key, driver.AcquireOptions{TTL: s.ttl})
		if !errors.Is(err, distlock.ErrUnavailable) || ctx.Err() != nil {
			break
		}
		t.Logf("probe Acquire, try %d: %v", failures, err)
		pause, _ := pauses.Backoff(failures)
		time.Sleep(pause)
	}
	if err != nil {
		t.Fatalf("probe Acquire: %v", err)
	}
	s.unbounded, s.probed = l.Validity().TTL == 0, true
	if err := l.Release(ctx); err != nil {
		t.Fatalf("probe Release: %v", err)
	}
	if s.unbounded {
		t.Logf("grants have no TTL: lapses are tested through WithRevoke (given: %v)", s.revoke != nil)
	}
}

// canLapse reports whether the suite can make a grant lapse: by its TTL, or
// by revoking it.
func (s *suite) canLapse() bool { return !s.unbounded || s.revoke != nil }

// needLapse skips a test that needs grants to lapse when they cannot.
func (s *suite) needLapse(t *testing.T) {
	t.Helper()
	if !s.canLapse() {
		t.Skip("grants never lapse on this backend and it gave no WithRevoke")
	}
}

// lose makes the service drop the grant of key, held through a Client over
// f: by cutting the holder off so that its TTL runs out, or, for grants
// without a TTL, by revoking it.
func (s *suite) lose(t *testing.T, f *Faulty, key string) {
	t.Helper()
	if s.unbounded {
		s.revoke(t, key)
		return
	}
	f.Partition(key)
}

// checkLeaks registers, first, a clean-up that runs last: after the test's
// clients and backends are closed, no goroutine started by the test remains.
func (s *suite) checkLeaks(t *testing.T) {
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, s.leakOpts...)
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		if err := goleak.Find(opts...); err != nil {
			t.Errorf("goroutines leaked: %v", err)
		}
	})
}

// key returns a key unique to this run and test.
func (s *suite) key(t *testing.T) string {
	name := strings.ReplaceAll(t.Name(), " ", "_")
	return fmt.Sprintf("distlocktest/%s/%s/%d", s.run, name, s.seq.Add(1))
}

// client returns a Client over a fresh backend, closed with the test.
func (s *suite) client(t *testing.T, opts ...distlock.Option) *distlock.Client {
	t.Helper()
	return s.clientOver(t, s.newBackend(t), opts...)
}

func (s *suite) clientOver(t *testing.T, b driver.Backend, opts ...distlock.Option) *distlock.Client {
	t.Helper()
	c, err := distlock.New(b, opts...)
	if err != nil {
		t.Fatalf("distlock.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// ctx returns a context bounding a whole test.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// lapse is how long the suite allows for a short lease to lapse and the next
// holder to be served.
func (s *suite) lapse() time.Duration { return 10*s.ttl + 10*time.Second }

func mustAcquire(t *testing.T, c *distlock.Client, ctx context.Context, key string, opts ...distlock.LockOption) *distlock.Lock {
	t.Helper()
	l, err := c.Acquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return l
}

func mustRelease(t *testing.T, l *distlock.Lock) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", l.Key(), err)
	}
}

// assertHeld checks that key is held by someone: a fresh client cannot get it.
func (s *suite) assertHeld(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	l, err := s.client(t).TryAcquire(ctx, key)
	if err == nil {
		l.Release(ctx)
		t.Fatalf("TryAcquire(%q) by another client succeeded; the key should be held", key)
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire(%q): %v; want ErrNotAcquired", key, err)
	}
}

// assertFree checks that key can be taken at once by a fresh client.
func (s *suite) assertFree(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	l, err := s.client(t).TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire(%q) by another client: %v; the key should be free", key, err)
	}
	mustRelease(t, l)
}

// waitDone waits for a lock's context to end, up to d.
func waitDone(t *testing.T, done <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: not done after %v", what, d)
	}
}

// critical checks that at most one holder at a time is inside a section.
type critical struct {
	inside atomic.Int32
	mu     sync.Mutex
	tokens []uint64
}

func (cs *critical) enter(t *testing.T, l *distlock.Lock) {
	if n := cs.inside.Add(1); n != 1 {
		t.Errorf("%d holders of %q at once (token %d)", n, l.Key(), l.Token())
	}
	cs.mu.Lock()
	cs.tokens = append(cs.tokens, l.Token())
	cs.mu.Unlock()
}

func (cs *critical) leave(t *testing.T, l *distlock.Lock) {
	if err := l.Err(); err != nil {
		t.Errorf("lock %q lost inside the critical section: %v", l.Key(), err)
	}
	cs.inside.Add(-1)
}

// checkIncreasing checks tokens were granted in strictly increasing order.
func checkIncreasing(t *testing.T, what string, tokens []uint64) {
	t.Helper()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("%s: token %d granted after %d", what, tokens[i], tokens[i-1])
			return
		}
	}
	if len(tokens) > 0 && tokens[0] == 0 {
		t.Errorf("%s: token 0 granted", what)
	}
}

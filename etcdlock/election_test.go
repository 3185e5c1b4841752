package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/testserver"
)

// The election suite over etcd: every candidate a Backend of its own, in
// concurrency.Election's layout; an abandoned term's session lease is
// revoked, as etcd expires it.
func TestElectionConformance(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	distlocktest.RunElection(t,
		func(t *testing.T) driver.Backend { return newBackend(t, newClient(t, e.Endpoints)) },
		distlocktest.WithTTL(suiteTTL),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			revokeHolder(t, admin, etcdlock.DefaultPrefix, key)
		}),
	)
}

// The shared tests of a backend's holder of one key (exact keys, a watch
// woken without polling, SetOwner seen by another process and
// owner-checked), over etcd.
func TestHolderConformance(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	distlocktest.RunHolder(t,
		func(t *testing.T) driver.Backend { return newBackend(t, newClient(t, e.Endpoints)) },
		distlocktest.WithTTL(suiteTTL),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			revokeHolder(t, admin, etcdlock.DefaultPrefix, key)
		}),
	)
}

// newElection returns the election name over a Client of b.
func newElection(t *testing.T, b driver.Backend, name string, opts ...distlock.LockOption) *election.Election {
	t.Helper()
	el, err := election.New(newLockClient(t, b), name, election.WithLockOptions(opts...))
	if err != nil {
		t.Fatal(err)
	}
	return el
}

// nextLines returns the next n lines etcdctl prints, within d.
func nextLines(t *testing.T, lines <-chan string, n int, d time.Duration) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		got = append(got, firstLine(t, lines, d))
	}
	return got
}

// noLine checks that etcdctl printed nothing so far.
func noLine(t *testing.T, lines <-chan string, what string) {
	t.Helper()
	select {
	case l := <-lines:
		t.Fatalf("%s: etcdctl printed %q", what, l)
	default:
	}
}

// `etcdctl elect NAME PROPOSAL` and distlock's candidates take part in the
// same election, each waiting while the other leads, and `etcdctl elect
// -l NAME` observes distlock's leader and its proclaimed values.
func TestEtcdctlElect(t *testing.T) {
	e := testserver.StartEtcd(t)
	testserver.EtcdctlPath(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	el := newElection(t, b, "payments/leader")
	name := b.KeyPath(el.Key()) // what etcdctl is given

	ta, err := el.Campaign(ctx, "10.0.0.7:8080")
	if err != nil {
		t.Fatal(err)
	}
	observed, stopObserver := etcdctl(t, e, "elect", "-l", name)
	if got := nextLines(t, observed, 2, 30*time.Second); got[1] != "10.0.0.7:8080" {
		t.Fatalf("etcdctl elect -l shows %q, want distlock's value", got)
	}
	if err := ta.Proclaim(ctx, "10.0.0.7:9090"); err != nil {
		t.Fatal(err)
	}
	if got := nextLines(t, observed, 2, 30*time.Second); got[1] != "10.0.0.7:9090" {
		t.Fatalf("etcdctl elect -l shows %q after Proclaim, want the proclaimed value", got)
	}

	// etcdctl campaigns, and waits while distlock leads.
	elected, stopCandidate := etcdctl(t, e, "elect", name, "etcdctl-proposal")
	kvs := waitKeys(t, admin, name, 2)
	noLine(t, elected, "while distlock leads")
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := nextLines(t, elected, 2, 30*time.Second); got[0] != string(kvs[1].Key) || got[1] != "etcdctl-proposal" {
		t.Fatalf("etcdctl elect printed %q, want its key %q and its proposal", got, kvs[1].Key)
	}
	if got := nextLines(t, observed, 2, 30*time.Second); got[1] != "etcdctl-proposal" {
		t.Errorf("etcdctl elect -l shows %q, want etcdctl's proposal", got)
	}
	stopObserver()

	// distlock sees etcdctl lead, and waits while it does.
	etcdctlTerm := uint64(kvs[1].CreateRevision)
	if l, err := el.Leader(ctx); err != nil || l != (election.Leader{Value: "etcdctl-proposal", Token: etcdctlTerm}) {
		t.Errorf("Leader() = %+v, %v; want etcdctl's proposal and term %d", l, err, etcdctlTerm)
	}
	obs := el.Observe(ctx)
	if l := <-obs; l.Token != etcdctlTerm || l.Value != "etcdctl-proposal" {
		t.Errorf("Observe sent %+v first, want etcdctl's term %d", l, etcdctlTerm)
	}
	type result struct {
		term *election.Term
		err  error
	}
	campaigned := make(chan result, 1)
	go func() {
		term, err := el.Campaign(ctx, "10.0.0.8:8080")
		campaigned <- result{term, err}
	}()
	waitKeys(t, admin, name, 2)
	select {
	case r := <-campaigned:
		t.Fatalf("Campaign returned while etcdctl leads: %v, %v", r.term, r.err)
	default:
	}
	stopCandidate() // etcdctl resigns
	r := <-campaigned
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.term.Token() <= etcdctlTerm {
		t.Errorf("term %d after etcdctl's %d", r.term.Token(), etcdctlTerm)
	}
	for l := range obs {
		if l.Token == r.term.Token() {
			if l.Value != "10.0.0.8:8080" {
				t.Errorf("Observe sent %+v, want the value 10.0.0.8:8080", l)
			}
			break
		}
	}
	if err := r.term.Resign(ctx); err != nil {
		t.Error(err)
	}
}

// A candidate whose session ends while it waits gets an error, never a
// term (etcd#19597: concurrency.Election.Campaign returns nil once the
// keys before its own are gone, although its own went with its lease).
func TestCampaignWhoseSessionEndsWhileWaiting(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)

	t.Run("ConcurrencyElection", func(t *testing.T) {
		// The baseline: etcd's own Campaign, which must show the fault.
		ctx := testCtx(t)
		cli := newClient(t, e.Endpoints)
		const name = "baseline/leader"
		sa, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			t.Fatal(err)
		}
		defer sa.Close()
		sb, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		ea := concurrency.NewElection(sa, name)
		if err := ea.Campaign(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		campaigned := make(chan error, 1)
		go func() { campaigned <- concurrency.NewElection(sb, name).Campaign(ctx, "b") }()
		waitKeys(t, admin, name, 2)
		if _, err := admin.Revoke(ctx, sb.Lease()); err != nil {
			t.Fatal(err)
		}
		waitKeys(t, admin, name, 1)
		if err := ea.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-campaigned; err != nil {
			t.Fatalf("concurrency.Election.Campaign: %v; the fault did not bite", err)
		}
		if kvs := keysUnder(t, admin, name); len(kvs) != 0 {
			t.Fatalf("keys %v: the fault did not bite", kvs)
		}
		t.Log("concurrency.Election.Campaign returned nil, and no key is held")
	})

	t.Run("Election", func(t *testing.T) {
		ctx := testCtx(t)
		ea := newElection(t, newBackend(t, newClient(t, e.Endpoints)), "session-ends/leader")
		eb := newElection(t, newBackend(t, newClient(t, e.Endpoints)), "session-ends/leader",
			distlock.WithRetry(distlock.NoRetry)) // an error, not a campaign again on a new session
		name := etcdlock.LockName(etcdlock.DefaultPrefix, ea.Key())
		ta, err := ea.Campaign(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			term *election.Term
			err  error
		}
		campaigned := make(chan result, 1)
		go func() {
			term, err := eb.Campaign(ctx, "b")
			campaigned <- result{term, err}
		}()
		kvs := waitKeys(t, admin, name, 2)
		if _, err := admin.Revoke(ctx, clientv3.LeaseID(kvs[1].Lease)); err != nil {
			t.Fatal(err)
		}
		if err := ta.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-campaigned
		if r.err == nil {
			t.Fatalf("Campaign returned term %d although its session ended while it waited", r.term.Token())
		}
		if !errors.Is(r.err, distlock.ErrUnavailable) || !errors.Is(r.err, etcdlock.ErrSessionLost) {
			t.Errorf("Campaign: %v, want ErrUnavailable and ErrSessionLost", r.err)
		}
		if kvs := keysUnder(t, admin, name); len(kvs) != 0 {
			t.Errorf("keys %v left behind", kvs)
		}
	})
}

// A resignation whose reply was lost, retried after the next term of the
// same session began, never ends that term (etcd#22082: a retried
// Mutex.Unlock deletes whatever key is at its path, which the session's
// next lock reuses).
func TestResignRetriedAfterLostReply(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)

	t.Run("ConcurrencyMutex", func(t *testing.T) {
		// The baseline: etcd's own Unlock, which must show the fault.
		ctx := testCtx(t)
		cli, lose := loseDeleteReply(newClient(t, e.Endpoints))
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ghostTTL/time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		const name = "baseline/unlock"
		m1 := concurrency.NewMutex(s, name)
		if err := m1.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		lose()
		if err := m1.Unlock(ctx); err == nil {
			t.Fatal("Unlock whose reply was lost succeeded: the fault did not bite")
		}
		waitKeys(t, admin, name, 0) // it took effect
		m2 := concurrency.NewMutex(s, name)
		if err := m2.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m1.Unlock(ctx); err != nil { // the retry
			t.Fatal(err)
		}
		if kvs := keysUnder(t, admin, name); len(kvs) != 0 {
			t.Fatalf("the next holder's key %s survived the retried Unlock: the fault did not bite", kvs[0].Key)
		}
		t.Log("the retried Unlock deleted the next holder's key")
	})

	t.Run("Resign", func(t *testing.T) {
		ctx := testCtx(t)
		cli, lose := loseDeleteReply(newClient(t, e.Endpoints))
		b := newBackend(t, cli)
		const key = election.KeyPrefix + "resign/leader"
		name := b.KeyPath(key)
		candidacy := driver.AcquireOptions{TTL: ghostTTL, Wait: true, Owner: "a", Election: "resign/leader"}
		first, err := b.Acquire(ctx, key, candidacy)
		if err != nil {
			t.Fatal(err)
		}
		lose()
		if err := first.Release(ctx); !errors.Is(err, distlock.ErrUnavailable) {
			t.Fatalf("Resign whose reply was lost: %v, want ErrUnavailable", err)
		}
		waitKeys(t, admin, name, 0) // it took effect
		candidacy.Owner = "b"
		next, err := b.Acquire(ctx, key, candidacy)
		if err != nil {
			t.Fatal(err)
		}
		kvs := keysUnder(t, admin, name)
		if len(kvs) != 1 || uint64(kvs[0].CreateRevision) != next.Token() || clientv3.LeaseID(kvs[0].Lease) != etcdlock.SessionLease(b, ghostTTL) {
			t.Fatalf("keys %v: want the next term's, at the same path (the same session)", kvs)
		}
		if err := first.Release(ctx); err != nil && !errors.Is(err, distlock.ErrLockLost) { // the retry
			t.Errorf("the retried Resign: %v", err)
		}
		if kvs := keysUnder(t, admin, name); len(kvs) != 1 || uint64(kvs[0].CreateRevision) != next.Token() {
			t.Fatalf("the retried Resign ended the next term: keys %v", kvs)
		}
		if h, held, err := b.Holder(ctx, key); err != nil || !held || h.Token != next.Token() || h.Owner != "b" {
			t.Errorf("Holder = %+v, %v, %v; want the next term, value b", h, held, err)
		}
		if err := next.Release(ctx); err != nil {
			t.Error(err)
		}
	})
}

// loseDeleteReply makes cli's next Delete, once lose is called, take effect
// in etcd and then fail as if its reply had been lost.
func loseDeleteReply(cli *clientv3.Client) (_ *clientv3.Client, lose func()) {
	kv := &lostDeleteReply{KV: cli.KV}
	cli.KV = kv
	return cli, func() { kv.armed.Store(true) }
}

type lostDeleteReply struct {
	clientv3.KV
	armed atomic.Bool
}

func (kv *lostDeleteReply) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	resp, err := kv.KV.Delete(ctx, key, opts...)
	if err == nil && kv.armed.CompareAndSwap(true, false) {
		return nil, status.Error(codes.Unavailable, "the reply was lost")
	}
	return resp, err
}

// A leader frozen past its TTL (its process stopped: no keep-alive reaches
// etcd) has its term reported lost (Err, exact on the local clock; its
// context ends soon after) before another candidate's Campaign returns,
// and its late write is refused by the fence; without
// one (the baseline, which must bite) it overwrites the new leader's.
func TestFrozenLeaderIsFenced(t *testing.T) {
	e := testserver.StartEtcd(t)
	for _, fenced := range []bool{false, true} {
		t.Run(map[bool]string{false: "Unfenced", true: "Fenced"}[fenced], func(t *testing.T) {
			ctx := testCtx(t)
			p := faultproxy.Start(t, e.Members[0].ClientAddr)
			name := fmt.Sprintf("frozen/%v", fenced)
			ea := newElection(t, newBackend(t, newClient(t, []string{p.Addr()}), etcdlock.WithRequestTimeout(time.Second)), name,
				distlock.WithTTL(suiteTTL))
			eb := newElection(t, newBackend(t, newClient(t, e.Endpoints)), name, distlock.WithTTL(suiteTTL))

			var record string
			reg := fence.NewRegister()
			write := func(term *election.Term, value string) error {
				if !fenced {
					record = value
					return nil
				}
				return reg.Do("record", term.Token(), func() error { record = value; return nil })
			}
			ta, err := ea.Campaign(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if err := ta.Err(); err != nil { // A checks that it leads...
				t.Fatalf("A's term: %v", err)
			}
			p.Blackhole() // ...and freezes: nothing of it reaches etcd
			tb, err := eb.Campaign(ctx, "b")
			if err != nil {
				p.Heal()
				t.Fatal(err)
			}
			// Judged by the local clock, as distlocktest does: Err is
			// exact, and the context's cancellation follows when the
			// watchdog runs, which on a loaded machine can be after B's
			// Campaign returned.
			if err := ta.Err(); !errors.Is(err, distlock.ErrLockLost) {
				p.Heal()
				t.Fatalf("B's Campaign returned (term %d) while A's term %d lived: Err() = %v, want ErrLockLost", tb.Token(), ta.Token(), err)
			}
			select {
			case <-ta.Done():
			case <-time.After(30 * time.Second):
				p.Heal()
				t.Fatalf("A's term %d's context lived 30s after its loss", ta.Token())
			}
			if tb.Token() <= ta.Token() {
				t.Fatalf("term %d after term %d", tb.Token(), ta.Token())
			}
			if err := write(tb, "b"); err != nil {
				t.Fatalf("B's write: %v", err)
			}
			p.Heal() // A wakes, and writes as the leader it was
			err = write(ta, "a")
			if !fenced {
				if err != nil || record != "a" {
					t.Fatalf("unfenced late write: %v, record %q; the baseline should let it overwrite B's", err, record)
				}
				return
			}
			if !errors.Is(err, fence.ErrStaleToken) {
				t.Errorf("fenced late write: %v, want ErrStaleToken", err)
			}
			if record != "b" {
				t.Errorf("record = %q, want B's", record)
			}
			if err := tb.Resign(ctx); err != nil {
				t.Errorf("B's Resign: %v", err)
			}
		})
	}
}

// A Campaign, or a try of a lock (which concurrency has as
// Mutex.TryLock), cancelled while the transaction that creates its key is
// on its way leaves no key behind. etcd serves each request in a
// goroutine of its own, so a transaction the client abandoned can be
// applied after the clean-up's delete that followed it: the key would
// then hold the election, or the lock, for nobody (with a stale value)
// while its session lives. (The try abandoned its transaction before.)
func TestCancelledWhileCreatingLeavesNoKey(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	for _, tc := range []struct {
		name string
		// start returns the lock key, a function that asks for it once,
		// ending whatever it was granted, and one that checks, once the
		// cancelled ask has ended, that nothing holds it (or nil).
		start func(t *testing.T, b *etcdlock.Backend) (key string, ask func(ctx context.Context) error, free func(ctx context.Context) error)
	}{
		{"Campaign", func(t *testing.T, b *etcdlock.Backend) (string, func(context.Context) error, func(context.Context) error) {
			el := newElection(t, b, "late/leader", distlock.WithRetry(distlock.NoRetry))
			return el.Key(), func(ctx context.Context) error {
					term, err := el.Campaign(ctx, "a")
					if term != nil {
						term.Resign(context.WithoutCancel(ctx))
					}
					return err
				}, func(ctx context.Context) error {
					if l, err := el.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
						return fmt.Errorf("Leader() = %+v, %v; want ErrNoLeader", l, err)
					}
					return nil
				}
		}},
		{"TryAcquire", func(t *testing.T, b *etcdlock.Backend) (string, func(context.Context) error, func(context.Context) error) {
			c := newLockClient(t, b, distlock.WithRetry(distlock.NoRetry))
			return "late/lock", func(ctx context.Context) error {
				l, err := c.Acquire(ctx, "late/lock", distlock.WithWait(false))
				if l != nil {
					l.Release(context.WithoutCancel(ctx))
				}
				return err
			}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			cli := newClient(t, e.Endpoints)
			kv := &lateTxnKV{KV: cli.KV, pending: make(chan struct{}), release: make(chan struct{}), deleted: make(chan struct{}), late: make(chan struct{})}
			cli.KV = kv
			b := newBackend(t, cli)
			key, ask, free := tc.start(t, b)
			name := b.KeyPath(key)
			if err := ask(ctx); err != nil { // the session exists: the next request is the creation
				t.Fatal(err)
			}

			kv.armed.Store(true)
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- ask(cctx) }()
			waitClosed(t, kv.pending, 30*time.Second, "the creating transaction")
			cancel()
			released := false
			if !kv.abandonable() {
				close(kv.release) // the client waits for the answer: etcd gives it
				released = true
			}
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled: %v, want context.Canceled", err)
			}
			if !released {
				close(kv.release)
			}
			if kv.wasAbandoned() {
				waitClosed(t, kv.late, 30*time.Second, "the abandoned transaction")
			}
			if kvs := keysUnder(t, admin, name); len(kvs) != 0 {
				t.Fatalf("the cancelled %s left %d key(s), value %q: held for nobody", tc.name, len(kvs), kvs[0].Value)
			}
			if free != nil {
				if err := free(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// lateTxnKV holds the next transaction, once armed, until release, as a
// slow etcd would; a transaction the client abandons meanwhile is applied
// after the next Delete, as etcd may apply it.
type lateTxnKV struct {
	clientv3.KV
	armed                           atomic.Bool
	pending, release, deleted, late chan struct{}

	held      atomic.Pointer[lateTxn]
	abandoned atomic.Bool
	once      sync.Once
}

func (kv *lateTxnKV) Txn(ctx context.Context) clientv3.Txn {
	if !kv.armed.CompareAndSwap(true, false) {
		return kv.KV.Txn(ctx)
	}
	t := &lateTxn{kv: kv, ctx: ctx}
	kv.held.Store(t)
	return t
}

// abandonable reports whether the held transaction's context has ended:
// the client can abandon it.
func (kv *lateTxnKV) abandonable() bool { return kv.held.Load().ctx.Err() != nil }

func (kv *lateTxnKV) wasAbandoned() bool { return kv.abandoned.Load() }

func (kv *lateTxnKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	resp, err := kv.KV.Delete(ctx, key, opts...)
	if kv.abandoned.Load() {
		kv.once.Do(func() { close(kv.deleted) })
	}
	return resp, err
}

type lateTxn struct {
	kv          *lateTxnKV
	ctx         context.Context
	cmps        []clientv3.Cmp
	thens, elss []clientv3.Op
}

func (t *lateTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.cmps = append(t.cmps, cs...); return t }
func (t *lateTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.thens = append(t.thens, ops...); return t }
func (t *lateTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.elss = append(t.elss, ops...); return t }

func (t *lateTxn) commit(ctx context.Context) (*clientv3.TxnResponse, error) {
	return t.kv.KV.Txn(ctx).If(t.cmps...).Then(t.thens...).Else(t.elss...).Commit()
}

func (t *lateTxn) Commit() (*clientv3.TxnResponse, error) {
	close(t.kv.pending)
	select {
	case <-t.kv.release:
		return t.commit(t.ctx)
	case <-t.ctx.Done():
		t.kv.abandoned.Store(true)
		go func() {
			defer close(t.kv.late)
			<-t.kv.deleted
			t.commit(context.Background())
		}()
		return nil, t.ctx.Err()
	}
}

// A candidate that finds a key of its session at its place (left by an
// earlier request whose outcome it could not know) takes it over with its
// own value, as concurrency.Election.Campaign does, and not the stale one.
func TestCampaignTakesOverItsKeyWithItsValue(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	el := newElection(t, b, "takeover/leader", distlock.WithTTL(ghostTTL))
	warm, err := el.Campaign(ctx, "warm") // the session exists
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	id := etcdlock.SessionLease(b, ghostTTL)
	stale := fmt.Sprintf("%s/%x", b.KeyPath(el.Key()), int64(id))
	if _, err := admin.Put(ctx, stale, "stale", clientv3.WithLease(id)); err != nil {
		t.Fatal(err)
	}
	term, err := el.Campaign(ctx, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := el.Leader(ctx); err != nil || l != (election.Leader{Value: "fresh", Token: term.Token()}) {
		t.Errorf("Leader() = %+v, %v; want the value fresh, term %d", l, err, term.Token())
	}
	if err := term.Resign(ctx); err != nil {
		t.Error(err)
	}
}

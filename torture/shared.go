package torture

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/zklock"
)

// The shared rows: package rwlock's read/write locks under the faults of
// the lock rows. The read/write lock named NAME is the key NAME, its write
// lock the key's exclusive lock asked with distlock.WithWriter, a read
// lock a shared grant (distlock.WithShared); every grant's token, read or
// write, comes from the key's counter. The writer rows run the generic
// scenarios with the workers' grants being write locks (Scenario.RW) and
// readers holding read locks between them: before each holder's grant a
// population of readers takes read locks and reads under them, the
// holder's write lock, tried, is refused, then asked and seen waiting (a
// reader's try is refused while a writer waits, the writer preference),
// and granted once the readers release; during the fault, once the other
// writer is granted, the readers ask again and wait for its release. So
// the mutex model (of the write locks), the token model (of every grant)
// and the register apply unchanged, and a read lock proven live while a
// write lock is counts as an overlap. The reader row pauses a reader
// instead, and counts what it read.
//
// A backend whose Backend does not implement driver.SharedLocks has no
// shared row (the reason is listed), whatever Expect says below.

// sharedBackends are the Backend types the workers open, by kind.
var sharedBackends = map[string]driver.Backend{
	backendRedis:   (*redislock.Backend)(nil),
	backendEtcd:    (*etcdlock.Backend)(nil),
	backendFile:    (*filelock.Backend)(nil),
	backendZK:      (*zklock.Backend)(nil),
	backendPG:      (*pglock.Backend)(nil),
	backendGateway: (*gatewaylock.Backend)(nil),
	backendRedlock: (*redlock.Backend)(nil),
}

// sharedLocks reports whether the backend of kind grants shared locks.
func sharedLocks(kind string) bool {
	_, ok := sharedBackends[kind].(driver.SharedLocks)
	return ok
}

// sharedRows drops from each row the backends that grant no shared locks,
// saying why.
func sharedRows(rows ...Scenario) []Scenario {
	for i := range rows {
		for kind := range sharedBackends {
			if sharedLocks(kind) {
				continue
			}
			why := fmt.Sprintf("%T does not implement driver.SharedLocks: no read locks", sharedBackends[kind])
			if old, ok := rows[i].Why[kind]; ok {
				if _, expected := rows[i].Expect[kind]; !expected {
					why += "; and " + old
				}
			}
			delete(rows[i].Expect, kind)
			rows[i].Why[kind] = why
		}
	}
	return rows
}

func init() {
	Scenarios = append(Scenarios, sharedRows(
		Scenario{
			Name: "shared", Variant: "writer-pause", RW: true,
			Title:  "as pause, on a read/write lock: the holder of the write lock (granted after readers released their read locks, which it waited for), having checked it, is SIGSTOPped past its TTL; another writer is granted and writes while readers wait for it; then the first resumes and writes with its old token",
			Expect: map[string]Expect{backendRedis: ExpectBite, backendEtcd: ExpectBite, backendZK: ExpectBite, backendPG: ExpectBite, backendGateway: ExpectBite},
			Why: map[string]string{
				backendPG:      "run in lease mode, as pause/lease: a session-mode holder, stopped, keeps its connection's hold (see pause), where a lease-mode grant, read or write, is a row that expires by the server's clock",
				backendGateway: "the stopped client's sessions are not kept alive: the gateway ends them after their TTL and releases their grants (see pause)",
				backendFile:    "flock has no TTL: a stopped writer keeps the lock (see pause)",
			},
			Run:   withReaders(pauseScenario),
			RunOn: map[string]func(*Fixture) error{backendPG: inLeaseMode(withReaders(pauseScenario))},
		},
		Scenario{
			Name: "shared", Variant: "writer-partition", RW: true,
			Title:  "as partition, on a read/write lock: the holder of the write lock (granted after readers released), cut off from the service (proxy blackhole), keeps writing with its token, ignoring its context, after another writer was granted",
			Expect: map[string]Expect{backendRedis: ExpectBite, backendEtcd: ExpectBite, backendZK: ExpectBite, backendPG: ExpectBite, backendGateway: ExpectBite},
			Why: map[string]string{
				backendPG:      "run in lease mode (a session-mode holder cut off keeps its connection's hold: see partition): the proxy is between the writer and its pool's connections, its LISTEN session is direct; its write lock's row expires by the server's clock",
				backendGateway: "the proxy is between the client and the gateway; the gateway ends the cut-off sessions after their TTL",
				backendFile:    "no network between a process and its kernel",
			},
			Run:   withReaders(partitionScenario),
			RunOn: map[string]func(*Fixture) error{backendPG: inLeaseMode(withReaders(partitionScenario))},
		},
		Scenario{
			Name: "shared", Variant: "reader-pause", RW: true,
			Title:  "a reader, having checked its read lock, is SIGSTOPped past its TTL; a writer is granted and writes with its token; the reader resumes and reads (fenced: then validates its read against the store's highest admitted token)",
			Expect: map[string]Expect{backendRedis: ExpectBite, backendEtcd: ExpectBite, backendZK: ExpectBite, backendPG: ExpectBite, backendGateway: ExpectBite},
			Why: map[string]string{
				backendPG:      "run in lease mode: a session-mode reader, stopped, keeps its connection's shared hold, where a lease-mode read lock is a row that expires by the server's clock",
				backendGateway: "the stopped reader's session is not kept alive: the gateway ends it after its TTL and releases its read lock",
				backendFile:    "flock has no TTL: a stopped reader keeps its read lock, and the writer waits",
			},
			Run:   readerPauseScenario,
			RunOn: map[string]func(*Fixture) error{backendPG: inLeaseMode(readerPauseScenario)},
		},
	)...)
	findings["shared/writer-pause"] = "A write lock is the key's exclusive lease: it waited for the readers' read locks (a reader's try was refused while it waited, and its grant came after their releases), and its frozen holder's lease lapsed, after which the service granted the other writer, and the readers queued behind that writer. The frozen writer still writes, with its old token, after the next writer wrote: without a fence the store takes it; a fenced store refuses it (a write lock's token is above every earlier grant's of the key, read locks' included)."
	findings["shared/writer-partition"] = "The cut-off writer's context is cancelled by its local deadline before the service lets its write lock lapse and grants the other writer (the mutex model of the write locks holds, and no read lock overlaps a write lock), but a writer that ignores its context keeps writing: only the fence refuses its writes."
	findings["shared/reader-pause"] = "A read lock is a lease like any grant: the frozen reader's read lock ends by its local deadline before the writer is granted (checked in every round: the reader's deadline as it stood when it was stopped comes before the writer's Acquire returns), but a reader paused between its check and its read reads, after the pause, what the writer wrote. The store's write fence does not help a read: without validation the reader uses a value written under a token above its own, as if under its read lock. Validating after the read (the store's highest admitted token for the resource not above the reader's token: fence.Register.Highest) catches it: the fenced run's reader discards every such read."
}

// withReaders spawns the readers of a writer row (two readers and a
// probe, which tries read locks to see a writer waiting), then runs run.
func withReaders(run func(*Fixture) error) func(*Fixture) error {
	return func(f *Fixture) error {
		ws := f.Workers(map[string]WorkerConfig{"R1": {}, "R2": {}, "P": {}})
		f.readers, f.probe = []*Worker{ws["R1"], ws["R2"]}, ws["P"]
		return run(f)
	}
}

// each runs fn for every worker concurrently and returns their errors.
func each(ws []*Worker, fn func(w *Worker) error) error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { errs[i] = fn(w) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// holdAfterReaders has a take the key. With readers (a writer row), the
// readers first take read locks and read under them; a's write lock, tried,
// must be refused; then a asks it, and once a probe's read-lock try is
// refused (a writer waits: no new reader passes it) the readers release,
// and a is granted.
func (f *Fixture) holdAfterReaders(a *Worker) (uint64, error) {
	if len(f.readers) == 0 {
		return a.Acquire(f.Key, Acq{Wait: true})
	}
	r := f.Run
	err := each(f.readers, func(w *Worker) error {
		if _, err := w.Acquire(f.Key, Acq{Wait: true, Shared: true}); err != nil {
			return err
		}
		_, err := w.Read(f.Res, false)
		return err
	})
	if err != nil {
		return 0, err
	}
	if _, err := a.Acquire(f.Key, Acq{}); err == nil {
		return 0, fmt.Errorf("%s's write lock was granted by a try while %d read locks were held", a.Name, len(f.readers))
	} else if ErrKind(err) != kindNotAcquired {
		return 0, err
	}
	ac := a.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
	waiting := false
	for deadline := time.Now().Add(30 * time.Second); !waiting && time.Now().Before(deadline); {
		_, err := f.probe.Acquire(f.Key, Acq{Shared: true})
		switch {
		case err == nil:
			if err := f.releaseNow(f.probe); err != nil {
				return 0, err
			}
			time.Sleep(10 * time.Millisecond) // the probe's pace
		case ErrKind(err) == kindNotAcquired:
			waiting = true
		default:
			return 0, err
		}
	}
	if err := each(f.readers, f.releaseNow); err != nil {
		return 0, err
	}
	res, ok, err := waitGrant(ac, 2*time.Minute)
	if !ok {
		return 0, fmt.Errorf("%s's write lock not granted after the readers released: %v", a.Name, err)
	}
	r.Notef("%s's write lock (token %d) granted after %d read locks were released; seen waiting for them (a reader's try refused): %v", a.Name, res.Token, len(f.readers), waiting)
	return res.Token, nil
}

// readerWait is a reader's read lock asked during a fault.
type readerWait struct {
	w  *Worker
	ch <-chan AcquireResult
}

// readersQueue has the readers of a writer row ask read locks (nil when
// there are none); readersFinish waits for them, reads under them and
// releases them.
func (f *Fixture) readersQueue() []readerWait {
	var q []readerWait
	for _, w := range f.readers {
		q = append(q, readerWait{w, w.AcquireAsync(f.Key, Acq{Wait: true, Shared: true, Timeout: 2 * time.Minute})})
	}
	return q
}

func (f *Fixture) readersFinish(q []readerWait) error {
	var errs []error
	for _, rw := range q {
		if _, ok, err := waitGrant(rw.ch, 2*time.Minute); !ok {
			errs = append(errs, fmt.Errorf("%s's read lock not granted: %v", rw.w.Name, err))
			continue
		}
		if _, err := rw.w.Read(f.Res, false); err != nil && ErrKind(err) != kindNotLive {
			errs = append(errs, err)
		}
		if err := f.releaseNow(rw.w); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// readerPauseScenario: R holds a read lock, checks it and is stopped
// before its read; W's write lock is granted once R's lapses, and W
// writes; R resumes and reads. Unfenced, R uses what it read; fenced, it
// validates the read against the store's highest admitted token.
func readerPauseScenario(f *Fixture) error {
	r := f.Run
	ws := f.Workers(map[string]WorkerConfig{"R": {}, "W": {}})
	rd, w := ws["R"], ws["W"]
	validate := r.Store.Mode() != Unfenced
	for round := range f.rounds() {
		if err := f.Warm(w); err != nil {
			return err
		}
		tr, err := rd.Acquire(f.Key, Acq{Wait: true, Shared: true})
		if err != nil {
			return err
		}
		if res := rd.SharedRead(f.Res, false, validate); res.Err != nil {
			return res.Err
		}
		wc := w.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		rc := rd.SharedReadAsync(f.Res, true, validate)
		if _, err := rd.Announced(time.Minute); err != nil {
			return err
		}
		if err := rd.Pause(); err != nil {
			return err
		}
		if err := rd.Go(); err != nil {
			return err
		}
		wres, granted, err := waitGrant(wc, 2*time.Minute)
		if err != nil {
			return err
		}
		if !granted {
			return fmt.Errorf("W not granted while R was stopped for 2m")
		}
		for range 2 {
			if res := w.RMW(f.Res, RMWOptions{}); res.Err != nil || res.Outcome != writeOK {
				return fmt.Errorf("W's write during R's pause: %q %v", res.Outcome, res.Err)
			}
		}
		r.Injected()
		if err := rd.Resume(); err != nil {
			return err
		}
		rres := <-rc
		if rres.Err != nil {
			return rres.Err
		}
		wt, wrote := r.writerOf(f.Res, rres.Seq)
		stale := wrote && wt > tr
		use := "used it"
		switch {
		case stale && rres.Discarded:
			f.Res0.StaleReadsDiscarded++
			use = fmt.Sprintf("discarded it (highest admitted %d)", rres.Highest)
		case stale:
			f.Res0.StaleReads++
		case rres.Discarded:
			use = fmt.Sprintf("discarded it (highest admitted %d), though its writer's token was not above its own", rres.Highest)
		}
		r.Notef("round %d: R (read lock, token %d) read %d after the pause, written with token %d, W holding token %d: %s", round, tr, rres.Value, wt, wres.Token, use)
		// The read lock's promise: it ends by its local deadline, before
		// the service grants the writer. R's deadline as it stood when R
		// was stopped must come before W's Acquire returned (both on the
		// machine's wall clock), so before the grant.
		ended := !rres.Deadline.IsZero() && rres.Deadline.Before(wres.Granted)
		if !ended {
			f.Res0.UnendedReads++
		}
		r.Notef("round %d: R's read lock's deadline came before W's Acquire returned: %v (by %v)", round, ended, wres.Granted.Sub(rres.Deadline).Round(time.Millisecond))
		if err := rd.Release(); err != nil {
			r.Notef("round %d: R's release after the pause: %s", round, ErrKind(err))
		}
		if err := f.release(w); err != nil {
			return err
		}
	}
	return nil
}

// writerOf returns the token of the last admitted write of resource
// recorded before the op numbered seq (the store records reads and writes
// in the order it applies them), and whether there was one.
func (r *Run) writerOf(resource string, seq int) (uint64, bool) {
	ops := r.Hist.Ops()
	i := sort.Search(len(ops), func(i int) bool { return ops[i].Seq >= seq })
	for i--; i >= 0; i-- {
		op := ops[i]
		if op.Kind == KindWrite && op.Key == resource && op.Outcome == OutcomeOK {
			return op.Token, true
		}
	}
	return 0, false
}

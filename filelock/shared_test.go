//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
)

func tryShared(b *filelock.Backend, key string) (driver.Lease, error) {
	return b.AcquireShared(context.Background(), key, driver.AcquireOptions{TTL: time.Minute})
}

// granted is what a waiting acquire got, sent on a channel.
type granted struct {
	l   driver.Lease
	err error
}

// waitFor starts acquire in a goroutine; its result arrives on the channel.
func waitFor(acquire func() (driver.Lease, error)) <-chan granted {
	got := make(chan granted, 1)
	go func() {
		l, err := acquire()
		got <- granted{l, err}
	}()
	return got
}

// recv returns what a waiting acquire got, failing the test if it failed
// or took more than a minute (it should take milliseconds).
func recv(t *testing.T, got <-chan granted, what string) driver.Lease {
	t.Helper()
	select {
	case g := <-got:
		if g.err != nil {
			t.Fatalf("%s: %v", what, g.err)
		}
		return g.l
	case <-time.After(time.Minute):
		t.Fatalf("%s: not granted within a minute", what)
	}
	return nil
}

// flockProc is util-linux flock(1) holding a file while its command, a
// shell, runs: the shell prints "held" and waits for its input to end.
type flockProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	held  chan string
}

const flockBin = "/usr/bin/flock"

func needFlock(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(flockBin); err != nil {
		t.Skipf("util-linux flock(1) is not installed: %v", err)
	}
}

// startFlock runs `flock [-s] path -c ...`, which holds path (shared with
// -s) once it prints "held"; stop ends it.
func startFlock(t *testing.T, path string, shared bool) *flockProc {
	t.Helper()
	args := []string{path, "-c", "echo held; read x || true"}
	if shared {
		args = append([]string{"-s"}, args...)
	}
	cmd := exec.Command(flockBin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &flockProc{cmd: cmd, stdin: stdin, held: make(chan string, 1)}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		p.held <- s
	}()
	return p
}

// waitHeld waits until flock(1) holds its file.
func (p *flockProc) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case s := <-p.held:
		if s != "held\n" {
			t.Fatalf("flock(1) said %q, want held", s)
		}
	case <-time.After(time.Minute):
		t.Fatal("flock(1) did not take its lock within a minute")
	}
}

// stop ends the command: flock(1) exits and its lock goes.
func (p *flockProc) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("flock(1): %v", err)
	}
}

// flockTry runs `flock -n [-s] path true` and reports whether it got the
// lock (exit 0) or found it held (exit 1).
func flockTry(t *testing.T, path string, shared bool) bool {
	t.Helper()
	args := []string{"-n", path, "true"}
	if shared {
		args = append([]string{"-s"}, args...)
	}
	err := exec.Command(flockBin, args...).Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return false
	}
	t.Fatalf("flock %s: %v", strings.Join(args, " "), err)
	return false
}

// `flock -s FILE` on a key's lock file shares it with the readers of
// distlock and keeps its writers out, a waiting writer being granted once
// flock(1) lets go; distlock's writer then keeps `flock -s` out.
func TestFlockSharedSharesWithReaders(t *testing.T) {
	needFlock(t)
	dir := t.TempDir()
	b := newBackend(t, dir)
	const key = "reports/daily"
	release(t, acquire(t, b, key)) // the lock file, with its counter
	path := b.KeyPath(key)

	fl := startFlock(t, path, true)
	fl.waitHeld(t)
	r, err := tryShared(b, key)
	if err != nil {
		t.Fatalf("a reader's try while `flock -s` holds: %v; want granted", err)
	}
	release(t, r)
	if l, err := tryAcquire(b, key); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			release(t, l)
		}
		t.Fatalf("a writer's try while `flock -s` holds: %v; want ErrNotAcquired", err)
	}
	got := waitFor(func() (driver.Lease, error) {
		return b.Acquire(ctxFor(t), key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	})
	fl.stop(t)
	w := recv(t, got, "a writer waiting for `flock -s`")
	if flockTry(t, path, true) {
		t.Errorf("`flock -n -s` got the lock file while distlock's writer holds it")
	}
	release(t, w)
	if !flockTry(t, path, true) {
		t.Errorf("`flock -n -s` found the lock file held after the writer's release")
	}
}

// `flock FILE` on a key's lock file waits for distlock's readers, and
// while it holds, a reader's try is refused and a waiting reader is
// granted once it lets go; `flock -s` shares with distlock's readers.
func TestFlockExclusiveExcludesReaders(t *testing.T) {
	needFlock(t)
	dir := t.TempDir()
	b := newBackend(t, dir)
	const key = "reports/weekly"
	r := acquireShared(t, b, key)
	path := b.KeyPath(key)
	if !flockTry(t, path, true) {
		t.Errorf("`flock -n -s` found the lock file held while only a reader holds it")
	}
	if flockTry(t, path, false) {
		t.Errorf("`flock -n` got the lock file while a reader holds it")
	}
	fl := startFlock(t, path, false) // waits for the reader
	release(t, r)
	fl.waitHeld(t)
	if l, err := tryShared(b, key); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			release(t, l)
		}
		t.Fatalf("a reader's try while `flock` holds: %v; want ErrNotAcquired", err)
	}
	got := waitFor(func() (driver.Lease, error) {
		return b.AcquireShared(ctxFor(t), key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	})
	fl.stop(t)
	r = recv(t, got, "a reader waiting for `flock`")
	if flockTry(t, path, false) {
		t.Errorf("`flock -n` got the lock file while the reader holds it")
	}
	release(t, r)
}

func acquireShared(t *testing.T, b *filelock.Backend, key string, opts ...func(*driver.AcquireOptions)) driver.Lease {
	t.Helper()
	o := driver.AcquireOptions{TTL: time.Minute, Wait: true}
	for _, f := range opts {
		f(&o)
	}
	l, err := b.AcquireShared(ctxFor(t), key, o)
	if err != nil {
		t.Fatalf("AcquireShared(%q): %v", key, err)
	}
	return l
}

// A reader killed with SIGKILL gives the key back at once: a writer
// waiting before the kill is granted, with a higher token, and the dead
// reader is no longer listed.
func TestKilledReaderFreesKey(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	const key = "jobs/read"
	for round := range 2 {
		h := startHolder(t, dir, key, helperSharedEnv+"=1")
		// The fault bites: the other process really holds a shared grant.
		if l, err := tryAcquire(b, key); !errors.Is(err, distlock.ErrNotAcquired) {
			if err == nil {
				release(t, l)
			}
			t.Fatalf("round %d: a writer's try while the helper reads: %v; want ErrNotAcquired", round, err)
		}
		hs, err := b.Readers(context.Background(), key)
		if err != nil || len(hs) != 1 || hs[0].Token != h.token || hs[0].Owner != "helper" || !hs[0].Shared {
			t.Fatalf("round %d: Readers = %+v, %v; want the helper's grant, token %d", round, hs, err, h.token)
		}
		got := waitFor(func() (driver.Lease, error) {
			return b.Acquire(ctxFor(t), key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		})
		h.kill(t)
		w := recv(t, got, "a writer waiting for a killed reader")
		if w.Token() <= h.token {
			t.Errorf("round %d: token %d after the dead reader's %d", round, w.Token(), h.token)
		}
		if hs, err := b.Readers(context.Background(), key); err != nil || len(hs) != 0 {
			t.Errorf("round %d: Readers after the kill = %+v, %v; want none", round, hs, err)
		}
		release(t, w)
		if matches, _ := filepath.Glob(filepath.Join(dir, "jobs%2Fread.reader.*")); len(matches) != 0 {
			t.Errorf("round %d: the dead reader's description is left after a listing: %v", round, matches)
		}
	}
}

// A writer that gives up waiting wakes the readers it kept out: a
// reader whose Backend never polls (an hour) is granted once the writer
// it waited behind is cancelled. The cancelled writer closes its lock
// file as it leaves, and that close wakes the reader (its mark's close
// too, but the lock file's suffices): TestWritersFileWakesReaders covers
// the wake-up by the writers file alone.
func TestCancelledWriterWakesReaders(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	const key = "k"
	r := acquireShared(t, b, key)
	defer release(t, r)
	wctx, cancel := context.WithCancel(ctxFor(t))
	wgot := waitFor(func() (driver.Lease, error) {
		return newBackend(t, dir).Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	})
	// Once the writer waits, a reader's try is refused.
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := tryShared(b, key)
		if errors.Is(err, distlock.ErrNotAcquired) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		release(t, l)
		if time.Now().After(deadline) {
			t.Fatal("a reader's try still granted a minute after a writer began waiting")
		}
		time.Sleep(time.Millisecond) // the writer is asking meanwhile
	}
	slow := newBackend(t, dir, filelock.WithPollInterval(time.Hour))
	rgot := waitFor(func() (driver.Lease, error) {
		return slow.AcquireShared(ctxFor(t), key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	})
	cancel()
	if g := <-wgot; !errors.Is(g.err, context.Canceled) {
		if g.err == nil {
			release(t, g.l)
		}
		t.Fatalf("the cancelled writer: %v; want context.Canceled", g.err)
	}
	release(t, recv(t, rgot, "a reader waiting behind a cancelled writer"))
}

// Readers and List report the readers of a key, by token, with Shared
// set and their owners; List a key's exclusive holder before them. File
// returns a descriptor of a reader's lock file that shares its grant's
// flock: closing it leaves the grant held, and the grant's release
// unlocks it, open or not.
func TestListShowsReaders(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	owner := func(o string) func(*driver.AcquireOptions) {
		return func(opts *driver.AcquireOptions) { opts.Owner = o }
	}
	r1 := acquireShared(t, b, "a", owner("one"))
	r2 := acquireShared(t, newBackend(t, dir), "a", owner("two"))
	x := acquire(t, b, "b")
	hs, err := b.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	want := []driver.Holder{
		{Key: "a", Token: r1.Token(), Owner: "one", Shared: true},
		{Key: "a", Token: r2.Token(), Owner: "two", Shared: true},
		{Key: "b", Token: x.Token()},
	}
	if len(hs) != len(want) {
		t.Fatalf("List = %+v; want %+v", hs, want)
	}
	for i := range want {
		hs[i].Since = time.Time{}
		if hs[i] != want[i] {
			t.Fatalf("List[%d] = %+v; want %+v", i, hs[i], want[i])
		}
	}
	f, err := b.File(grant{"a", r1.Token()})
	if err != nil {
		t.Fatalf("File of a reader: %v", err)
	}
	release(t, r2)
	// Closing the descriptor leaves the grant held: r1 alone keeps a
	// writer out.
	f.Close()
	if l, err := tryAcquire(b, "a"); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			release(t, l)
		}
		t.Fatalf("a writer's try after the descriptor of the last reader's lock file was closed: %v; want ErrNotAcquired", err)
	}
	// Releasing the grant unlocks the descriptor's flock too, though it
	// is still open: a writer's try is granted.
	if f, err = b.File(grant{"a", r1.Token()}); err != nil {
		t.Fatalf("File of a reader: %v", err)
	}
	defer f.Close()
	release(t, r1)
	w, err := tryAcquire(b, "a")
	if err != nil {
		t.Fatalf("a writer's try after the last reader's release, its descriptor still open: %v", err)
	}
	release(t, w)
	if _, err := b.File(grant{"a", r1.Token()}); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("File of a released reader: %v; want ErrLockLost", err)
	}
	release(t, x)
	if hs, err := b.List(context.Background(), ""); err != nil || len(hs) != 0 {
		t.Fatalf("List after the releases = %+v, %v; want none", hs, err)
	}
}

// writerWaitedOnce has a writer wait for key behind a reader, then be
// granted and let go: the key's writers file exists, unlocked, as after
// any writer that waited.
func writerWaitedOnce(t *testing.T, dir, key string) {
	t.Helper()
	b := newBackend(t, dir)
	r := acquireShared(t, b, key)
	wgot := waitFor(func() (driver.Lease, error) {
		return newBackend(t, dir).Acquire(ctxFor(t), key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	})
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := tryShared(b, key)
		if errors.Is(err, distlock.ErrNotAcquired) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		release(t, l)
		if time.Now().After(deadline) {
			t.Fatal("a reader's try still granted a minute after a writer began waiting")
		}
		time.Sleep(time.Millisecond) // the writer is asking meanwhile
	}
	release(t, r)
	release(t, recv(t, wgot, "the writer behind the reader"))
	if _, err := os.Stat(filepath.Join(dir, key+".writers")); err != nil {
		t.Fatalf("no writers file after a writer waited: %v", err)
	}
}

// Readers trying together, with no writer anywhere, are all granted: a
// reader's look for waiting writers is not taken for a writer by another
// reader's.
func TestConcurrentReaderTriesWithoutWriter(t *testing.T) {
	dir := t.TempDir()
	const key = "k"
	writerWaitedOnce(t, dir, key)
	const workers, tries = 8, 300
	refused := make(chan error, workers*tries)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		b := newBackend(t, dir)
		wg.Go(func() {
			<-start
			for range tries {
				l, err := tryShared(b, key)
				if err != nil {
					refused <- err
					continue
				}
				if err := l.Release(context.Background()); err != nil {
					refused <- err
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(refused)
	n := 0
	for err := range refused {
		if n++; n == 1 {
			t.Errorf("a reader's try with no writer present: %v", err)
		}
	}
	if n > 0 {
		t.Errorf("%d of %d tries failed", n, workers*tries)
	}
}

// Readers that arrive together at a key whose Backends never poll (an
// hour) are all granted at once: none waits for a writer that is only
// another reader looking for writers.
func TestReadersArrivingTogetherNeverPoll(t *testing.T) {
	dir := t.TempDir()
	const key = "k"
	writerWaitedOnce(t, dir, key)
	const readers, rounds = 4, 30
	var bs []*filelock.Backend
	for range readers {
		bs = append(bs, newBackend(t, dir, filelock.WithPollInterval(time.Hour)))
	}
	for round := range rounds {
		start := make(chan struct{})
		var gots []<-chan granted
		for _, b := range bs {
			gots = append(gots, waitFor(func() (driver.Lease, error) {
				<-start
				return b.AcquireShared(ctxFor(t), key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			}))
		}
		close(start)
		var ls []driver.Lease
		for i, got := range gots {
			ls = append(ls, recv(t, got, fmt.Sprintf("round %d: reader %d of %d arriving together", round, i, readers)))
		}
		for _, l := range ls {
			release(t, l)
		}
	}
}

package etcdlock_test

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/rwlock"
	"github.com/distlock/distlock/testserver"
)

// etcdctlLock runs `etcdctl lock NAME`, which prints the key it holds once
// it has the lock and holds it until interrupted. Its output lines arrive on
// the returned channel; stop interrupts it and waits for it to exit.
func etcdctlLock(t *testing.T, e *testserver.Etcd, name string) (lines <-chan string, stop func()) {
	t.Helper()
	return etcdctl(t, e, "lock", name)
}

// etcdctl runs etcdctl with args against e until stop (SIGINT), sending
// the lines it prints.
func etcdctl(t *testing.T, e *testserver.Etcd, args ...string) (lines <-chan string, stop func()) {
	t.Helper()
	cmd := exec.Command(testserver.EtcdctlPath(t),
		append([]string{"--endpoints", strings.Join(e.Endpoints, ","), "--dial-timeout", "5s"}, args...)...)
	cmd.Env = append(cleanEnv(), "ETCDCTL_API=3")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 16)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch <- sc.Text()
		}
		io.Copy(io.Discard, out)
	}()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGINT) // etcdctl unlocks and exits
		done := make(chan error, 1)
		go func() { <-readDone; done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("etcdctl %s did not exit on SIGINT; stderr: %s", args[0], stderr.String())
		}
	}
	t.Cleanup(stop)
	return ch, stop
}

// cleanEnv is the environment without ETCDCTL_* variables, which would
// override the flags.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") && !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}

func firstLine(t *testing.T, lines <-chan string, d time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("etcdctl exited without printing its key")
		}
		return l
	case <-time.After(d):
		t.Fatalf("etcdctl printed nothing within %v", d)
	}
	return ""
}

// `etcdctl lock NAME` and distlock exclude each other, both ways.
func TestEtcdctlInterop(t *testing.T) {
	e := testserver.StartEtcd(t)
	testserver.EtcdctlPath(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	c := newLockClient(t, b)
	const key = "jobs/nightly report" // a "/" and a space: escaped in the name
	name := etcdlock.LockName(etcdlock.DefaultPrefix, key)

	t.Run("EtcdctlHolds", func(t *testing.T) {
		lines, stop := etcdctlLock(t, e, name)
		held := firstLine(t, lines, 30*time.Second)
		if !strings.HasPrefix(held, name+"/") {
			t.Fatalf("etcdctl holds %q, want a key under %q", held, name+"/")
		}
		if _, err := c.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire while etcdctl holds %s: %v, want ErrNotAcquired", held, err)
		}
		hs, err := b.List(ctx, key)
		if err != nil || len(hs) != 1 || hs[0].Key != key {
			t.Errorf("List while etcdctl holds: %+v, %v", hs, err)
		}
		stop()
		l, err := c.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("TryAcquire after etcdctl let go: %v", err)
		}
		if hs[0].Token >= l.Token() {
			t.Errorf("token %d after etcdctl's %d", l.Token(), hs[0].Token)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("DistlockHolds", func(t *testing.T) {
		l, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		lines, stop := etcdctlLock(t, e, name)
		kvs := waitKeys(t, admin, name, 2) // etcdctl is queued behind us
		select {
		case line := <-lines:
			t.Fatalf("etcdctl got the lock while distlock held it: %q", line)
		default:
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := firstLine(t, lines, 30*time.Second); got != string(kvs[1].Key) {
			t.Errorf("etcdctl holds %q, want its queued key %q", got, kvs[1].Key)
		}
		if _, err := c.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("TryAcquire while etcdctl holds: %v, want ErrNotAcquired", err)
		}
		stop()
	})
}

// `etcdctl lock NAME` is a writer of distlock's read/write lock NAME: it
// excludes distlock's readers while it holds, and waits for every reader
// before it, two readers of one process included.
func TestEtcdctlInteropShared(t *testing.T) {
	e := testserver.StartEtcd(t)
	testserver.EtcdctlPath(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	const key = "jobs/shared report"
	rw, err := rwlock.New(newLockClient(t, b), key)
	if err != nil {
		t.Fatal(err)
	}
	name := etcdlock.LockName(etcdlock.DefaultPrefix, key)

	t.Run("EtcdctlHolds", func(t *testing.T) {
		lines, stop := etcdctlLock(t, e, name)
		held := firstLine(t, lines, 30*time.Second)
		if _, err := rw.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryRLock while etcdctl holds %s: %v, want ErrNotAcquired", held, err)
		}
		type result struct {
			l   *distlock.Lock
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := rw.RLock(ctx)
			got <- result{l, err}
		}()
		kvs := waitKeys(t, admin, name, 2) // the reader is queued behind etcdctl
		if string(kvs[0].Key) != held {
			t.Fatalf("the first key is %q, want etcdctl's %q", kvs[0].Key, held)
		}
		select {
		case r := <-got:
			if r.l != nil {
				r.l.Release(ctx)
			}
			t.Fatalf("a reader granted while etcdctl holds: %v", r.err)
		default:
		}
		if h, ok, err := rw.Writer(ctx); err != nil || !ok || h.Token != uint64(kvs[0].CreateRevision) {
			t.Errorf("Writer while etcdctl holds: %+v, %v, %v; want etcdctl's token %d", h, ok, err, kvs[0].CreateRevision)
		}
		if hs, err := rw.Readers(ctx); err != nil || len(hs) != 0 {
			t.Errorf("Readers while etcdctl holds: %+v, %v; want none", hs, err)
		}
		stop()
		var r result
		select {
		case r = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("the waiting reader not granted within 30s of etcdctl's unlock")
		}
		if r.err != nil {
			t.Fatalf("RLock: %v", r.err)
		}
		if r.l.Token() != uint64(kvs[1].CreateRevision) {
			t.Errorf("the reader's token is %d, want its key's create revision %d", r.l.Token(), kvs[1].CreateRevision)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ReadersHold", func(t *testing.T) {
		// Two readers of one Client: one session, a key each.
		r1, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if hs, err := rw.Readers(ctx); err != nil || len(hs) != 2 || hs[0].Token != r1.Token() || hs[1].Token != r2.Token() {
			t.Fatalf("Readers: %+v, %v; want tokens %d and %d", hs, err, r1.Token(), r2.Token())
		}
		lines, stop := etcdctlLock(t, e, name)
		kvs := waitKeys(t, admin, name, 3) // etcdctl is queued behind both
		noLine(t, lines, "etcdctl while two readers hold")
		if err := r1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		waitKeys(t, admin, name, 2)
		noLine(t, lines, "etcdctl while one reader holds")
		// A reader coming after etcdctl's key waits for it.
		if _, err := rw.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryRLock while etcdctl waits: %v, want ErrNotAcquired", err)
		}
		if err := r2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := firstLine(t, lines, 30*time.Second); got != string(kvs[2].Key) {
			t.Errorf("etcdctl holds %q, want its queued key %q", got, kvs[2].Key)
		}
		if _, err := rw.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("TryRLock while etcdctl holds: %v, want ErrNotAcquired", err)
		}
		stop()
		l, err := rw.TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock after etcdctl let go: %v", err)
		}
		if l.Token() <= uint64(kvs[2].CreateRevision) {
			t.Errorf("token %d after etcdctl's %d", l.Token(), kvs[2].CreateRevision)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

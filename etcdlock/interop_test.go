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

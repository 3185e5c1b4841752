//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
)

// The helper process: the test binary run again with these variables set
// acquires a key, prints its token and holds the key until it is killed.
const (
	helperEnv    = "FILELOCK_TEST_HELPER_DIR"
	helperKeyEnv = "FILELOCK_TEST_HELPER_KEY"
	// helperPassEnv makes the helper hand the lock file (Backend.File) to a
	// child process, `sleep`, and print that child's pid.
	helperPassEnv = "FILELOCK_TEST_HELPER_PASS"
	// helperPermitsEnv makes the helper acquire a permit of the semaphore
	// kept at the key, of this limit, instead of the key's lock.
	helperPermitsEnv = "FILELOCK_TEST_HELPER_PERMITS"
	// helperSharedEnv makes the helper acquire a shared grant of the key
	// (AcquireShared) instead of its lock.
	helperSharedEnv = "FILELOCK_TEST_HELPER_SHARED"
)

func helperMain() {
	b, err := filelock.New(os.Getenv(helperEnv))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	opts := driver.AcquireOptions{TTL: time.Minute, Wait: true, Owner: "helper"}
	var l driver.Lease
	if n := os.Getenv(helperPermitsEnv); n != "" {
		var limit int
		if limit, err = strconv.Atoi(n); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		l, err = b.AcquirePermit(context.Background(), os.Getenv(helperKeyEnv), driver.Semaphore{Limit: limit}, opts)
	} else if os.Getenv(helperSharedEnv) != "" {
		l, err = b.AcquireShared(context.Background(), os.Getenv(helperKeyEnv), opts)
	} else {
		l, err = b.Acquire(context.Background(), os.Getenv(helperKeyEnv), opts)
	}
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	child := 0
	if os.Getenv(helperPassEnv) != "" {
		f, err := b.File(grant{os.Getenv(helperKeyEnv), l.Token()})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		sleep := exec.Command("sleep", "600")
		sleep.ExtraFiles = []*os.File{f}
		if err := sleep.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		f.Close()
		child = sleep.Process.Pid
	}
	fmt.Printf("token %d child %d\n", l.Token(), child)
	time.Sleep(time.Hour) // until killed
	os.Exit(3)
}

// holder is a helper process holding a key, or a permit.
type holder struct {
	cmd   *exec.Cmd
	line  chan string // the line the helper prints once it holds
	token uint64
	child int // the pid of the helper's child that has the lock file, if any
}

// startHolder starts a helper that acquires key in dir and waits until it
// holds it.
func startHolder(t *testing.T, dir, key string, env ...string) *holder {
	t.Helper()
	h := startHelper(t, dir, key, env...)
	select {
	case s := <-h.line:
		h.parse(t, s)
		return h
	case <-time.After(time.Minute):
		t.Fatal("helper did not acquire in time")
	}
	return nil
}

// startHelper starts a helper that acquires key in dir, without waiting
// for it to hold it: h.line receives what it prints then (see parse).
func startHelper(t *testing.T, dir, key string, env ...string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+dir, helperKeyEnv+"="+key), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	h := &holder{cmd: cmd, line: make(chan string, 1)}
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		h.line <- s
	}()
	return h
}

// parse reads the line the helper printed once it held the key.
func (h *holder) parse(t *testing.T, s string) {
	t.Helper()
	if _, err := fmt.Sscanf(s, "token %d child %d\n", &h.token, &h.child); err != nil {
		t.Fatalf("helper said %q", s)
	}
	if h.child != 0 {
		t.Cleanup(func() { syscall.Kill(h.child, syscall.SIGKILL) })
	}
}

// kill SIGKILLs the helper and reaps it.
func (h *holder) kill(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.cmd.Wait()
}

// A holder killed with SIGKILL frees the key at once: a waiter blocked
// before the kill is served without any TTL to wait for, with a higher
// token. The dead holder's description stays on disk but is not reported.
func TestKilledHolderFreesKeyAtOnce(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	for round := range 3 {
		h := startHolder(t, dir, "jobs/nightly")
		// The fault bites: the key is really held by the other process.
		if _, err := tryAcquire(b, "jobs/nightly"); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("round %d: TryAcquire while the helper holds: %v, want ErrNotAcquired", round, err)
		}
		if hs, err := b.List(context.Background(), ""); err != nil || len(hs) != 1 || hs[0].Token != h.token || hs[0].Owner != "helper" {
			t.Fatalf("round %d: List = %+v, %v; want the helper with token %d", round, hs, err, h.token)
		}
		type result struct {
			l   driver.Lease
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		go func() {
			l, err := b.Acquire(ctxFor(t), "jobs/nightly", driver.AcquireOptions{TTL: time.Minute, Wait: true})
			got <- result{l, err, time.Now()}
		}()
		killed := time.Now()
		h.kill(t)
		r := <-got
		if r.err != nil {
			t.Fatalf("round %d: waiter: %v", round, r.err)
		}
		t.Logf("round %d: waiter served %v after SIGKILL of the holder", round, r.at.Sub(killed).Round(time.Microsecond))
		if r.l.Token() <= h.token {
			t.Errorf("round %d: token %d after the dead holder's %d", round, r.l.Token(), h.token)
		}
		if _, err := os.Stat(filepath.Join(dir, "jobs%2Fnightly.info")); err != nil {
			t.Errorf("round %d: our own description is missing: %v", round, err)
		}
		release(t, r.l)
	}
}

// A dead holder's description is left on disk and never reported.
func TestStaleInfoNotReported(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	h := startHolder(t, dir, "k")
	h.kill(t)
	info := filepath.Join(dir, "k.info")
	if _, err := os.Stat(info); err != nil {
		t.Fatalf("the killed holder left no description (%v): the test would prove nothing", err)
	}
	if hs, err := b.List(context.Background(), ""); err != nil || len(hs) != 0 {
		t.Errorf("List = %+v, %v; want no holder", hs, err)
	}
	l := acquire(t, b, "k")
	if l.Token() <= h.token {
		t.Errorf("token %d after the dead holder's %d", l.Token(), h.token)
	}
	release(t, l)
}

//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		helperMain()
		return
	}
	if os.Getenv(listDirEnv) != "" {
		listHelperMain()
		return
	}
	goleak.VerifyTestMain(m)
}

// newBackend returns a Backend over dir.
func newBackend(t testing.TB, dir string, opts ...filelock.Option) *filelock.Backend {
	t.Helper()
	b, err := filelock.New(dir, opts...)
	if err != nil {
		t.Fatalf("New(%q): %v", dir, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func acquire(t *testing.T, b driver.Backend, key string) driver.Lease {
	t.Helper()
	l, err := b.Acquire(ctxFor(t), key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return l
}

func tryAcquire(b driver.Backend, key string) (driver.Lease, error) {
	return b.Acquire(context.Background(), key, driver.AcquireOptions{TTL: time.Minute})
}

func release(t *testing.T, l driver.Lease) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// The conformance suite, every simulated process a Backend of its own on one
// directory. filelock's grants have no TTL and cannot be revoked (a flock
// cannot be taken from a live process), so the suite checks that they do
// not lapse and skips the tests that need a grant to be dropped; crash_test
// covers a holder's death with real processes.
func TestConformance(t *testing.T) {
	dir := t.TempDir()
	distlocktest.Run(t, func(t *testing.T) driver.Backend {
		return newBackend(t, dir)
	}, distlocktest.WithTTL(time.Second))
}

// The conformance suite of package semaphore, as TestConformance runs
// Run: permits have no TTL either, so the suite skips the tests of
// permits that lapse; semaphore_test covers a holder's death with real
// processes.
func TestSemaphoreConformance(t *testing.T) {
	dir := t.TempDir()
	distlocktest.RunSemaphore(t, func(t *testing.T) driver.Backend {
		return newBackend(t, dir)
	}, distlocktest.WithTTL(time.Second))
}

// The conformance suite of shared locks and package rwlock, as
// TestConformance runs Run: shared grants have no TTL either, so the
// suite skips the tests of readers that lapse; shared_test covers a
// reader's death with real processes.
func TestSharedConformance(t *testing.T) {
	dir := t.TempDir()
	distlocktest.RunShared(t, func(t *testing.T) driver.Backend {
		return newBackend(t, dir)
	}, distlocktest.WithTTL(time.Second))
}

// A grant has no time bound: TTL 0, no local deadline, kept without renewal.
func TestUnboundedGrant(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	l := acquire(t, b, "k")
	if v := l.Validity(); v.TTL != 0 || v.Sent.IsZero() {
		t.Errorf("Validity() = %+v, want TTL 0 and a send time", v)
	}
	v, err := l.Refresh(context.Background(), time.Second)
	if err != nil || v.TTL != 0 {
		t.Errorf("Refresh: %+v, %v; want TTL 0", v, err)
	}
	release(t, l)

	c, err := distlock.New(newBackend(t, dir), distlock.WithTTL(50*time.Millisecond), distlock.WithRenewal(distlock.NoRenewal))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	lock, err := c.Acquire(ctxFor(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := lock.Deadline(); ok {
		t.Errorf("Deadline() = %v, true; want none for an unbounded grant", d)
	}
	if _, err := tryAcquire(newBackend(t, dir), "k"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("TryAcquire of a key held without renewal: %v, want ErrNotAcquired", err)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// flock locks belong to the open file description: two acquisitions in one
// process exclude each other, through one Backend or two.
func TestOneProcessTwoAcquisitions(t *testing.T) {
	dir := t.TempDir()
	b1, b2 := newBackend(t, dir), newBackend(t, dir)
	l := acquire(t, b1, "k")
	if _, err := tryAcquire(b1, "k"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("same Backend: %v, want ErrNotAcquired", err)
	}
	if _, err := tryAcquire(b2, "k"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("second Backend in the same process: %v, want ErrNotAcquired", err)
	}
	// The kernel itself refuses a third open of the file in this process.
	f, err := os.Open(b1.KeyPath("k"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Errorf("flock on another open of the lock file: %v, want EWOULDBLOCK", err)
	}
	release(t, l)
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("flock after release: %v", err)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	release(t, acquire(t, b2, "k"))
}

// Tokens keep increasing across Backends (processes); as plain counters
// (no clock floor) they go 1, 2, 3...
func TestTokensAcrossBackends(t *testing.T) {
	dir := t.TempDir()
	var last uint64
	for range 5 {
		l := acquire(t, newBackend(t, dir), "jobs/nightly")
		if l.Token() <= last {
			t.Errorf("token %d after %d", l.Token(), last)
		}
		last = l.Token()
		release(t, l)
	}
	filelock.SetFloor(t, 0)
	for want := uint64(1); want <= 3; want++ {
		l := acquire(t, newBackend(t, dir), "jobs/counted")
		if l.Token() != want {
			t.Errorf("counter-only token %d, want %d", l.Token(), want)
		}
		release(t, l)
	}
}

// A lock file removed while its key is not held (as an age-based cleaner
// of /var/tmp does) does not make tokens go back: the next one is at least
// the wall clock in microseconds. Without that floor, the fault bites:
// tokens restart at 1.
func TestTokensSurviveLockFileRemoval(t *testing.T) {
	for _, floor := range []bool{false, true} {
		t.Run(map[bool]string{false: "counter-only", true: "clock-floor"}[floor], func(t *testing.T) {
			if !floor {
				filelock.SetFloor(t, 0)
			}
			b := newBackend(t, t.TempDir())
			var last uint64
			for range 3 {
				l := acquire(t, b, "jobs/monthly")
				last = l.Token()
				release(t, l)
			}
			if err := os.Remove(b.KeyPath("jobs/monthly")); err != nil {
				t.Fatal(err)
			}
			l := acquire(t, b, "jobs/monthly")
			defer release(t, l)
			switch {
			case floor && l.Token() <= last:
				t.Errorf("token %d after the lock file was removed, earlier %d", l.Token(), last)
			case !floor && l.Token() > last:
				t.Errorf("without the floor the token went on (%d after %d): the test shows nothing", l.Token(), last)
			}
		})
	}
}

// A token that jumps to the clock floor never has the last token's parity,
// so that slot n%2 (which every version of the package writes) is not the
// last token's, and a torn write leaves the last token readable.
func TestTokenJumpKeepsLastSlot(t *testing.T) {
	filelock.SetFloor(t, 0)
	b := newBackend(t, t.TempDir())
	for range 3 {
		release(t, acquire(t, b, "k"))
	}
	filelock.SetFloor(t, 1001) // odd, like 3
	l := acquire(t, b, "k")
	release(t, l)
	s0, s1, err := filelock.Slots(b.KeyPath("k"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != 1002 || s0 != 1002 || s1 != 3 {
		t.Errorf("token %d, slots %d and %d; want 1002 in slot 0 beside 3", l.Token(), s0, s1)
	}
	// Had the jump's write been torn by a crash (so it was never granted),
	// the next token must still be above 3, the last one granted.
	tear(t, b.KeyPath("k"), int64(l.Token()%2)*16)
	filelock.SetFloor(t, 0)
	next := acquire(t, b, "k")
	defer release(t, next)
	if next.Token() <= 3 {
		t.Errorf("after a torn write of the jump: token %d, want above 3", next.Token())
	}
}

// A write torn by a crash concerns a token never handed out; the other slot
// still has the last one granted.
func TestTornCounterWrite(t *testing.T) {
	filelock.SetFloor(t, 0) // plain counters: token n in slot n%2
	dir := t.TempDir()
	b := newBackend(t, dir)
	for range 3 {
		release(t, acquire(t, b, "k"))
	}
	// Token 4 would go to slot 0 (bytes 0-15): tear it.
	tear(t, b.KeyPath("k"), 0)
	l := acquire(t, b, "k")
	if l.Token() != 4 {
		t.Errorf("token after a torn write of 4: %d, want 4", l.Token())
	}
	release(t, l)

	// Both slots unreadable: refused, not guessed, and not retried as transient.
	tear(t, b.KeyPath("k"), 0)
	tear(t, b.KeyPath("k"), 16)
	_, err := tryAcquire(b, "k")
	if !errors.Is(err, filelock.ErrCorruptCounter) || errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Acquire with a corrupt counter: %v, want ErrCorruptCounter", err)
	}
	// Nothing is left held: the gate and the flock were given back.
	f, err := os.Open(b.KeyPath("k"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("lock file still locked after the refused acquire: %v", err)
	}
	if n := filelock.Queued(b); n != 0 {
		t.Errorf("%d keys still queued after the refused acquire", n)
	}
}

func tear(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("torn-write-garba"), off); err != nil {
		t.Fatal(err)
	}
}

// Keys map to files inside the directory only, one file per key.
func TestKeyFileNames(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "locks")
	b := newBackend(t, dir)
	long := strings.Repeat("é", distlock.MaxKeyLen/2)
	names := map[string]string{
		"jobs/nightly":     "jobs%2Fnightly.lock",
		"A":                "%41.lock",
		"a":                "a.lock",
		"%41":              "%2541.lock",
		".":                "%2E.lock",
		"..":               "%2E..lock",
		".hidden":          "%2Ehidden.lock",
		"a.b-c_d":          "a.b-c_d.lock",
		"../../etc/passwd": "%2E.%2F..%2Fetc%2Fpasswd.lock",
		"x.lock":           "x.lock.lock",
		"~":                "%7E.lock",
	}
	var held []driver.Lease
	for key, want := range names {
		if got := filepath.Base(b.KeyPath(key)); got != want {
			t.Errorf("file of %q = %q, want %q", key, got, want)
		}
		held = append(held, acquire(t, b, key))
	}
	if base := filepath.Base(b.KeyPath(long)); !strings.HasPrefix(base, "~sha256-") || len(base) > 255 {
		t.Errorf("file of a long key = %q, want a hashed name", base)
	}
	held = append(held, acquire(t, b, long))
	hs, err := b.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != len(held) {
		t.Errorf("List: %d holders, want %d", len(hs), len(held))
	}
	found := false
	for _, h := range hs {
		found = found || h.Key == long
	}
	if !found {
		t.Errorf("List does not report the long key by its full name: %+v", hs)
	}
	for _, l := range held {
		release(t, l)
	}
	// Nothing was created outside the directory, and no subdirectory in it.
	if es, _ := os.ReadDir(root); len(es) != 1 {
		t.Errorf("files next to the lock directory: %v", es)
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".lock") {
			t.Errorf("unexpected entry %q in the lock directory after release", e.Name())
		}
	}
	if len(es) != len(held) {
		t.Errorf("%d lock files for %d keys", len(es), len(held))
	}
}

// List reports holders with their token and owner, by prefix.
func TestList(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	before := time.Now()
	l, err := b.Acquire(ctxFor(t), "jobs/a", driver.AcquireOptions{TTL: time.Minute, Owner: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	release(t, acquire(t, b, "jobs/b")) // held once, not now
	other := acquire(t, b, "other")
	hs, err := newBackend(t, dir).List(context.Background(), "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Key != "jobs/a" || hs[0].Token != l.Token() || hs[0].Owner != "tester" ||
		hs[0].Since.Before(before.Add(-time.Second)) || !hs[0].Expires.IsZero() {
		t.Errorf("List(jobs/) = %+v; want jobs/a with token %d, owner tester, no expiry", hs, l.Token())
	}
	release(t, l)
	release(t, other)
	if hs, err := b.List(context.Background(), ""); err != nil || len(hs) != 0 {
		t.Errorf("List after release = %+v, %v; want none", hs, err)
	}
}

// Removing a held lock file lets another process in (the documented hazard);
// the holder's next refresh reports the loss, its release leaves the new
// holder alone, and the Client cancels the lock.
func TestLockFileRemovedWhileHeld(t *testing.T) {
	dir := t.TempDir()
	ba, bb, bc := newBackend(t, dir), newBackend(t, dir), newBackend(t, dir)
	la := acquire(t, ba, "k")
	if err := os.Remove(ba.KeyPath("k")); err != nil {
		t.Fatal(err)
	}
	lb := acquire(t, bb, "k") // the fault bites: a second holder
	if _, err := la.Refresh(context.Background(), time.Minute); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Refresh after the lock file was removed: %v, want ErrLockLost", err)
	}
	if err := la.Release(context.Background()); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release after the lock file was removed: %v, want ErrLockLost", err)
	}
	if _, err := tryAcquire(bc, "k"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("third acquire while the new holder holds: %v, want ErrNotAcquired", err)
	}
	if hs, _ := bc.List(context.Background(), "k"); len(hs) != 1 || hs[0].Token != lb.Token() {
		t.Errorf("List = %+v, want the new holder (token %d)", hs, lb.Token())
	}
	release(t, lb)

	// Through a Client, which refreshes every TTL/3: the lock ends.
	c, err := distlock.New(ba, distlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	lock, err := c.Acquire(ctxFor(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ba.KeyPath("k")+".new", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(ba.KeyPath("k")+".new", ba.KeyPath("k")); err != nil { // replace it
		t.Fatal(err)
	}
	select {
	case <-lock.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("lock not cancelled after its lock file was replaced")
	}
	if !errors.Is(lock.Err(), distlock.ErrLockLost) {
		t.Errorf("Err() = %v, want ErrLockLost", lock.Err())
	}
	if err := lock.Release(context.Background()); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release of the lost lock: %v, want ErrLockLost", err)
	}
	release(t, acquire(t, bb, "k"))
}

// A waiter whose context ends returns at once, holding nothing.
func TestCancelledWaiterHoldsNothing(t *testing.T) {
	dir := t.TempDir()
	ba, bb := newBackend(t, dir), newBackend(t, dir)
	la := acquire(t, ba, "k")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := bb.Acquire(ctx, "k", driver.AcquireOptions{TTL: time.Minute, Wait: true})
		errc <- err
	}()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Acquire: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cancelled Acquire did not return")
	}
	release(t, la)
	release(t, acquire(t, ba, "k"))
	release(t, acquire(t, bb, "k"))
}

func TestNewAndOpenURL(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for raw, want := range map[string]string{
		"file://" + dir:                     dir,
		"file://localhost" + dir:            dir,
		"file://" + dir + "/with%20space/x": filepath.Join(dir, "with space", "x"),
	} {
		b, err := filelock.OpenURL(ctx, raw)
		if err != nil {
			t.Errorf("OpenURL(%q): %v", raw, err)
			continue
		}
		if want != "" && b.Dir() != want {
			t.Errorf("OpenURL(%q).Dir() = %q, want %q", raw, b.Dir(), want)
		}
	}
	t.Chdir(dir)
	if b, err := filelock.OpenURL(ctx, "file:rel/locks"); err != nil || b.Dir() != filepath.Join(dir, "rel", "locks") {
		t.Errorf("OpenURL(file:rel/locks) in %s: %v", dir, err)
	}
	for _, raw := range []string{
		"file://otherhost/x", "file:///x?poll=1s", "file:///x#frag", "redis://h", "file://u:pw@/x", "file://%zz/x",
	} {
		_, err := filelock.OpenURL(ctx, raw)
		if !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("OpenURL(%q): %v, want ErrInvalidOption", raw, err)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("OpenURL(%q) error shows the password: %v", raw, err)
		}
	}

	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := filelock.New(file); err == nil {
		t.Errorf("New on a regular file succeeded")
	}
	if _, err := filelock.New(dir, filelock.WithPollInterval(0)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("New with poll interval 0: %v", err)
	}
	if _, err := filelock.New(dir, filelock.WithFileMode(0o400)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("New with file mode 0400: %v", err)
	}
}

// The default directory depends on the user only: processes of one user
// with different environments (a login shell with XDG_RUNTIME_DIR and
// TMPDIR, a cron job without them) lock the same files.
func TestDefaultDir(t *testing.T) {
	want := filepath.Join("/var/tmp", fmt.Sprintf("distlock-%d", os.Getuid()))
	for _, env := range [][2]string{{"", ""}, {t.TempDir(), ""}, {"", t.TempDir()}, {t.TempDir(), t.TempDir()}} {
		t.Setenv("XDG_RUNTIME_DIR", env[0])
		t.Setenv("TMPDIR", env[1])
		if got := filelock.DefaultDir(); got != want {
			t.Errorf("DefaultDir() with XDG_RUNTIME_DIR=%q TMPDIR=%q = %q, want %q", env[0], env[1], got, want)
		}
	}
	b, err := filelock.New("")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(want)
	if err != nil || fi.Mode().Perm() != 0o700 || b.Dir() != want {
		t.Errorf("default directory %v, %v; want mode 0700 at %s", fi.Mode(), err, want)
	}
	key := fmt.Sprintf("filelock-test/default-dir/%d-%d", os.Getpid(), time.Now().UnixNano())
	release(t, acquire(t, b, key))
	os.Remove(b.KeyPath(key))
}

// The default directory is refused unless it is a private directory of
// this user: it lives in a place where others can create entries.
func TestDefaultDirMustBePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := filelock.CheckPrivate(dir); err != nil {
		t.Errorf("a private directory is refused: %v", err)
	}
	// A default directory others can enter is refused.
	os.Chmod(dir, 0o755)
	if err := filelock.CheckPrivate(dir); err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Errorf("a world-readable default directory: %v", err)
	}
	os.Chmod(dir, 0o700)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(dir, link)
	if err := filelock.CheckPrivate(link); err == nil {
		t.Errorf("a symbolic link as the default directory is accepted")
	}
	if os.Getuid() == 0 {
		os.Chown(dir, 65534, 65534)
		if err := filelock.CheckPrivate(dir); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Errorf("a default directory of another user: %v", err)
		}
	}
}

// A held lock file whose times are old is touched by Refresh, so that
// age-based cleaners of /var/tmp and /tmp leave it (and its counter) alone.
func TestRefreshTouchesOldLockFile(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	l := acquire(t, b, "k")
	defer release(t, l)
	old := time.Now().Add(-40 * 24 * time.Hour)
	if err := os.Chtimes(b.KeyPath("k"), old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Refresh(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(b.KeyPath("k"))
	if err != nil {
		t.Fatal(err)
	}
	if age := time.Since(fi.ModTime()); age > time.Minute {
		t.Errorf("lock file last modified %v ago after Refresh, want just now", age.Round(time.Second))
	}
	// A fresh file is left as it is: touching wakes waiters.
	recent := time.Now().Add(-time.Minute).Truncate(time.Second)
	os.Chtimes(b.KeyPath("k"), recent, recent)
	l.Refresh(context.Background(), time.Minute)
	if fi, _ := os.Stat(b.KeyPath("k")); !fi.ModTime().Equal(recent) {
		t.Errorf("a lock file modified a minute ago was touched: %v", fi.ModTime())
	}
}

// grant names a grant by key and token, as a distlock.Lock does.
type grant struct {
	key   string
	token uint64
}

func (g grant) Key() string                    { return g.key }
func (g grant) Token() uint64                  { return g.token }
func grantOf(key string, l driver.Lease) grant { return grant{key, l.Token()} }

// File: a descriptor handed to another process keeps the key held after
// the holder is killed, until that process ends too.
func TestFileOutlivesHolder(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	h := startHolder(t, dir, "k", helperPassEnv+"=1")
	h.kill(t)
	// The fault would bite without the inherited descriptor: the holder is
	// dead. The key stays held by the process that has the descriptor.
	if _, err := tryAcquire(b, "k"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire after the holder died, its descriptor still open elsewhere: %v, want ErrNotAcquired", err)
	}
	if err := syscall.Kill(h.child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, b, "k") // waits until the descriptor's last holder is gone
	if l.Token() <= h.token {
		t.Errorf("token %d after %d", l.Token(), h.token)
	}
	f, err := b.File(grantOf("k", l))
	if err != nil {
		t.Fatalf("File of a held lease: %v", err)
	}
	f.Close()
	release(t, l)
	if _, err := b.File(grantOf("k", l)); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("File after Release: %v", err)
	}
}

// File finds a grant by key and token among this Backend's held leases
// only, and the descriptor it returns shares the grant's flock.
func TestFileLookup(t *testing.T) {
	dir := t.TempDir()
	b, other := newBackend(t, dir), newBackend(t, dir)
	if _, err := b.File(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("File(nil): %v, want ErrInvalidOption", err)
	}
	if _, err := b.File((*distlock.Lock)(nil)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("File of a nil *distlock.Lock: %v, want ErrInvalidOption", err)
	}
	if _, err := b.File(grant{"never", 1}); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("File of a key never acquired: %v, want ErrLockLost", err)
	}

	// Through a Client, as the distlock command does.
	c, err := distlock.New(b, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	lock, err := c.Acquire(ctxFor(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.File(lock); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("File through another Backend: %v, want ErrLockLost", err)
	}
	if _, err := b.File(grant{"k", lock.Token() - 1}); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("File with an older token: %v, want ErrLockLost", err)
	}
	f, err := b.File(lock)
	if err != nil {
		t.Fatalf("File of a held lock: %v", err)
	}
	defer f.Close()
	// The descriptor is on the grant's description: its flock is the
	// grant's, so locking it again succeeds (a new open would be refused).
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("flock on File's descriptor: %v, want the grant's own lock", err)
	}
	if err := lock.Release(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.File(lock); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("File after Release: %v, want ErrLockLost", err)
	}
	if n := filelock.Queued(b); n != 0 {
		t.Errorf("%d keys still queued after every release", n)
	}
}

// Acquirers of a key through one Backend are granted it in arrival order,
// and nothing stays queued.
func TestFIFOWithinBackend(t *testing.T) {
	b := newBackend(t, t.TempDir())
	ctx := ctxFor(t)
	holder := acquire(t, b, "k")
	const n = 5
	granted := make(chan int, n)
	leases := make([]driver.Lease, n)
	for i := range n {
		go func() {
			l, err := b.Acquire(ctx, "k", driver.AcquireOptions{TTL: time.Minute, Wait: true})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			leases[i] = l
			granted <- i
		}()
		for filelock.Waiting(b, "k") != i+1 {
			if ctx.Err() != nil {
				t.Fatalf("waiter %d did not queue", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	release(t, holder)
	for want := range n {
		select {
		case i := <-granted:
			if i != want {
				t.Fatalf("granted to waiter %d, want %d", i, want)
			}
			release(t, leases[i])
		case <-ctx.Done():
			t.Fatalf("waiter %d never granted", want)
		}
	}
	if n := filelock.Queued(b); n != 0 {
		t.Errorf("%d keys still queued", n)
	}
}

// Close ends both kinds of waiter with ErrClosed (the one that has the
// key's turn and waits for another Backend's flock, and the one queued for
// the turn), refuses later acquisitions, and leaves the other Backend's
// lease working.
func TestCloseEndsWaiters(t *testing.T) {
	dir := t.TempDir()
	a, b := newBackend(t, dir), newBackend(t, dir)
	ctx := ctxFor(t)
	holder := acquire(t, a, "k")
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			l, err := b.Acquire(ctx, "k", driver.AcquireOptions{TTL: time.Minute, Wait: true})
			if err == nil {
				l.Release(ctx)
			}
			errs <- err
		}()
		for filelock.Queued(b)+filelock.Waiting(b, "k") != i+1 {
			if ctx.Err() != nil {
				t.Fatalf("waiter %d did not queue", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, filelock.ErrClosed) || !errors.Is(err, distlock.ErrClosed) {
				t.Errorf("waiter at Close: %v, want ErrClosed", err)
			}
		case <-ctx.Done():
			t.Fatal("a waiter did not end at Close")
		}
	}
	for _, wait := range []bool{false, true} {
		if _, err := b.Acquire(ctx, "other", driver.AcquireOptions{TTL: time.Minute, Wait: wait}); !errors.Is(err, distlock.ErrClosed) {
			t.Errorf("Acquire (wait %v) after Close: %v, want ErrClosed", wait, err)
		}
	}
	if n := filelock.Queued(b); n != 0 {
		t.Errorf("%d keys still queued after Close", n)
	}
	release(t, holder)
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// The partition suite, as TestConformance runs Run: grants have no TTL,
// so a dead member's grants end when its Backend's files close, and the
// frozen member, which nothing can end, is skipped (a real process's
// death is covered by the crash tests).
func TestPartitionConformance(t *testing.T) {
	dir := t.TempDir()
	distlocktest.RunPartition(t, func(t *testing.T) driver.Backend {
		return newBackend(t, dir)
	}, distlocktest.WithTTL(time.Second))
}

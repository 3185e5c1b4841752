package testserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// WithRedisMovableClock starts the server with a wall clock that the test
// moves with Redis.Clock: a shim preloaded into redis-server (LD_PRELOAD,
// built with the C compiler cc on first use) adds an offset, which the
// test changes at any time, to every reading of CLOCK_REALTIME, to
// gettimeofday and to time. Redis expires keys by that clock, so a jump
// forward expires keys early, as a stepped system clock would on the
// server's machine; the monotonic clock, and so the server's timers, are
// left alone. The offset stays across Restart. Linux only: elsewhere the
// test is skipped.
//
// libfaketime would be the usual tool, but it cannot start redis-server:
// its clock hook is entered again by the allocator (jemalloc) while it
// initializes, whatever offset it is given. The shim allocates nothing and
// reads the clocks with the clock_gettime system call.
func WithRedisMovableClock() RedisOption { return func(c *redisConfig) { c.movableClock = true } }

// MovableClock is the wall clock of a server started with
// WithRedisMovableClock. Its methods are safe for concurrent use.
type MovableClock struct {
	mu     sync.Mutex
	offset time.Duration
	set    func(time.Duration) // publishes the offset to the shim
}

// Jump moves the server's wall clock by d (back if d is negative), at
// once: the server's next reading of its clock is d later than it would
// have been.
func (c *MovableClock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
	c.set(c.offset)
}

// Offset returns how far the server's wall clock is from the real one.
func (c *MovableClock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// clockEnv is the environment variable that names the shim's offset file.
const clockEnv = "DISTLOCK_TESTSERVER_CLOCK"

// clockShimSource is the preloaded shim. It maps the offset file (eight
// bytes: the offset in nanoseconds, native byte order) at load time and
// adds the offset to the realtime clocks. It calls nothing that allocates
// or reads a clock through libc, so that the allocator's own clock reads,
// which come through it too, cannot recurse.
const clockShimSource = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *offset_ns;

__attribute__((constructor)) static void clockshim_init(void) {
	const char *path = getenv("` + clockEnv + `");
	if (path == NULL) return;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return;
	void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED) offset_ns = p;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
	if (syscall(SYS_clock_gettime, clk, ts) != 0) return -1;
	if ((clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE) && offset_ns != NULL) {
		int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + __atomic_load_n(offset_ns, __ATOMIC_RELAXED);
		ts->tv_sec = ns / 1000000000;
		ts->tv_nsec = ns % 1000000000;
	}
	return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	if (tz != NULL) {
		((int *)tz)[0] = 0;
		((int *)tz)[1] = 0;
	}
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
	if (t != NULL) *t = ts.tv_sec;
	return ts.tv_sec;
}
`

var (
	shimMu   sync.Mutex
	shimPath string
)

// clockShim returns the path of the built shim, building it on first use
// into a directory of os.TempDir named after its source, which test
// binaries running at once share (each renames its build into place).
func clockShim(t testing.TB) (string, error) {
	t.Helper()
	shimMu.Lock()
	defer shimMu.Unlock()
	if shimPath != "" {
		return shimPath, nil
	}
	sum := sha256.Sum256([]byte(clockShimSource))
	dir := filepath.Join(os.TempDir(), "distlock-testserver-clockshim-"+hex.EncodeToString(sum[:8]))
	so := filepath.Join(dir, "clockshim.so")
	if _, err := os.Stat(so); err == nil {
		shimPath = so
		return so, nil
	}
	cc := Require(t, "cc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "clockshim.c")
	if err := os.WriteFile(src, []byte(clockShimSource), 0o644); err != nil {
		return "", err
	}
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", filepath.Join(tmp, "clockshim.so"), src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("testserver: build the clock shim with %s: %w\n%s", cc, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, "clockshim.so"), so); err != nil {
		return "", err
	}
	shimPath = so
	return so, nil
}

// movableClock builds the shim and creates the offset file of a server in
// dir (a new temporary directory if ""), readable by the server's user u
// (nil: the current user), returning the clock and the variables to add to
// the environment of the server process.
func movableClock(t testing.TB, dir string, u *runAsUser) (*MovableClock, []string) {
	t.Helper()
	so, err := clockShim(t)
	if err != nil {
		t.Fatal(err)
	}
	if dir == "" {
		dir = t.TempDir()
	}
	file := filepath.Join(dir, "clock.offset")
	set, err := mapOffset(t, file)
	if err == nil {
		err = giveTo(u, file)
	}
	if err != nil {
		t.Fatalf("testserver: movable clock: %v", err)
	}
	return &MovableClock{set: set}, []string{"LD_PRELOAD=" + so, clockEnv + "=" + file}
}

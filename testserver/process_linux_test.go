package testserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Pause returns once the kernel reports the server stopped, and Resume
// lets it run again.
func TestPauseWaitsUntilStopped(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	if state, _, ok := procStat(r.Pid()); !ok || state != 'T' {
		t.Fatalf("after Pause the server's state is %c, want T (stopped)", state)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if got := mustDo(t, r, "PING"); got != "PONG" {
		t.Fatalf("PING after Resume = %v", got)
	}
}

// orphanEnv makes the test binary, run with -test.run=TestOrphanChild, start
// servers, print their pids and wait to be killed.
const orphanEnv = "TESTSERVER_ORPHAN_CHILD"

// TestOrphanChild is the child of TestServersDieWithTestBinary; it does
// nothing in a normal run.
func TestOrphanChild(t *testing.T) {
	if os.Getenv(orphanEnv) != "1" {
		t.Skip("the child of TestServersDieWithTestBinary")
	}
	pg := StartPostgres(t)
	procs := []*Process{
		StartRedis(t).Process,
		StartEtcd(t).Members[0].Process,
		StartZooKeeper(t).Members[0].Process,
		pg.Process,
		StartPgBouncer(t, pg).Process,
	}
	// A backend of the postmaster, a grandchild of this process.
	hold := exec.Command(PostgresBin(t, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(pg.Port),
		"-U", "postgres", "-XAtq", "-c", "select pg_sleep(600)")
	hold.Env = pgEnv(t.TempDir())
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for psql(t, pg, "select count(*) from pg_stat_activity where query like 'select pg_sleep%'") != "1" {
		if time.Now().After(deadline) {
			t.Fatal("holding connection not seen")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var pids []string
	for _, p := range procs {
		pids = append(pids, strconv.Itoa(p.Pid()))
		for _, d := range descendants(p.Pid()) {
			pids = append(pids, strconv.Itoa(d))
		}
	}
	fmt.Printf("PIDS %s\n", strings.Join(pids, " "))
	time.Sleep(time.Hour) // until the parent kills this process
}

// A test binary that dies without running its cleanups (SIGKILL, here)
// takes its servers and their children with it.
func TestServersDieWithTestBinary(t *testing.T) {
	if os.Getenv(orphanEnv) != "" {
		t.Skip("in the child")
	}
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	child := exec.CommandContext(ctx, exe, "-test.run=^TestOrphanChild$", "-test.v")
	child.Env = append(os.Environ(), orphanEnv+"=1")
	// The child dies with this binary too, should this test not get to kill it.
	child.SysProcAttr = sysProcAttr(nil)
	var log strings.Builder
	child.Stderr = &log
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		fields, ok := strings.CutPrefix(sc.Text(), "PIDS ")
		if !ok {
			log.WriteString(sc.Text() + "\n")
			continue
		}
		for _, f := range strings.Fields(fields) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("pid %q: %v", f, err)
			}
			pids = append(pids, pid)
		}
		break
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, out)
	_ = child.Wait()
	// Five servers, each a child of the test binary, plus at least the
	// PostgreSQL backend.
	if len(pids) < 6 {
		t.Fatalf("the child reported pids %v; its output:\n%s", pids, log.String())
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range pids {
		for !procGone(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, pid := range pids {
		if procGone(pid) {
			continue
		}
		state, _, _ := procStat(pid)
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		t.Errorf("process %d (%.80s, state %c) outlived the test binary that started it",
			pid, strings.ReplaceAll(string(b), "\x00", " "), state)
		// So that it does not outlive this test binary either.
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Pause stops PostgreSQL with every backend while clients keep
// connecting: the postmaster forks a backend per connection, in a session
// of its own, and one forked while the SIGSTOPs were on their way was in
// no list and no group they reached, and Pause failed ("not stopped")
// with that backend running.
func TestPausePostgresWhileConnecting(t *testing.T) {
	t.Parallel()
	pg := StartPostgres(t)
	addr := "127.0.0.1:" + strconv.Itoa(pg.Port)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Each accepted connection forks a backend. While the
			// postmaster is paused the kernel still completes dials into
			// its listen backlog, and on Resume it forks a backend for
			// each: forks come in bursts as the next Pause begins.
			if c, err := net.DialTimeout("tcp", addr, 50*time.Millisecond); err == nil {
				c.Close()
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 40 {
		if err := pg.Pause(); err != nil {
			t.Fatalf("pause %d: %v", i, err)
		}
		for _, p := range append([]int{pg.Pid()}, descendants(pg.Pid())...) {
			if state, _, ok := procStat(p); ok && state != 'T' && state != 'Z' && state != 'X' {
				t.Fatalf("pause %d: process %d is in state %c after Pause, want stopped", i, p, state)
			}
		}
		if err := pg.Resume(); err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond) // let connections through between pauses
	}
}

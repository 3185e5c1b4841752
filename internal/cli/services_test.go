//go:build linux

package cli_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/distlock/distlock/internal/cli"
	"github.com/distlock/distlock/internal/testserver"
)

// On Redis, a holder frozen with SIGSTOP past its TTL loses the lock: the
// next run is granted the key with a higher token while the holder is
// frozen (the fault bites: its command is still running, unprotected, which
// is what fencing tokens are for), and when the holder thaws it sees its
// deadline has passed, terminates its command and exits 76.
func TestRedisFrozenHolderLosesLock(t *testing.T) {
	frozenHolderLosesLock(t, "redis://"+testserver.StartRedis(t).Addr)
}

// The same on etcd: the frozen holder's session stops its keep-alives, the
// server expires its lease, and the next run is granted the key.
func TestEtcdFrozenHolderLosesLock(t *testing.T) {
	frozenHolderLosesLock(t, "etcd://"+testserver.StartEtcd(t).Members[0].ClientAddr)
}

func frozenHolderLosesLock(t *testing.T, backend string) {
	e := newEnv(t)
	pidFile, tokFile := e.path("a.pid"), e.path("a.token")
	a := e.start(e.command("--backend", backend, "run", "--ttl", "1s", "--grace", "2s", "k", "--", "sh", "-c",
		fmt.Sprintf(`echo $DISTLOCK_TOKEN > %s; echo $$ > %s; exec sleep 600`, sh(tokFile), sh(pidFile))))
	childPid, tokA := readInt(t, pidFile), readInt(t, tokFile)

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rb := e.run("--backend", backend, "run", "--timeout", "30s", "k", "--", "sh", "-c", "echo $DISTLOCK_TOKEN")
	if rb.code != 0 {
		t.Fatalf("second run while the holder is frozen: exit %d, stderr %q", rb.code, rb.stderr)
	}
	var tokB int
	fmt.Sscan(strings.TrimSpace(rb.stdout), &tokB)
	if tokB <= tokA {
		t.Errorf("second holder's token %d is not above the frozen holder's %d", tokB, tokA)
	}
	if !alive(childPid) {
		t.Fatalf("the frozen holder's command ended before the thaw: the fault did not bite")
	}

	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	ra := e.wait(a)
	if ra.code != cli.ExitLockLost {
		t.Errorf("thawed holder: exit %d, want %d; stderr %q", ra.code, cli.ExitLockLost, ra.stderr)
	}
	if !strings.Contains(ra.stderr, "lost") {
		t.Errorf("thawed holder's message does not say the lock was lost: %q", ra.stderr)
	}
	waitGone(t, childPid)
}

// On Redis too, a lock the service drops while the command runs ends the
// command: here the lock key is deleted behind the holder's back, and the
// holder learns it at its next renewal.
func TestRedisDroppedLockEndsCommand(t *testing.T) {
	e := newEnv(t)
	r := testserver.StartRedis(t)
	backend := "redis://" + r.Addr
	pidFile := e.path("a.pid")
	a := e.start(e.command("--backend", backend, "run", "--ttl", "3s", "--grace", "1s", "k", "--", "sh", "-c",
		fmt.Sprintf(`trap '' TERM; echo $$ > %s; while :; do sleep 0.05; done`, sh(pidFile))))
	childPid := readInt(t, pidFile)
	keys, err := r.Do("KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	var deleted bool
	for _, k := range keys.([]any) {
		if s := fmt.Sprint(k); strings.Contains(s, "{k}") && !strings.Contains(s, "token") {
			if _, err := r.Do("DEL", s); err != nil {
				t.Fatal(err)
			}
			deleted = true
		}
	}
	if !deleted {
		t.Fatalf("no lock key found in %v", keys)
	}
	ra := e.wait(a)
	if ra.code != cli.ExitLockLost {
		t.Errorf("exit %d, want %d; stderr %q", ra.code, cli.ExitLockLost, ra.stderr)
	}
	waitGone(t, childPid) // it ignored SIGTERM: SIGKILL after --grace
}

// On Redis, where no file keeps the lock, SIGKILL of distlock still ends
// its whole job at once (its supervisor sees it die), long before the
// lock's TTL lets another holder in.
func TestRedisKilledDistlockKillsWholeJob(t *testing.T) {
	e := newEnv(t)
	r := testserver.StartRedis(t)
	backend := "redis://" + r.Addr
	workerPid := e.path("worker.pid")
	a := e.start(e.command("--backend", backend, "run", "--ttl", "1m", "k", "--", "sh", "-c", workerScript(workerPid, "")))
	worker := readInt(t, workerPid)
	t.Cleanup(func() { syscall.Kill(worker, syscall.SIGKILL) })
	a.cmd.Process.Signal(syscall.SIGKILL)
	e.wait(a)
	waitGone(t, worker)
}

// On a Redis Cluster, named by the redis+cluster:// form: runs get
// increasing tokens, and status finds a holder whichever node has its key.
func TestRedisClusterRun(t *testing.T) {
	e := newEnv(t)
	c := testserver.StartRedisCluster(t, 3)
	backend := "redis+cluster://" + strings.Join(c.Addrs(), ",")
	var last int
	for i := range 2 {
		r := e.run("--backend", backend, "run", "jobs/cluster", "--", "sh", "-c", "echo $DISTLOCK_TOKEN")
		if r.code != 0 {
			t.Fatalf("run %d on the cluster: exit %d, stderr %q", i, r.code, r.stderr)
		}
		var tok int
		fmt.Sscan(strings.TrimSpace(r.stdout), &tok)
		if tok <= last {
			t.Fatalf("run %d: token %d, not above %d", i, tok, last)
		}
		last = tok
	}
	pidFile := e.path("holder.pid")
	holder := e.start(e.command("--backend", backend, "run", "jobs/held", "--", "sh", "-c",
		fmt.Sprintf(`echo $$ > %s; exec sleep 600`, sh(pidFile))))
	readInt(t, pidFile)
	r := e.run("--backend", backend, "status", "jobs/")
	if r.code != 0 || !strings.Contains(r.stdout, "jobs/held") {
		t.Errorf("status on the cluster: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	holder.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(holder)
}

//go:build linux

package cli_test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/testserver"
)

// On Redis, with distlock alone stopped (SIGSTOP of its pid only, as a
// debugger or a freezer of one process would), its supervisor still ends
// the command before the lease can lapse: no write of the command lands
// after the next holder's grant, whether the command obeys SIGTERM or
// only dies of the SIGKILL at the deadline (--grace longer than the TTL
// allows is cut to the lock's at-risk window). When distlock is continued
// it exits 76.
func TestRedisStoppedDistlockCommandEndsInTime(t *testing.T) {
	backend := "redis://" + testserver.StartRedis(t).Addr
	t.Run("ObeysSIGTERM", func(t *testing.T) { stoppedDistlockCommandEndsInTime(newEnv(t), backend, "k1", "", "10s") })
	t.Run("IgnoresSIGTERM", func(t *testing.T) {
		stoppedDistlockCommandEndsInTime(newEnv(t), backend, "k2", "trap '' TERM;", "1h")
	})
}

// The same on etcd: the stopped distlock sends no keep-alives, the server
// expires the session's lease, and the command is gone by then.
func TestEtcdStoppedDistlockCommandEndsInTime(t *testing.T) {
	e := newEnv(t)
	stoppedDistlockCommandEndsInTime(e, "etcd://"+testserver.StartEtcd(t).Members[0].ClientAddr, "k", "trap '' TERM;", "1h")
}

// The same on ZooKeeper, where the lease is 5/12 of the session timeout (here 2s),
// not --ttl: the stopped distlock's client sends no pings, the ensemble
// expires the session, and the command is gone by then.
func TestZooKeeperStoppedDistlockCommandEndsInTime(t *testing.T) {
	e := newEnv(t)
	z := testserver.StartZooKeeper(t)
	stoppedDistlockCommandEndsInTime(e, "zk://"+z.ConnectString()+"/locks?session_timeout=2s", "k", "trap '' TERM;", "1h")
}

// The same through a gateway (over file://), where the lease is the time
// left that the gateway reports: the stopped distlock sends no keepalives,
// the gateway's session expires and its lock is released, and the command
// is gone by then.
func TestGatewayStoppedDistlockCommandEndsInTime(t *testing.T) {
	e := newEnv(t)
	stoppedDistlockCommandEndsInTime(e, "distlock+"+e.serve().url, "k", "trap '' TERM;", "1h")
}

// The same on PostgreSQL's lease table (?mode=lease, through PgBouncer):
// the stopped distlock renews nothing, the lease expires, and the command
// is gone by then.
func TestPostgresLeaseStoppedDistlockCommandEndsInTime(t *testing.T) {
	e := newEnv(t)
	pg := testserver.StartPostgres(t)
	backend := fmt.Sprintf("%s&mode=lease&listen_host=127.0.0.1:%d", testserver.StartPgBouncer(t, pg).DSN, pg.Port)
	stoppedDistlockCommandEndsInTime(e, backend, "k", "trap '' TERM;", "1h")
}

func stoppedDistlockCommandEndsInTime(e *env, backend, key, trap, grace string) {
	t := e.t
	log, pidFile := e.path("log"), e.path("a.pid")
	// The holder's command appends a line every few milliseconds; the next
	// holder's appends one when it is granted the key, and holds it a
	// while, for a late write to show. O_APPEND orders the lines as they
	// landed.
	a := e.start(e.command("--backend", backend, "run", "--ttl", "2s", "--grace", grace, key, "--", "sh", "-c",
		fmt.Sprintf(`%s echo $$ > %s; while :; do echo "a $DISTLOCK_TOKEN" >> %s; sleep 0.005; done`, trap, sh(pidFile), sh(log))))
	childPid := readInt(t, pidFile)
	waitFor(t, "the holder's command to write", func() bool { b, _ := os.ReadFile(log); return len(b) > 0 })

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	rb := e.run("--backend", backend, "run", "--timeout", "30s", key, "--", "sh", "-c",
		fmt.Sprintf(`echo "b $DISTLOCK_TOKEN" >> %s; sleep 0.3`, sh(log)))
	if rb.code != 0 {
		t.Fatalf("second run while the holder's distlock is stopped: exit %d, stderr %q", rb.code, rb.stderr)
	}
	t.Logf("next holder done %v after the stop", time.Since(stopped).Round(time.Millisecond))
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	ra := e.wait(a)
	waitGone(t, childPid)

	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var grant, after, before int
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "b "):
			grant = i + 1
		case grant > 0:
			after++
		default:
			before++
		}
	}
	if grant == 0 {
		t.Fatalf("the next holder's line is missing from %q", lines)
	}
	if before == 0 {
		t.Fatalf("the holder's command wrote nothing before the next grant")
	}
	if after > 0 {
		t.Errorf("%d writes of the stopped distlock's command landed after the next holder's grant (%d before)", after, before)
	}
	var tokA, tokB int
	fmt.Sscanf(lines[0], "a %d", &tokA)
	fmt.Sscanf(lines[grant-1], "b %d", &tokB)
	if tokB <= tokA {
		t.Errorf("next holder's token %d is not above %d", tokB, tokA)
	}
	if ra.code != cli.ExitLockLost || !strings.Contains(ra.stderr, "lost the lock") || !strings.Contains(ra.stderr, "supervisor") {
		t.Errorf("continued holder: exit %d, stderr %q; want %d, saying the lock was lost and the supervisor ended the command", ra.code, ra.stderr, cli.ExitLockLost)
	}
	if n := strings.Count(ra.stderr, "\n"); n != 1 {
		t.Errorf("continued holder wrote %d lines, want one message: %q", n, ra.stderr)
	}
}

// While distlock renews the lock, the supervisor hears of each renewal and
// leaves the command alone, for many TTLs.
//
// A renewal is only as timely as the machine lets it be: a stall of
// distlock longer than the lock's at-risk window (here about a third of
// the TTL) brings the deadline near without a confirmed renewal, and the
// supervisor is then right to end the command, and distlock to exit 76.
// So a run that ends so is made again, up to renewedRuns times, and the
// test fails if every run ends so: a distlock that does not renew, or does
// not tell the supervisor of its renewals, ends every one. Any other
// outcome fails at once.
func TestRedisRenewedLockKeepsCommand(t *testing.T) {
	e := newEnv(t)
	backend := "redis://" + testserver.StartRedis(t).Addr
	for run := 1; ; run++ {
		r := e.run("--backend", backend, "run", "--ttl", "1s", "--grace", "1h", "k", "--", "sleep", "4")
		switch {
		case r.code == 0 && r.stderr == "":
			return
		case r.code != cli.ExitLockLost || !strings.Contains(r.stderr, `the lock on "k"`) || strings.Count(r.stderr, "\n") != 1:
			t.Fatalf("a command running 4 TTLs: exit %d, stderr %q; want 0 and nothing said", r.code, r.stderr)
		case run == renewedRuns:
			t.Fatalf("a command running 4 TTLs: exit %d in each of %d runs, the last saying %q; want 0 and nothing said", r.code, run, r.stderr)
		}
		t.Logf("run %d of a command running 4 TTLs ended for the lock's deadline (exit %d, %q); running it again", run, r.code, r.stderr)
	}
}

// renewedRuns is how many runs TestRedisRenewedLockKeepsCommand makes
// before it fails.
const renewedRuns = 3

// --verbose logs each event once: the grant, the renewals, the release.
// A run that a stall of the machine ended for the lock's deadline is made
// again, as in TestRedisRenewedLockKeepsCommand.
func TestRedisVerboseLogsEachEventOnce(t *testing.T) {
	e := newEnv(t)
	backend := "redis://" + testserver.StartRedis(t).Addr
	var r result
	for run := 1; ; run++ {
		r = e.run("--verbose", "--backend", backend, "run", "--ttl", "1s", "k", "--", "sleep", "1")
		if r.code == 0 {
			break
		}
		if r.code != cli.ExitLockLost || !strings.Contains(r.stderr, `the lock on "k"`) || run == renewedRuns {
			t.Fatalf("run %d: exit %d, stderr %q", run, r.code, r.stderr)
		}
		t.Logf("run %d ended for the lock's deadline (exit %d); running it again", run, r.code)
	}
	// Messages ending so, whoever logs them (distlock or its Client).
	for _, end := range []string{`acquired"`, `released"`, `command started"`, `command ended"`} {
		if n := strings.Count(r.stderr, end); n != 1 {
			t.Errorf("messages ending %s logged %d times, want once: %s", end, n, r.stderr)
		}
	}
	if !strings.Contains(r.stderr, `msg="distlock: renewed"`) {
		t.Errorf("no renewal logged: %s", r.stderr)
	}
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
// lock's TTL lets another holder in: the TTL (10m) is far longer than the
// wait for the job to end (1m), so a job ended only by the deadline fails.
func TestRedisKilledDistlockKillsWholeJob(t *testing.T) {
	e := newEnv(t)
	r := testserver.StartRedis(t)
	backend := "redis://" + r.Addr
	workerPid := e.path("worker.pid")
	a := e.start(e.command("--backend", backend, "run", "--ttl", "10m", "k", "--", "sh", "-c", workerScript(workerPid, "")))
	worker := readInt(t, workerPid)
	t.Cleanup(func() { syscall.Kill(worker, syscall.SIGKILL) })
	a.cmd.Process.Signal(syscall.SIGKILL)
	e.wait(a)
	waitGone(t, worker)
}

// On a Redis Cluster, named by the redis+cluster:// form: runs get
// increasing tokens, and status finds a holder whichever node has its key.
func TestRedisClusterRun(t *testing.T) {
	c := testserver.StartRedisCluster(t, 3)
	runAndStatus(t, newEnv(t), "redis+cluster://"+strings.Join(c.Addrs(), ","))
}

// On ZooKeeper (zk://, every server of the ensemble): runs get increasing
// tokens, and status lists a holder under the URL's prefix.
func TestZooKeeperRun(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	runAndStatus(t, newEnv(t), "zk://"+z.ConnectString()+"/apps/locks")
}

// On PostgreSQL (postgres://, advisory locks on a held connection): the
// same.
func TestPostgresRun(t *testing.T) {
	runAndStatus(t, newEnv(t), testserver.StartPostgres(t).DSN)
}

// runAndStatus runs two commands one after the other on backend, which
// must see increasing tokens, then holds a lock while status lists it.
func runAndStatus(t *testing.T, e *env, backend string) {
	t.Helper()
	var last int
	for i := range 2 {
		r := e.run("--backend", backend, "run", "jobs/one", "--", "sh", "-c", "echo $DISTLOCK_TOKEN")
		if r.code != 0 {
			t.Fatalf("run %d on %s: exit %d, stderr %q", i, backend, r.code, r.stderr)
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
		t.Errorf("status on %s: exit %d, stdout %q, stderr %q", backend, r.code, r.stdout, r.stderr)
	}
	holder.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(holder)
}

// A Redis that may evict keys is a setting of the server, not a usage
// error: exit 69, naming the URL option that accepts the risk.
func TestRedisEvictionPolicyRefused(t *testing.T) {
	e := newEnv(t)
	r := testserver.StartRedis(t, testserver.WithRedisConfig("maxmemory-policy allkeys-lru"))
	res := e.run("--backend", "redis://"+r.Addr, "run", "k", "--", "true")
	if res.code != cli.ExitUnavailable || !strings.Contains(res.stderr, "?eviction_allowed=true") ||
		strings.Contains(res.stderr, "WithEvictionAllowed") || strings.Contains(res.stderr, "--help") {
		t.Errorf("evicting Redis: exit %d, stderr %q; want %d naming ?eviction_allowed=true, not the Go option or the usage", res.code, res.stderr, cli.ExitUnavailable)
	}
	if res := e.run("--backend", "redis://"+r.Addr+"?eviction_allowed=true", "run", "k", "--", "true"); res.code != 0 {
		t.Errorf("with ?eviction_allowed=true: exit %d, stderr %q", res.code, res.stderr)
	}
}

//go:build linux

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/testserver"
)

// electBackend is a lock service for the election tests: those of the run
// tests (TestRunOutlastsRenewals), and memory, through distlock run in
// this process.
type electBackend struct {
	name  string
	start func(t *testing.T, e *env) *candidates
}

func electBackends() []electBackend {
	over := func(url func(t *testing.T, e *env) string) func(t *testing.T, e *env) *candidates {
		return func(t *testing.T, e *env) *candidates { return &candidates{env: e, backend: url(t, e)} }
	}
	return []electBackend{
		{"memory", func(t *testing.T, e *env) *candidates { return &candidates{env: e, mem: memlock.New()} }},
		{"file", over(func(t *testing.T, e *env) string { return "file://" + e.dir })},
		{"redis", over(func(t *testing.T, e *env) string { return "redis://" + testserver.StartRedis(t).Addr })},
		{"redis-cluster", over(func(t *testing.T, e *env) string {
			return "redis+cluster://" + strings.Join(testserver.StartRedisCluster(t, 3).Addrs(), ",")
		})},
		{"redlock", over(func(t *testing.T, e *env) string {
			var addrs []string
			for range 3 {
				addrs = append(addrs, testserver.StartRedis(t).Addr)
			}
			return "redlock://" + strings.Join(addrs, ",")
		})},
		{"etcd", over(func(t *testing.T, e *env) string { return "etcd://" + testserver.StartEtcd(t).Members[0].ClientAddr })},
		{"zk", over(func(t *testing.T, e *env) string {
			return "zk://" + testserver.StartZooKeeper(t).ConnectString() + "/locks"
		})},
		{"postgres", over(func(t *testing.T, e *env) string { return testserver.StartPostgres(t).DSN })},
		{"postgres-lease", over(func(t *testing.T, e *env) string {
			pg := testserver.StartPostgres(t)
			return fmt.Sprintf("%s&mode=lease&listen_host=127.0.0.1:%d", testserver.StartPgBouncer(t, pg).DSN, pg.Port)
		})},
		{"gateway", over(func(t *testing.T, e *env) string { return "distlock+" + e.serve().url })},
	}
}

// candidates starts distlock processes on one lock service: the backend
// URL, or mem, served to distlock run in this process.
type candidates struct {
	*env
	backend string
	mem     *memlock.Backend
}

// proc is a distlock started by candidates.
type proc struct {
	stdout, stderr *syncBuffer
	wait           func() result
	stop           func() // SIGTERM, or the end of Run's context
}

func (c *candidates) start(args ...string) *proc {
	c.t.Helper()
	if c.mem == nil {
		s := c.env.start(c.command(append([]string{"--backend", c.backend}, args...)...))
		return &proc{stdout: s.stdout, stderr: s.stderr,
			wait: func() result { c.t.Helper(); return c.env.wait(s) },
			stop: func() { s.cmd.Process.Signal(syscall.SIGTERM) }}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{stdout: &syncBuffer{}, stderr: &syncBuffer{}, stop: cancel}
	open := func(context.Context, string) (driver.Backend, io.Closer, error) { return c.mem, io.NopCloser(nil), nil }
	code := make(chan int, 1)
	go func() {
		code <- cli.Run(ctx, append([]string{"--backend", "mem://"}, args...),
			cli.WithOpener("mem", open), cli.WithStdio(strings.NewReader(""), p.stdout, p.stderr))
	}()
	var r *result
	p.wait = func() result {
		c.t.Helper()
		if r == nil {
			r = &result{code: waitCode(c.t, code), stdout: p.stdout.String(), stderr: p.stderr.String()}
		}
		return *r
	}
	c.t.Cleanup(func() {
		cancel()
		if r == nil {
			<-code
		}
	})
	return p
}

func (c *candidates) run(args ...string) result {
	c.t.Helper()
	return c.start(args...).wait()
}

// leaderLine is a line of `distlock leader --json`.
type leaderLine struct {
	Election string  `json:"election"`
	Leader   bool    `json:"leader"`
	Value    *string `json:"value"`
	Token    string  `json:"token"`
}

// leaderLines parses the output of `distlock leader --json`, whole lines
// only.
func leaderLines(t *testing.T, out string) []leaderLine {
	t.Helper()
	var ls []leaderLine
	for line := range strings.Lines(out) {
		if !strings.HasSuffix(line, "\n") {
			break
		}
		var l leaderLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("leader --json line %q: %v", line, err)
		}
		ls = append(ls, l)
	}
	return ls
}

// On every lock service, with elect's defaults (no --ttl, no --grace, the
// URL's own settings), a command that runs through two renewals of its
// term ends with its own status and output, having had the term's token
// and key; leader shows the value and the token while it runs. As in
// TestRunOutlastsRenewals, a run that the machine stalled past the term's
// at-risk window (exit 76, its deadline neared without a confirmed
// renewal) is made again, up to outlastRuns times.
func TestElectOutlastsRenewals(t *testing.T) {
	t.Parallel()
	for _, b := range electBackends() {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t)
			c := b.start(t, e)
			for run := 1; ; run++ {
				finish, env := e.path(fmt.Sprintf("finish%d", run)), e.path(fmt.Sprintf("env%d", run))
				s := c.start("--verbose", "elect", "--value", "leader-a", "jobs/leader", "--", "sh", "-c",
					fmt.Sprintf(`echo "$DISTLOCK_KEY $DISTLOCK_TOKEN" > %[2]s.tmp; mv %[2]s.tmp %[2]s
while [ ! -e %[1]s ]; do sleep 0.05; done; echo ran; exit 7`, sh(finish), sh(env)))
				waitFor(t, "the command to start", func() bool { _, err := os.Stat(env); return err == nil })
				got, _ := os.ReadFile(env)
				key, tok, _ := strings.Cut(strings.TrimSpace(string(got)), " ")
				if key != "election/jobs/leader" || tok == "" || tok == "0" {
					t.Fatalf("the command has DISTLOCK_KEY and DISTLOCK_TOKEN %q; want election/jobs/leader and a token", got)
				}
				if r := c.run("leader", "jobs/leader"); r.code != 0 || r.stdout != "leader-a (term "+tok+")\n" {
					t.Errorf("leader while elected: exit %d, stdout %q, stderr %q; want leader-a (term %s)", r.code, r.stdout, r.stderr, tok)
				}
				waitFor(t, "two renewals, or the command's end", func() bool {
					out := s.stderr.String()
					return strings.Count(out, `msg="distlock: renewed"`) >= 2 || strings.Contains(out, `msg="command ended"`)
				})
				if err := os.WriteFile(finish, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				r := s.wait()
				switch {
				case r.code == 7 && r.stdout == "ran\n":
					return
				case r.code != cli.ExitLockLost || !strings.Contains(r.stderr, "of its deadline without a confirmed renewal"):
					t.Fatalf("a command through two renewals on %s: exit %d, stdout %q; want 7 and %q; stderr:\n%s", b.name, r.code, r.stdout, "ran\n", r.stderr)
				case run == outlastRuns:
					t.Fatalf("a command through two renewals on %s: exit %d for the term's deadline in each of %d runs; want 7 and %q; the last stderr:\n%s", b.name, r.code, run, "ran\n", r.stderr)
				}
				t.Logf("run %d on %s ended for the term's deadline (exit %d); running it again; stderr:\n%s", run, b.name, r.code, r.stderr)
			}
		})
	}
}

// On every lock service, a second candidate waits while the first leads
// and is elected when the first one's command exits: the first resigns.
// Both terms are 4m long (--ttl; ZooKeeper's are its session's, 10s),
// and the second is elected within waitFor's minute: a takeover that
// waited for the first term to lapse fails. leader and leader --watch
// --json see each leader and the ends of the terms; tokens increase.
func TestElectTakesOverAtResignation(t *testing.T) {
	t.Parallel()
	for _, b := range electBackends() {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t)
			c := b.start(t, e)
			const name = "svc/leader"
			log := e.path("log")
			watch := c.start("leader", "--watch", "--json", name)
			waitFor(t, "the watch to show no leader", func() bool { return len(leaderLines(t, watch.stdout.String())) > 0 })
			if r := c.run("leader", name); r.code != cli.ExitNoLeader || r.stdout != "" || !strings.Contains(r.stderr, `no leader in the election "svc/leader"`) {
				t.Errorf("leader before the first term: exit %d, stdout %q, stderr %q; want %d, no leader said on stderr", r.code, r.stdout, r.stderr, cli.ExitNoLeader)
			}

			// Each command logs its start and end, and waits for a file.
			script := func(who, finish string) string {
				return fmt.Sprintf(`echo "%[1]s start $DISTLOCK_TOKEN" >> %[2]s; while [ ! -e %[3]s ]; do sleep 0.02; done; echo "%[1]s end $DISTLOCK_TOKEN" >> %[2]s; exit 3`,
					who, sh(log), sh(finish))
			}
			finishA, finishB := e.path("finishA"), e.path("finishB")
			a := c.start("--verbose", "elect", "--ttl", "4m", "--value", "a", name, "--", "sh", "-c", script("a", finishA))
			waitFor(t, "a's command", func() bool { b, _ := os.ReadFile(log); return strings.Contains(string(b), "a start") })
			bb := c.start("--verbose", "elect", "--ttl", "4m", "--value", "b", name, "--", "sh", "-c", script("b", finishB))
			waitFor(t, "b to campaign", func() bool { return strings.Contains(bb.stderr.String(), `msg=campaigning`) })
			r := c.run("leader", name)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "a (term ") {
				t.Errorf("leader while a leads and b campaigns: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}

			waitFor(t, "the watch to show a", func() bool {
				ls := leaderLines(t, watch.stdout.String())
				return ls[len(ls)-1].Value != nil && *ls[len(ls)-1].Value == "a"
			})
			if err := os.WriteFile(finishA, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if ra := a.wait(); ra.code != 3 || !strings.Contains(ra.stderr, `msg="distlock: released"`) {
				t.Errorf("a: exit %d, want its command's 3, having resigned; stderr:\n%s", ra.code, ra.stderr)
			}
			// Within a minute, while a's term had minutes left had it not resigned.
			waitFor(t, "b's command", func() bool { b, _ := os.ReadFile(log); return strings.Contains(string(b), "b start") })
			waitFor(t, "the watch to show b", func() bool {
				ls := leaderLines(t, watch.stdout.String())
				return ls[len(ls)-1].Value != nil && *ls[len(ls)-1].Value == "b"
			})
			if err := os.WriteFile(finishB, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if rb := bb.wait(); rb.code != 3 {
				t.Errorf("b: exit %d, want its command's 3; stderr:\n%s", rb.code, rb.stderr)
			}
			waitFor(t, "the watch to show no leader again", func() bool {
				ls := leaderLines(t, watch.stdout.String())
				return len(ls) > 1 && !ls[len(ls)-1].Leader
			})
			if r := c.run("leader", "--json", name); r.code != cli.ExitNoLeader || r.stdout != `{"election":"svc/leader","leader":false}`+"\n" || r.stderr != "" {
				t.Errorf("leader --json after the last term: exit %d, stdout %q, stderr %q; want %d and leader false", r.code, r.stdout, r.stderr, cli.ExitNoLeader)
			}
			watch.stop()
			if rw := watch.wait(); rw.code != 0 {
				t.Errorf("leader --watch interrupted: exit %d, want 0; stderr %q", rw.code, rw.stderr)
			}

			// The terms did not overlap, in token order.
			got, _ := os.ReadFile(log)
			var tokA, tokB uint64
			lines := strings.Split(strings.TrimSpace(string(got)), "\n")
			if len(lines) != 4 || !strings.HasPrefix(lines[1], "a end") || !strings.HasPrefix(lines[2], "b start") {
				t.Fatalf("the commands' log %q; want a's start and end, then b's", lines)
			}
			fmt.Sscanf(lines[0], "a start %d", &tokA)
			fmt.Sscanf(lines[2], "b start %d", &tokB)
			if tokA == 0 || tokB <= tokA {
				t.Errorf("tokens a %d, b %d; want b's above a's", tokA, tokB)
			}
			// The watch saw no leader, a, b, no leader, in that order (a
			// state between two reads may be missed: no leader between a
			// and b), with increasing tokens.
			var seen []string
			var last uint64
			for _, l := range leaderLines(t, watch.stdout.String()) {
				if l.Election != name {
					t.Errorf("watch line for election %q, want %q", l.Election, name)
				}
				if !l.Leader {
					if l.Value != nil || l.Token != "" {
						t.Errorf("a no-leader line with a value or token: %+v", l)
					}
					seen = append(seen, "none")
					continue
				}
				tok, err := strconv.ParseUint(l.Token, 10, 64)
				if err != nil || tok < last || l.Value == nil {
					t.Errorf("watch line %+v after token %d", l, last)
					continue
				}
				last = tok
				switch *l.Value {
				case "a":
					if tok != tokA {
						t.Errorf("the watch shows a with token %d, want %d", tok, tokA)
					}
				case "b":
					if tok != tokB {
						t.Errorf("the watch shows b with token %d, want %d", tok, tokB)
					}
				}
				seen = append(seen, *l.Value)
			}
			if s := strings.ReplaceAll(strings.Join(seen, " "), "a none b", "a b"); s != "none a b none" {
				t.Errorf("the watch saw %q; want none a b none", strings.Join(seen, " "))
			}
		})
	}
}

// A term lost while the command runs ends the command as run ends it on
// the loss of its lock: SIGTERM, then SIGKILL after --grace if it ignores
// SIGTERM; distlock exits 76 and says why, once.
func TestElectLossTerminatesCommand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		trap  string // the command's reaction to SIGTERM
		ended string // how distlock says the command ended
	}{
		{"ObeysSIGTERM", `echo TERM >> %[1]s; exit 0`, "exited with status 0"},
		{"IgnoresSIGTERM", `echo TERM >> %[1]s`, "killed by signal 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pidFile, mark := dir+"/pid", dir+"/mark"
			srv := memlock.New()
			var stderr syncBuffer
			script := fmt.Sprintf(`trap '`+tc.trap+`' TERM; echo $$ > %[2]s; while :; do sleep 0.02; done`, sh(mark), sh(pidFile))
			// A lease long enough that a late renewal under load does not
			// make the supervisor end the command before the loss (its
			// at-risk window, 2s, is how late a renewal may be).
			code := runInProcess(context.Background(), srv, &stderr,
				"elect", "--ttl", "6s", "--grace", "300ms", "jobs/k", "--", "sh", "-c", script)
			pid := readInt(t, pidFile)
			if !alive(pid) {
				t.Fatal("the command is not running")
			}
			if !srv.Revoke(election.KeyPrefix + "jobs/k") {
				t.Fatal("Revoke: no term to revoke")
			}
			if c := waitCode(t, code); c != cli.ExitLockLost {
				t.Errorf("exit %d, want %d; stderr %q", c, cli.ExitLockLost, stderr.String())
			}
			msg := stderr.String()
			for _, want := range []string{`lost the leadership of the election "jobs/k"`, "SIGTERM", tc.ended} {
				if !strings.Contains(msg, want) {
					t.Errorf("stderr %q does not say %q", msg, want)
				}
			}
			if n := strings.Count("\n"+msg, "\ndistlock:"); n != 1 {
				t.Errorf("stderr has %d lines, want the loss said once: %q", n, msg)
			}
			if b, _ := os.ReadFile(mark); string(b) != "TERM\n" {
				t.Errorf("the command's record of signals: %q, want one SIGTERM; stderr %q", b, msg)
			}
			waitGone(t, pid)
		})
	}
}

// On Redis too, a term the service drops while the command runs ends the
// command: here the term's key is deleted behind the leader's back, and
// the leader learns it at its next renewal.
func TestElectRedisDroppedTermEndsCommand(t *testing.T) {
	e := newEnv(t)
	r := testserver.StartRedis(t)
	pidFile := e.path("a.pid")
	a := e.start(e.command("--backend", "redis://"+r.Addr, "elect", "--ttl", "3s", "--grace", "1s", "x", "--", "sh", "-c",
		fmt.Sprintf(`trap '' TERM; echo $$ > %s; while :; do sleep 0.05; done`, sh(pidFile))))
	childPid := readInt(t, pidFile)
	keys, err := r.Do("KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	var deleted bool
	for _, k := range keys.([]any) {
		if s := fmt.Sprint(k); strings.Contains(s, "{election/x}") && !strings.Contains(s, "token") {
			if _, err := r.Do("DEL", s); err != nil {
				t.Fatal(err)
			}
			deleted = true
		}
	}
	if !deleted {
		t.Fatalf("no key of the term found in %v", keys)
	}
	ra := e.wait(a)
	if ra.code != cli.ExitLockLost || !strings.Contains(ra.stderr, `lost the leadership of the election "x"`) {
		t.Errorf("exit %d, stderr %q; want %d, saying the leadership was lost", ra.code, ra.stderr, cli.ExitLockLost)
	}
	waitGone(t, childPid) // it ignored SIGTERM: SIGKILL after --grace
}

// SIGINT while campaigning ends the campaign: 128+2, the command never
// runs, and the leader keeps leading.
func TestElectInterruptedWhileCampaigning(t *testing.T) {
	e := newEnv(t)
	pidFile := e.path("leader.pid")
	leader := e.start(e.command("elect", "--value", "first", "x", "--", "sh", "-c", fmt.Sprintf(`echo $$ > %s; exec sleep 600`, sh(pidFile))))
	readInt(t, pidFile)
	mark := e.path("ran")
	w := e.start(e.command("--verbose", "elect", "x", "--", "touch", mark))
	waitFor(t, "the candidate to campaign", func() bool { return strings.Contains(w.stderr.String(), "msg=campaigning") })
	w.cmd.Process.Signal(syscall.SIGINT)
	r := e.wait(w)
	if r.code != 130 || !strings.Contains(r.stderr, `interrupted by interrupt while campaigning in the election "x"`) {
		t.Errorf("interrupted candidate: exit %d, stderr %q; want 130 and a message", r.code, r.stderr)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("the command ran although the campaign was interrupted")
	}
	if r := e.run("leader", "x"); r.code != 0 || !strings.HasPrefix(r.stdout, "first (term ") {
		t.Errorf("leader after the interrupted campaign: exit %d, stdout %q, stderr %q; want first", r.code, r.stdout, r.stderr)
	}
	leader.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(leader)
}

// The default value is host:pid, as the owner run stores.
func TestElectDefaultValue(t *testing.T) {
	e := newEnv(t)
	host, _ := os.Hostname()
	r := e.run("elect", "x", "--", "sh", "-c", `exec "$0" leader x`, bin)
	value, _, _ := strings.Cut(r.stdout, " (term ")
	h, pid, _ := strings.Cut(value, ":")
	if n, err := strconv.Atoi(pid); r.code != 0 || h != host || err != nil || n <= 0 {
		t.Errorf("leader seen by the leader's command: exit %d, stdout %q, stderr %q; want %s:PID", r.code, r.stdout, r.stderr, host)
	}
}

// Bad input to elect and leader: exit 64 with a clear message, before
// the lock service is used.
func TestElectBadInput(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"elect", "", "--", "true"}, "invalid election NAME: empty"},
		{[]string{"elect", "a\x1bb", "--", "true"}, "control character"},
		{[]string{"elect", strings.Repeat("n", 600), "--", "true"}, "invalid key"},
		{[]string{"elect", "--ttl", "0", "x", "--", "true"}, "--ttl 0s is not in"},
		{[]string{"elect", "--ttl", "-1s", "x", "--", "true"}, "--ttl -1s is not in"},
		{[]string{"elect", "--ttl", "25h", "x", "--", "true"}, "--ttl 25h0m0s is not in"},
		{[]string{"elect", "--ttl", "abc", "x", "--", "true"}, "--ttl"},
		{[]string{"elect", "--grace", "-1s", "x", "--", "true"}, "--grace"},
		{[]string{"elect", "--value", "\xff", "x", "--", "true"}, "--value"},
		{[]string{"elect", "--value", strings.Repeat("v", distlock.MaxOwnerLen+1), "x", "--", "true"}, "--value"},
		{[]string{"elect", "x", "true"}, `missing "--"`},
		{[]string{"elect", "x", "--"}, "missing the command"},
		{[]string{"elect", "--", "true"}, "missing NAME"},
		{[]string{"elect"}, "missing NAME"},
		{[]string{"elect", "a", "b", "--", "true"}, "one NAME"},
		{[]string{"leader"}, "want one election NAME"},
		{[]string{"leader", "a", "b"}, "want one election NAME"},
		{[]string{"leader", ""}, "invalid election NAME: empty"},
		{[]string{"leader", "--watch", "a\nb"}, "control character"},
	} {
		r := e.run(tc.args...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d saying %q", tc.args, r.code, r.stderr, cli.ExitUsage, tc.want)
		}
	}
	if _, err := os.Stat(e.dir); err == nil {
		t.Errorf("bad input created the lock directory %s", e.dir)
	}
}

// A leader's value is what anyone with access to the service wrote:
// leader shows one with escape sequences, a newline or a bidirectional
// control Go-quoted, and --json escapes them, decoding to the same value;
// no raw control character reaches the terminal.
func TestLeaderEscapesTheValue(t *testing.T) {
	t.Parallel()
	srv := memlock.New()
	c, err := distlock.New(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	el, err := election.New(c, "x")
	if err != nil {
		t.Fatal(err)
	}
	const value = "evil\x1b]0;owned\x07\x1b[2J\nforged (term 1)\u202e"
	term, err := el.Campaign(context.Background(), value)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Resign(context.Background()) })
	cs := &candidates{env: &env{t: t}, mem: srv}
	for _, args := range [][]string{{"leader", "x"}, {"leader", "--json", "x"}} {
		r := cs.run(args...)
		if r.code != 0 || strings.ContainsAny(r.stdout, "\x1b\x07\u202e") || strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q; want one line without raw control characters", args, r.code, r.stdout)
		}
		if args[1] == "--json" {
			var l leaderLine
			if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || l.Value == nil || *l.Value != value || l.Token != fmt.Sprint(term.Token()) {
				t.Errorf("leader --json %q (%v); want the value and token %d", r.stdout, err, term.Token())
			}
		} else if want := fmt.Sprintf("%q (term %d)\n", value, term.Token()); r.stdout != want {
			t.Errorf("leader: %q, want %q", r.stdout, want)
		}
	}
}

// The help of elect and leader says what the command gets and what no
// leader exits with.
func TestElectAndLeaderHelp(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"elect", "--help"}, []string{"DISTLOCK_TOKEN", "--value", "resigns", "76"}},
		{[]string{"leader", "--help"}, []string{"exits 1", "--watch", "--json"}},
		{[]string{"--help"}, []string{"elect", "leader", "1 no leader"}},
	} {
		r := e.run(tc.args...)
		help := strings.Join(strings.Fields(r.stdout), " ")
		for _, w := range tc.want {
			if r.code != 0 || !strings.Contains(help, w) {
				t.Errorf("%q: exit %d, want 0 and a help that says %q: %s", tc.args, r.code, w, r.stdout)
			}
		}
	}
}

// leader on a lock directory that does not exist: no leader (exit 1),
// and nothing created.
func TestLeaderCreatesNothing(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{{"leader", "x"}, {"leader", "--json", "x"}} {
		r := e.run(args...)
		if r.code != cli.ExitNoLeader {
			t.Errorf("%q on a missing lock directory: exit %d, stdout %q, stderr %q; want %d", args, r.code, r.stdout, r.stderr, cli.ExitNoLeader)
		}
	}
	if _, err := os.Stat(e.dir); err == nil {
		t.Errorf("leader created the lock directory %s", e.dir)
	}
}

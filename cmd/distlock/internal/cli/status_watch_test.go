//go:build linux

package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/testserver"
)

// holder is a distlock run holding key until release.
type holder struct {
	e       *env
	s       *started
	token   uint64
	release func() result
}

// hold runs distlock run on key with a command that waits for its input
// to end, and returns once the command runs (the lock is held).
func (e *env) hold(key string) *holder {
	e.t.Helper()
	tok := e.path(strings.ReplaceAll(key, "/", "_") + ".token")
	cmd := e.command("run", key, "--", "sh", "-c", `echo $DISTLOCK_TOKEN > `+sh(tok)+`; read x || :`)
	r, w, err := os.Pipe()
	if err != nil {
		e.t.Fatal(err)
	}
	cmd.Stdin = r
	s := e.start(cmd)
	r.Close()
	e.t.Cleanup(func() { w.Close() })
	h := &holder{e: e, s: s, token: uint64(readInt(e.t, tok))}
	h.release = func() result {
		e.t.Helper()
		w.Close()
		res := e.wait(s)
		if res.code != 0 {
			e.t.Fatalf("distlock run %s: exit %d, stderr %q", key, res.code, res.stderr)
		}
		return res
	}
	return h
}

// tmux is a tmux server of the test's own, with one session, "watch", of
// 120 columns by 30 rows running sh with the test's distlock as $DL.
type tmux struct {
	t    *testing.T
	sock string
	env  []string
}

func startTmux(t *testing.T, e *env) *tmux {
	t.Helper()
	testserver.Require(t, "tmux") // under CI=true, a missing tmux fails the test
	tm := &tmux{t: t, sock: filepath.Join(e.tmp, "tmux.sock"),
		env: append(e.command().Env, "DL="+bin, "PS1=$ ", "ENV=", "HOME="+e.tmp)}
	tm.run("-f", "/dev/null", "new-session", "-d", "-s", "watch", "-x", "120", "-y", "30", "sh")
	t.Cleanup(func() { tm.command("kill-server").Run() })
	return tm
}

func (tm *tmux) command(args ...string) *exec.Cmd {
	cmd := exec.Command("tmux", append([]string{"-S", tm.sock}, args...)...)
	cmd.Env = tm.env
	return cmd
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := tm.command(args...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// send types keys, then Enter.
func (tm *tmux) send(keys string) {
	tm.t.Helper()
	tm.run("send-keys", "-t", "watch", "-l", keys)
	tm.run("send-keys", "-t", "watch", "Enter")
}

// screen returns what the pane shows.
func (tm *tmux) screen() string {
	tm.t.Helper()
	return tm.run("capture-pane", "-p", "-t", "watch")
}

// await waits, up to limit, until the screen satisfies cond, and returns
// the screen and how long that took.
func (tm *tmux) await(what string, limit time.Duration, cond func(screen string) bool) (string, time.Duration) {
	tm.t.Helper()
	start := time.Now()
	for {
		s := tm.screen()
		if cond(s) {
			return s, time.Since(start)
		}
		if time.Since(start) > limit {
			tm.t.Fatalf("after %v, the screen does not show %s:\n%s", limit, what, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// row returns the fields of the table row of key on screen, or nil.
func row(screen, key string) []string {
	for _, l := range strings.Split(screen, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == key {
			return f
		}
	}
	return nil
}

// heldFor returns the HELD FOR of the row of key, or -1.
func heldFor(screen, key string) float64 {
	f := row(screen, key)
	if len(f) != 5 {
		return -1
	}
	s, err := strconv.ParseFloat(strings.TrimSuffix(f[3], "s"), 64)
	if err != nil {
		return -1
	}
	return s
}

// On a terminal, status --watch redraws the holder table in place: a new
// holder shows within one refresh, a released one is gone within one, and
// Ctrl-C ends it with status 0.
func TestStatusWatchTerminal(t *testing.T) {
	e := newEnv(t)
	tm := startTmux(t, e)
	const interval = cli.DefaultInterval
	// One refresh, and as much again for a loaded machine (and for tmux).
	within := 2 * interval
	tm.send(`"$DL" status --watch; echo "exit=$?"`)
	tm.await("an empty listing", time.Minute, func(s string) bool { return strings.Contains(s, "no lock held") })

	h := e.hold("jobs/watched")
	screen, took := tm.await("the new holder", within, func(s string) bool { return row(s, "jobs/watched") != nil })
	t.Logf("the holder showed after %v", took)
	if f := row(screen, "jobs/watched"); len(f) != 5 || f[1] != strconv.FormatUint(h.token, 10) || f[4] != "unbounded" {
		t.Errorf("row %q; want jobs/watched, token %d, owner, held for, unbounded", f, h.token)
	}
	// Two refreshes later (held for has grown by one interval), the screen
	// still shows one table, where the command line was: redrawn in place.
	first := heldFor(screen, "jobs/watched")
	screen, _ = tm.await("the holder held longer", time.Minute, func(s string) bool {
		return heldFor(s, "jobs/watched") >= first+interval.Seconds()
	})
	lines := strings.Split(screen, "\n")
	if n := strings.Count(screen, "KEY  "); n != 1 || !strings.HasPrefix(lines[0], "distlock status on file://"+e.dir+", every 1s: ") {
		t.Errorf("after several refreshes the screen shows %d tables, first line %q; want one, under the title:\n%s", n, lines[0], screen)
	}

	h.release()
	_, took = tm.await("the holder gone", within, func(s string) bool {
		return row(s, "jobs/watched") == nil && strings.Contains(s, "no lock held")
	})
	t.Logf("the holder went after %v", took)

	tm.run("send-keys", "-t", "watch", "C-c")
	tm.await("status ended with 0 by Ctrl-C", time.Minute, func(s string) bool { return strings.Contains(s, "exit=0") })
}

// Not on a terminal, status --watch prints one plain table per refresh,
// each under a line naming the service and the time and followed by an
// empty line, no faster than the interval; SIGINT ends it with status 0.
func TestStatusWatchPlain(t *testing.T) {
	e := newEnv(t)
	h := e.hold("jobs/a")
	start := time.Now()
	s := e.start(e.command("status", "--watch", "--interval", "100ms"))
	title := "distlock status on file://" + e.dir + ", every 100ms: "
	waitFor(t, "three listings", func() bool { return len(listings(s.stdout.String(), title)) >= 3 })
	h.release()
	waitFor(t, "a listing without the holder", func() bool { return strings.HasSuffix(s.stdout.String(), "\n\nno lock held\n\n") })
	s.cmd.Process.Signal(os.Interrupt)
	res := e.wait(s)
	elapsed := time.Since(start)
	if res.code != 0 || res.stderr != "" {
		t.Errorf("status --watch ended by SIGINT: exit %d, stderr %q; want 0, nothing", res.code, res.stderr)
	}
	if strings.ContainsAny(res.stdout, "\x1b\r") {
		t.Errorf("plain output has terminal sequences: %q", res.stdout)
	}
	ls := listings(res.stdout, title)
	if most := int(elapsed/(100*time.Millisecond)) + 1; len(ls) > most {
		t.Errorf("%d listings in %v, more than one per 100ms", len(ls), elapsed)
	}
	sawHolder := false
	for i, l := range ls {
		lines := strings.Split(l, "\n")
		if len(lines) < 4 || lines[1] != "" || lines[len(lines)-2] != "" || lines[len(lines)-1] != "" {
			t.Fatalf("listing %d is %q; want the title, an empty line, the table and an empty line", i, l)
		}
		if _, err := time.ParseInLocation(time.DateTime, strings.TrimPrefix(lines[0], title), time.Local); err != nil {
			t.Errorf("listing %d: title %q does not end with the time: %v", i, lines[0], err)
		}
		switch body := lines[2 : len(lines)-2]; {
		case len(body) == 1 && body[0] == "no lock held":
			if i != len(ls)-1 {
				t.Errorf("listing %d, before the release, holds nothing: %q", i, l)
			}
		case len(body) == 2 && strings.HasPrefix(body[0], "KEY ") && strings.HasPrefix(body[1], fmt.Sprintf("jobs/a  %d  ", h.token)):
			sawHolder = true
		default:
			t.Errorf("listing %d: %q; want the table of jobs/a, or none held", i, l)
		}
	}
	if !sawHolder {
		t.Errorf("no listing shows the holder: %q", res.stdout)
	}
}

// listings splits the output of a plain watch into its listings, each
// beginning with title.
func listings(out, title string) []string {
	var ls []string
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(l, title) || len(ls) == 0 {
			ls = append(ls, "")
		}
		ls[len(ls)-1] += l
	}
	return ls
}

// With --json, --watch prints one JSON array per refresh, a line each.
func TestStatusWatchJSON(t *testing.T) {
	e := newEnv(t)
	h := e.hold("jobs/j")
	s := e.start(e.command("status", "--watch", "--json", "--interval", "100ms", "jobs/"))
	waitFor(t, "two listings", func() bool { return strings.Count(s.stdout.String(), "\n") >= 2 })
	s.cmd.Process.Signal(syscall.SIGTERM)
	res := e.wait(s)
	if res.code != 0 || res.stderr != "" {
		t.Errorf("status --watch --json ended by SIGTERM: exit %d, stderr %q; want 0, nothing", res.code, res.stderr)
	}
	for i, line := range strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n") {
		var doc []struct {
			Key   string `json:"key"`
			Token uint64 `json:"token,string"`
		}
		if err := json.Unmarshal([]byte(line), &doc); err != nil || len(doc) != 1 || doc[0].Key != "jobs/j" || doc[0].Token != h.token {
			t.Errorf("line %d: %q (%v); want an array of jobs/j with token %d", i, line, err, h.token)
		}
	}
}

// On a terminal, the watch's only terminal sequences are its own: keys
// and owners from the lock service are escaped as in the one-off table.
func TestStatusWatchEscapesServerData(t *testing.T) {
	e := newEnv(t)
	r := testserver.StartRedis(t)
	key := "jobs/\x1b[2J\x1b]0;pwned\x07"
	value := fmt.Sprintf("secret|7|%d|0|%s", time.Now().UnixMilli(), "evil\nforged/key  99  x  1.0s  1.0s")
	if _, err := r.Do("SET", "distlock:{"+key+"}:lock", value, "PX", "60000"); err != nil {
		t.Fatal(err)
	}
	p := e.startPty("sh", `exec "$DL" --backend redis://`+r.Addr+` status --watch --interval 100ms`)
	waitFor(t, "two redraws", func() bool { return strings.Count(p.out.String(), "\x1b[H") >= 2 })
	p.shell.Process.Signal(os.Interrupt)
	p.wait(t) // exit 0
	out := p.out.String()
	rest := strings.NewReplacer("\x1b[H", "", "\x1b[2J", "", "\x1b[K", "", "\x1b[J", "", "\r\n", "\n").Replace(out)
	if strings.ContainsAny(rest, "\x1b\x07\r") {
		t.Errorf("the watch printed control characters of its own: %q", out)
	}
	quoted := false
	for _, l := range strings.Split(rest, "\n") {
		quoted = quoted || strings.HasPrefix(l, `"jobs/\x1b[2J\x1b]0;pwned\a"  `) && strings.Contains(l, `  "evil\nforged/key  99  x  1.0s  1.0s"  `)
	}
	if !quoted {
		t.Errorf("no row with the key and owner quoted: %q", rest)
	}
}

// A terminal that cannot move the cursor (TERM=dumb) gets the plain
// listings.
func TestStatusWatchDumbTerminal(t *testing.T) {
	e := newEnv(t)
	p := e.startPty("sh", `TERM=dumb exec "$DL" status --watch --interval 100ms`)
	waitFor(t, "two listings", func() bool { return strings.Count(p.out.String(), "distlock status on ") >= 2 })
	p.shell.Process.Signal(os.Interrupt)
	p.wait(t) // exit 0
	if out := p.out.String(); strings.Contains(out, "\x1b") || !strings.Contains(out, "\r\n\r\nno lock held\r\n\r\n") {
		t.Errorf("on a dumb terminal: %q; want plain listings", out)
	}
}

// A watch outlives the lock service's failures: each is said, and the next
// listing tries again. A service that fails the first listing ends the
// watch as it ends a one-off status.
func TestStatusWatchOutlivesFailures(t *testing.T) {
	e := newEnv(t)
	if res := e.run("--backend", fmt.Sprintf("redis://127.0.0.1:%d", testserver.FreePort(t)), "status", "--watch"); res.code != cli.ExitUnavailable {
		t.Errorf("status --watch on a service that is down: exit %d, stderr %q; want %d", res.code, res.stderr, cli.ExitUnavailable)
	}
	r := testserver.StartRedis(t)
	if _, err := r.Do("SET", "distlock:{jobs/r}:lock", fmt.Sprintf("secret|7|%d|0|me", time.Now().UnixMilli()), "PX", "60000"); err != nil {
		t.Fatal(err)
	}
	s := e.start(e.command("--backend", "redis://"+r.Addr, "status", "--watch", "--interval", "100ms"))
	waitFor(t, "a listing of jobs/r", func() bool {
		f := row(s.stdout.String(), "jobs/r")
		return len(f) == 5 && f[1] == "7" && f[2] == "me"
	})
	r.Kill()
	waitFor(t, "the failure said", func() bool { return strings.Contains(s.stderr.String(), "; trying again in 100ms\n") })
	r.Restart(t) // without the key: the server keeps nothing on disk
	waitFor(t, "a listing after the restart", func() bool { return strings.HasSuffix(s.stdout.String(), "\n\nno lock held\n\n") })
	s.cmd.Process.Signal(os.Interrupt)
	res := e.wait(s)
	if res.code != 0 || strings.Count(res.stderr, "\n") != strings.Count(res.stderr, "; trying again in 100ms\n") ||
		strings.Count(res.stderr, "distlock: ") != strings.Count(res.stderr, "\n") {
		t.Errorf("exit %d, stderr %q; want 0, and the failures, one line each, said once each", res.code, res.stderr)
	}
}

// --interval goes with --watch, and is not so short as to hammer the lock
// service.
func TestStatusWatchFlags(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{
		{"status", "--interval", "2s"},
		{"status", "--watch", "--interval", "10ms"},
		{"status", "--watch", "--interval", "-1s"},
	} {
		if res := e.run(args...); res.code != cli.ExitUsage || !strings.Contains(res.stderr, "--interval") {
			t.Errorf("%q: exit %d, stderr %q; want %d, about --interval", args, res.code, res.stderr, cli.ExitUsage)
		}
	}
}

//go:build linux

package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/zklock"
)

// mustShare lists the lock services whose backends grant shared locks:
// their rows of the shared-lock tests must run, and fail if the backend
// stops implementing driver.SharedLocks. A row of a service not listed
// here runs when its backend implements driver.SharedLocks, and is
// skipped, saying why, when it does not; with CI=true a row that runs
// but is not listed fails, so that the list keeps up.
var mustShare = []string{"memory", "file", "redis", "etcd", "zk", "postgres", "postgres-lease", "gateway"}

// sharedBackend is a lock service for the shared-lock tests: those of
// the election tests but redis-cluster (as the run tests) and redlock,
// which refuses shared locks (TestRedlockRefusesSharedLocks).
type sharedBackend struct {
	name string
	// impls are the backends that must grant shared locks for the row to
	// run: the one distlock opens, and for a gateway the one it serves.
	impls []driver.Backend
	start func(t *testing.T, e *env) *candidates
}

func sharedBackends() []sharedBackend {
	impl := map[string][]driver.Backend{
		"memory":         {(*memlock.Backend)(nil)},
		"file":           {(*filelock.Backend)(nil)},
		"redis":          {(*redislock.Backend)(nil)},
		"etcd":           {(*etcdlock.Backend)(nil)},
		"zk":             {(*zklock.Backend)(nil)},
		"postgres":       {(*pglock.Backend)(nil)},
		"postgres-lease": {(*pglock.Backend)(nil)},
		"gateway":        {(*gatewaylock.Backend)(nil), (*filelock.Backend)(nil)}, // distlock serve on file://
	}
	var bs []sharedBackend
	for _, b := range electBackends() {
		if is, ok := impl[b.name]; ok {
			bs = append(bs, sharedBackend{name: b.name, impls: is, start: b.start})
		}
	}
	return bs
}

// startShared starts the service sb for a test of shared locks, or
// skips the test, saying why, unless its backends implement
// driver.SharedLocks (checked before any server is started) and the
// service grants one (a shared try: a backend may refuse them in a mode,
// with errors.ErrUnsupported, which run says as a usage error). A service
// of mustShare fails instead of being skipped.
func startShared(t *testing.T, sb sharedBackend) *candidates {
	t.Helper()
	must := slices.Contains(mustShare, sb.name)
	for _, b := range sb.impls {
		if _, ok := b.(driver.SharedLocks); !ok {
			if must {
				t.Fatalf("%s is in mustShare, but %T does not implement driver.SharedLocks", sb.name, b)
			}
			t.Skipf("%s: %T does not implement driver.SharedLocks, so distlock run --shared is refused there; add %q to mustShare when it does", sb.name, b, sb.name)
		}
	}
	c := sb.start(t, newEnv(t))
	switch r := c.run("run", "--shared", "--no-wait", "probe", "--", "true"); {
	case r.code == cli.ExitUsage && strings.Contains(r.stderr, "cannot grant shared locks") && !must:
		t.Skipf("%s refuses shared locks: %s", sb.name, strings.TrimSpace(r.stderr))
	case r.code != 0:
		t.Fatalf("%s: run --shared --no-wait on a free key: exit %d, stderr %q; want 0", sb.name, r.code, r.stderr)
	}
	if !must && os.Getenv("CI") == "true" {
		t.Errorf("%s grants shared locks but is not in mustShare: add it, so that its rows cannot be skipped", sb.name)
	}
	return c
}

// A lock service that every backend must grant shared locks is listed:
// mustShare names only services of the tests.
func TestMustShareNamesServices(t *testing.T) {
	t.Parallel()
	var names []string
	for _, sb := range sharedBackends() {
		names = append(names, sb.name)
	}
	for _, m := range mustShare {
		if !slices.Contains(names, m) {
			t.Errorf("mustShare names %q, which is not a service of the shared-lock tests (%q)", m, names)
		}
	}
}

// On every service that grants shared locks: two `run --shared` commands
// of a key run at once (each waits, with a deadline, for the other to
// run); status lists both as shared, in the table and in --json, and
// status --readers shows them; a run of the key without --shared (the
// writer) is refused with --no-wait and, waiting, runs only once both
// have ended, with a greater token, while the shared runs that ask
// after it wait too.
func TestSharedRuns(t *testing.T) {
	t.Parallel()
	for _, sb := range sharedBackends() {
		t.Run(sb.name, func(t *testing.T) {
			runShared(t, startShared(t, sb))
		})
	}
}

func runShared(t *testing.T, c *candidates) {
	t.Helper()
	const key = "data/catalog"
	in, release := c.path("in"), c.path("go")
	if err := os.Mkdir(in, 0o755); err != nil {
		t.Fatal(err)
	}
	// A reader marks that it runs, waits (a minute at most: exit 99) for
	// the other reader to run too and says it met it, then waits to be
	// told to end, and unmarks itself.
	reader := func(self, other string) string {
		return fmt.Sprintf(`[ "$DISTLOCK_KEY" = %[5]s ] || exit 97
: > %[1]s/%[2]s.in
echo $DISTLOCK_TOKEN > %[1]s/%[2]s.token
end=$(($(date +%%s) + 60))
until [ -e %[1]s/%[3]s.in ]; do
  [ $(date +%%s) -lt $end ] || { echo "%[2]s: %[3]s never ran with it" >&2; exit 99; }
  sleep 0.01
done
: > %[1]s/%[2]s.met
end=$(($(date +%%s) + 600))
until [ -e %[4]s ]; do
  [ $(date +%%s) -lt $end ] || { echo "%[2]s: never told to end" >&2; exit 98; }
  sleep 0.01
done
rm %[1]s/%[2]s.in`, sh(in), self, other, sh(release), key)
	}
	a := c.start("run", "--shared", key, "--", "sh", "-c", reader("a", "b"))
	b := c.start("run", "--shared", key, "--", "sh", "-c", reader("b", "a"))
	for _, r := range []string{"a", "b"} {
		waitFor(t, "reader "+r+" to run with the other", func() bool {
			_, err := os.Stat(filepath.Join(in, r+".met"))
			return err == nil
		})
	}
	tokens := map[uint64]bool{uint64(readInt(t, filepath.Join(in, "a.token"))): true, uint64(readInt(t, filepath.Join(in, "b.token"))): true}
	if len(tokens) != 2 {
		t.Errorf("both readers have token %v", tokens)
	}

	// status lists both, shared, in --json and in the table.
	r := c.run("status", "--json", key)
	var listed []struct {
		Key    string
		Token  uint64 `json:",string"`
		Shared bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || r.code != 0 {
		t.Fatalf("status --json: exit %d, stdout %q, stderr %q: %v", r.code, r.stdout, r.stderr, err)
	}
	if len(listed) != 2 || !listed[0].Shared || !listed[1].Shared || !tokens[listed[0].Token] || !tokens[listed[1].Token] ||
		listed[0].Key != key || listed[1].Key != key || listed[0].Token >= listed[1].Token {
		t.Errorf("status --json: %s; want the readers of tokens %v, shared, by token", r.stdout, tokens)
	}
	r = c.run("status", key)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "KEY") || strings.Fields(lines[0])[1] != "MODE" {
		t.Fatalf("status: exit %d, stdout %q, stderr %q; want a header with MODE and two rows", r.code, r.stdout, r.stderr)
	}
	for _, l := range lines[1:] {
		var tok uint64
		f := strings.Fields(l)
		if len(f) > 2 {
			fmt.Sscan(f[2], &tok)
		}
		if len(f) < 3 || f[0] != key || f[1] != "shared" || !tokens[tok] {
			t.Errorf("status row %q; want %s, shared, a reader's token", l, key)
		}
	}
	r = c.run("status", "--readers", key, "--json")
	var doc struct {
		Key     string
		Holder  *json.RawMessage
		Readers []struct {
			Token  uint64 `json:",string"`
			Shared bool
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 {
		t.Fatalf("status --readers --json: exit %d, stdout %q, stderr %q: %v", r.code, r.stdout, r.stderr, err)
	}
	if doc.Key != key || doc.Holder != nil || len(doc.Readers) != 2 || !doc.Readers[0].Shared || !tokens[doc.Readers[0].Token] || !tokens[doc.Readers[1].Token] {
		t.Errorf("status --readers --json: %s; want no holder and the readers of tokens %v", r.stdout, tokens)
	}
	r = c.run("status", "--readers", key)
	if r.code != 0 || !strings.Contains(r.stdout, "not held exclusively, 2 shared") || strings.Count(r.stdout, " shared ") != 2 {
		t.Errorf("status --readers: exit %d, stdout %q, stderr %q; want the key not held exclusively and two shared rows", r.code, r.stdout, r.stderr)
	}

	// The writer: refused while they read, then waits for them.
	r = c.run("run", "--no-wait", key, "--", "true")
	if r.code != cli.ExitNotAcquired || !strings.Contains(r.stderr, "is held by 2 shared locks") {
		t.Errorf("run --no-wait without --shared: exit %d, stderr %q; want %d, held by 2 shared locks", r.code, r.stderr, cli.ExitNotAcquired)
	}
	writer := fmt.Sprintf(`for f in %[1]s/*.in; do
  [ -e "$f" ] && { echo "the writer ran while $f" >&2; exit 96; }
done
echo $DISTLOCK_TOKEN > %[1]s/w.token`, sh(in))
	w := c.start("run", key, "--", "sh", "-c", writer)
	// A waiting writer turns shared tries away: that says it waits.
	waitFor(t, "the writer to wait", func() bool {
		r := c.run("run", "--shared", "--no-wait", key, "--", "true")
		switch {
		case r.code == cli.ExitNotAcquired && strings.Contains(r.stderr, "held or awaited by a run without --shared"):
			return true
		case r.code != 0:
			t.Fatalf("run --shared --no-wait: exit %d, stderr %q; want 0, or %d while the writer waits", r.code, r.stderr, cli.ExitNotAcquired)
		}
		return false
	})
	if _, err := os.Stat(filepath.Join(in, "w.token")); err == nil {
		t.Error("the writer ran while the readers held the key")
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for n, p := range []*proc{a, b} {
		if r := p.wait(); r.code != 0 {
			t.Errorf("reader %d: exit %d, stderr %q", n, r.code, r.stderr)
		}
	}
	if r := w.wait(); r.code != 0 {
		t.Fatalf("the writer: exit %d, stderr %q", r.code, r.stderr)
	}
	tok := uint64(readInt(t, filepath.Join(in, "w.token")))
	for old := range tokens {
		if tok <= old {
			t.Errorf("the writer's token %d is not above the reader's %d", tok, old)
		}
	}
}

// On every service that grants shared locks, with the command's defaults
// (no --ttl, no --grace), a shared run's command that runs through two
// renewals of its lock keeps it: a writer is still refused, status
// --readers still shows it, and the command ends with its own status. A
// run that ends for the lock's deadline (a stall of the machine: see
// TestRunOutlastsRenewals) is made again, up to outlastRuns times.
func TestSharedRunOutlastsRenewals(t *testing.T) {
	t.Parallel()
	for _, sb := range sharedBackends() {
		t.Run(sb.name, func(t *testing.T) {
			c := startShared(t, sb)
			for run := 1; ; run++ {
				finish, tok := c.path(fmt.Sprintf("finish%d", run)), c.path(fmt.Sprintf("token%d", run))
				s := c.start("--verbose", "run", "--shared", "k", "--", "sh", "-c",
					fmt.Sprintf(`echo $DISTLOCK_TOKEN > %s; while [ ! -e %s ]; do sleep 0.05; done; echo ran; exit 7`, sh(tok), sh(finish)))
				waitFor(t, "two renewals, or the command's end", func() bool {
					out := s.stderr.String()
					return strings.Count(out, `msg="distlock: renewed"`) >= 2 || strings.Contains(out, `msg="command ended"`)
				})
				token := readInt(t, tok)
				kept := true
				if r := c.run("run", "--no-wait", "k", "--", "true"); r.code != cli.ExitNotAcquired {
					kept = false
					t.Logf("run --no-wait without --shared after two renewals: exit %d, stderr %q", r.code, r.stderr)
				}
				r := c.run("status", "--readers", "k", "--json")
				var doc struct {
					Holder  *json.RawMessage
					Readers []struct {
						Token  int `json:",string"`
						Shared bool
					}
				}
				if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.Holder != nil || len(doc.Readers) != 1 ||
					doc.Readers[0].Token != token || !doc.Readers[0].Shared {
					kept = false
					t.Logf("status --readers after two renewals: exit %d, stdout %q, stderr %q; want the one reader of token %d", r.code, r.stdout, r.stderr, token)
				}
				if err := os.WriteFile(finish, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				r = s.wait()
				switch {
				case r.code == 7 && r.stdout == "ran\n" && kept:
					return
				case r.code == 7 && r.stdout == "ran\n":
					t.Fatalf("a shared run through two renewals on %s ended well, but its lock was not seen held after them; stderr:\n%s", sb.name, r.stderr)
				case r.code != cli.ExitLockLost || !strings.Contains(r.stderr, "of its deadline without a confirmed renewal"):
					t.Fatalf("a shared run through two renewals on %s: exit %d, stdout %q; want 7 and %q; stderr:\n%s", sb.name, r.code, r.stdout, "ran\n", r.stderr)
				case run == outlastRuns:
					t.Fatalf("a shared run through two renewals on %s: exit %d for the lock's deadline in each of %d runs; want 7 and %q; the last stderr:\n%s", sb.name, r.code, run, "ran\n", r.stderr)
				}
				t.Logf("run %d on %s ended for the lock's deadline (exit %d); running it again; stderr:\n%s", run, sb.name, r.code, r.stderr)
			}
		})
	}
}

// --shared names a lock: with --permits it is a usage error, and
// status --readers takes one KEY alone.
func TestSharedBadInput(t *testing.T) {
	e := newEnv(t)
	marker := e.path("ran")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--shared", "--permits", "2", "k", "--", "touch", marker}, "--shared and --permits exclude each other"},
		{[]string{"run", "--permits", "2", "--shared", "k", "--", "touch", marker}, "--shared and --permits exclude each other"},
		{[]string{"run", "--shared", "--slots", "k", "--", "touch", marker}, "--slots needs --permits"},
		{[]string{"run", "--shared", "", "--", "touch", marker}, "invalid key"},
		{[]string{"status", "--readers", "k", "jobs/"}, "--readers KEY takes no PREFIX"},
		{[]string{"status", "--readers", "k", "--watch"}, "--readers does not take --watch"},
		{[]string{"status", "--readers", ""}, "--readers needs a KEY"},
		{[]string{"status", "--readers", "k", "--semaphore", "k"}, "--semaphore and --readers exclude each other"},
	} {
		r := e.run(tc.args...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, cli.ExitUsage, tc.want)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a command ran")
	}
}

// Redlock grants no shared locks: `run --shared` is refused with a usage
// error that says so, as the Client's ErrUnsupported does, and runs
// nothing; status --readers says so too.
func TestRedlockRefusesSharedLocks(t *testing.T) {
	e := newEnv(t)
	_, backend := redlockNodes(t, 3, "")
	marker := e.path("ran")
	r := e.run("--backend", backend, "run", "--shared", "k", "--", "touch", marker)
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "cannot grant shared locks (--shared)") || !strings.Contains(r.stderr, "unsupported") {
		t.Errorf("exit %d, stderr %q; want %d and that it cannot grant shared locks (unsupported)", r.code, r.stderr, cli.ExitUsage)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
	r = e.run("--backend", backend, "status", "--readers", "k")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "cannot grant shared locks") {
		t.Errorf("status --readers: exit %d, stderr %q; want %d and that it cannot grant shared locks", r.code, r.stderr, cli.ExitUsage)
	}
	// The exclusive lock still works there, and holds nothing after.
	if r := e.run("--backend", backend, "run", "k", "--", "true"); r.code != 0 {
		t.Errorf("run without --shared: exit %d, stderr %q", r.code, r.stderr)
	}
}

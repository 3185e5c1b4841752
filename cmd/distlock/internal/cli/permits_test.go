//go:build linux

package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distlock/distlock/testserver"
)

// On the default file:// service, `run --permits 2 --slots` lets two
// commands run at once, each told its own slot, and no third.
func TestFilePermits(t *testing.T) {
	e := newEnv(t)
	runPermits(t, e, "file://"+e.dir, true)
}

// A permit names its limit: bad limits and --slots alone are usage
// errors, and a service without permits says so.
func TestPermitsBadInput(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--permits", "0", "k", "--", "true"}, "--permits 0 is not in [1, 65536]"},
		{[]string{"run", "--permits", "-1", "k", "--", "true"}, "--permits -1 is not in [1, 65536]"},
		{[]string{"run", "--permits", "65537", "k", "--", "true"}, "--permits 65537 is not in [1, 65536]"},
		{[]string{"run", "--slots", "k", "--", "true"}, "--slots needs --permits"},
		{[]string{"status", "--semaphore", "k", "jobs/"}, "--semaphore NAME takes no PREFIX"},
		{[]string{"status", "--semaphore", "k", "--watch"}, "--semaphore does not take --watch"},
		{[]string{"status", "--semaphore", ""}, "--semaphore needs a NAME"},
	} {
		r := e.run(tc.args...)
		if r.code != 64 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 64 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// Redlock grants no permits: `run --permits` is refused with a usage
// error that says so, and runs nothing.
func TestRedlockRefusesPermits(t *testing.T) {
	e := newEnv(t)
	_, backend := redlockNodes(t, 3, "")
	marker := e.path("ran")
	r := e.run("--backend", backend, "run", "--permits", "2", "k", "--", "touch", marker)
	if r.code != 64 || !strings.Contains(r.stderr, "cannot grant permits") {
		t.Errorf("exit %d, stderr %q; want 64 and that it cannot grant permits", r.code, r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
	r = e.run("--backend", backend, "status", "--semaphore", "k")
	if r.code != 64 || !strings.Contains(r.stderr, "cannot grant permits") {
		t.Errorf("status: exit %d, stderr %q; want 64 and that it cannot grant permits", r.code, r.stderr)
	}
}

// On Redis: as on file://.
func TestRedisPermits(t *testing.T) {
	runPermits(t, newEnv(t), "redis://"+testserver.StartRedis(t).Addr, true)
}

// runPermits holds two permits of a semaphore of limit 2 on backend with
// commands that each wait until both run, so that the limit is reached;
// then a third run cannot get one (--no-wait: exit 75), a run naming
// another limit is refused (exit 64) where the service stores the limit
// (storedLimit), and status --semaphore shows both permits with their
// slots. Released, the permits are granted again with greater tokens.
func runPermits(t *testing.T, e *env, backend string, storedLimit bool) {
	t.Helper()
	in, release := e.path("in"), e.path("go")
	if err := os.Mkdir(in, 0o755); err != nil {
		t.Fatal(err)
	}
	// Each command marks its slot (O_EXCL: a slot held twice fails it),
	// waits until the other runs too, then until told to end.
	script := fmt.Sprintf(`set -C
: > %[1]s/$DISTLOCK_SLOT || { echo "slot $DISTLOCK_SLOT held twice" >&2; exit 99; }
echo $DISTLOCK_TOKEN > %[1]s/$DISTLOCK_SLOT.token
until [ -e %[2]s ]; do sleep 0.01; done
rm %[1]s/$DISTLOCK_SLOT`, sh(in), sh(release))
	run := func() *started {
		return e.start(e.command("--backend", backend, "run", "--permits", "2", "--slots", "backups", "--", "sh", "-c", script))
	}
	a, b := run(), run()
	for _, slot := range []string{"0", "1"} {
		waitFor(t, "slot "+slot+"'s command to run", func() bool {
			_, err := os.Stat(filepath.Join(in, slot+".token"))
			return err == nil
		})
	}
	tokens := map[int]bool{readInt(t, filepath.Join(in, "0.token")): true, readInt(t, filepath.Join(in, "1.token")): true}

	r := e.run("--backend", backend, "run", "--permits", "2", "--no-wait", "backups", "--", "true")
	if r.code != 75 || !strings.Contains(r.stderr, `every permit of semaphore "backups" is held`) {
		t.Errorf("a third run: exit %d, stderr %q; want 75, every permit held", r.code, r.stderr)
	}
	if storedLimit {
		r = e.run("--backend", backend, "run", "--permits", "3", "--no-wait", "backups", "--", "true")
		if r.code != 64 || !strings.Contains(r.stderr, "limit is 2, not 3") {
			t.Errorf("a run naming limit 3: exit %d, stderr %q; want 64, the limit is 2", r.code, r.stderr)
		}
	}
	r = e.run("--backend", backend, "status", "--semaphore", "backups", "--json")
	var doc struct {
		Key     string
		Limit   *int
		Holders []struct {
			Token string
			Slot  *int
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 {
		t.Fatalf("status --semaphore: exit %d, stdout %q, stderr %q: %v", r.code, r.stdout, r.stderr, err)
	}
	slots := map[int]bool{}
	for _, h := range doc.Holders {
		var tok int
		fmt.Sscan(h.Token, &tok)
		if h.Slot == nil || !tokens[tok] {
			t.Errorf("status lists %+v; want the permits of tokens %v, with slots", h, tokens)
			continue
		}
		slots[*h.Slot] = true
	}
	if doc.Key != "semaphore/backups" || len(doc.Holders) != 2 || !slots[0] || !slots[1] ||
		storedLimit != (doc.Limit != nil && *doc.Limit == 2) {
		t.Errorf("status --semaphore --json: %s; want the key semaphore/backups, both permits with slots 0 and 1, limit 2 if stored", r.stdout)
	}
	r = e.run("--backend", backend, "status", "--semaphore", "backups")
	if r.code != 0 || !strings.Contains(r.stdout, "2 held, 0 waiting") {
		t.Errorf("status --semaphore: exit %d, stdout %q", r.code, r.stdout)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*started{a, b} {
		if r := e.wait(s); r.code != 0 {
			t.Errorf("a permit's run: exit %d, stderr %q", r.code, r.stderr)
		}
	}
	r = e.run("--backend", backend, "run", "--permits", "2", "backups", "--", "sh", "-c", `echo "$DISTLOCK_KEY $DISTLOCK_TOKEN ${DISTLOCK_SLOT-none}"`)
	var key, slot string
	var tok int
	fmt.Sscan(r.stdout, &key, &tok, &slot)
	for old := range tokens {
		if tok <= old {
			t.Errorf("the next permit's token %d is not above %d", tok, old)
		}
	}
	if r.code != 0 || key != "semaphore/backups" || slot != "none" {
		t.Errorf("a run without --slots: exit %d, stdout %q, stderr %q; want semaphore/backups, a token, no slot", r.code, r.stdout, r.stderr)
	}
}

// A run inside another run's command gives its command its own key and
// token, once each, and no slot of the outer permit: a program reads the
// first of two variables of one name.
func TestNestedRunEnvironment(t *testing.T) {
	e := newEnv(t)
	show := `env | grep '^DISTLOCK_[KTS]' | sort`
	r := e.run("run", "--permits", "2", "--slots", "outer", "--", bin, "run", "inner", "--", "sh", "-c", show)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || lines[0] != "DISTLOCK_KEY=inner" || !strings.HasPrefix(lines[1], "DISTLOCK_TOKEN=") {
		t.Errorf("the inner command's environment: %q; want DISTLOCK_KEY=inner and its token, once each, and no DISTLOCK_SLOT", r.stdout)
	}
	r = e.run("run", "outer2", "--", bin, "run", "--permits", "2", "--slots", "inner2", "--", "sh", "-c", show)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 || lines[0] != "DISTLOCK_KEY=semaphore/inner2" || lines[1] != "DISTLOCK_SLOT=0" {
		t.Errorf("exit %d, the inner permit's environment: %q; want its key, slot 0 and token, once each", r.code, r.stdout)
	}
}

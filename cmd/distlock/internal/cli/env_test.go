//go:build linux

package cli_test

import (
	"strings"
	"testing"

	"github.com/distlock/distlock/testserver"
)

// The command gets DISTLOCK_BACKEND without the password (nor password
// query parameters): it reaches the same service but cannot reuse
// distlock's credentials, nor print them. Its supervisor gets no
// DISTLOCK_BACKEND at all.
func TestCommandEnvironmentHasNoPassword(t *testing.T) {
	e := newEnv(t)
	const secret = "s3cretpw"
	r := testserver.StartRedis(t, testserver.WithRedisConfig("user alice on >"+secret+" ~* &* +@all"))
	cmd := e.command("run", "k", "--", "sh", "-c", `echo "$DISTLOCK_BACKEND"; tr '\0' '\n' </proc/$PPID/environ | grep DISTLOCK_ || echo "supervisor: none"`)
	cmd.Env = append(cmd.Env, "DISTLOCK_BACKEND=redis://alice:"+secret+"@"+r.Addr+"/0")
	res := e.wait(e.start(cmd))
	if res.code != 0 {
		t.Fatalf("exit %d, stderr %q", res.code, res.stderr)
	}
	want := "redis://alice@" + r.Addr + "/0"
	if lines := strings.Split(strings.TrimSpace(res.stdout), "\n"); len(lines) != 2 || lines[0] != want || lines[1] != "supervisor: none" {
		t.Errorf("the command and its supervisor see %q; want %q, then no DISTLOCK_ variable", res.stdout, want)
	}
	if strings.Contains(res.stdout+res.stderr, secret) {
		t.Errorf("the password reached the command: %q", res.stdout)
	}
}

// The command gets DISTLOCK_BACKEND naming the lock service that distlock
// used, whether --backend or the environment named it, without the
// password: with --backend, not the DISTLOCK_BACKEND that distlock
// inherited (here the test's lock directory), which names another
// service. A URL that cannot be cleaned with certainty (a password with
// "?" in it) is not passed at all, and distlock says so.
func TestCommandEnvironmentNamesTheService(t *testing.T) {
	e := newEnv(t)
	const secret = "s3cretpw"
	r := testserver.StartRedis(t, testserver.WithRedisConfig("user alice on >"+secret+" ~* &* +@all", "user bob on >pa?ss ~* &* +@all"))
	show := []string{"--", "sh", "-c", `echo "${DISTLOCK_BACKEND-unset}"`}
	for _, c := range []struct {
		name    string
		args    []string
		want    string
		warning string // on stderr
	}{
		{"flag", []string{"--backend", "redis://alice:" + secret + "@" + r.Addr + "/0"}, "redis://alice@" + r.Addr + "/0", ""},
		{"flag naming the default directory", []string{"--backend", "file://" + e.dir}, "file://" + e.dir, ""},
		{"environment", nil, "file://" + e.dir, ""},
		{"flag that cannot be cleaned", []string{"--backend", "redis://bob:pa?ss@" + r.Addr + "/0"}, "unset",
			"distlock: the command gets no DISTLOCK_BACKEND: redis://(redacted) cannot be passed on without its password; a distlock inside the command uses file:// unless given --backend\n"},
	} {
		args := append(append(append([]string{}, c.args...), "run", "k"), show...)
		res := e.run(args...)
		if res.code != 0 || strings.TrimSpace(res.stdout) != c.want || res.stderr != c.warning {
			t.Errorf("%s: exit %d, the command sees %q, stderr %q; want 0, %q, stderr %q", c.name, res.code, res.stdout, res.stderr, c.want, c.warning)
		}
		if strings.Contains(res.stdout+res.stderr, secret) || strings.Contains(res.stdout+res.stderr, "pa?ss") {
			t.Errorf("%s: a password reached the command or the output: %q %q", c.name, res.stdout, res.stderr)
		}
	}
}

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

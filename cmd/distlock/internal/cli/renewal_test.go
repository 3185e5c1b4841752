//go:build linux

package cli_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/testserver"
)

// On every backend, with the command's defaults (no --ttl, no --grace, the
// URL's own settings), a command that runs through two renewals of its
// lock ends with its own status and output: the supervisor's SIGTERM
// comes only when the lock's deadline nears without a confirmed renewal,
// as the Client keeps that deadline and renews it (5/12 of a ZooKeeper
// session of 10s, say, whatever --ttl is), never before a healthy renewal.
//
// A renewal is only as timely as the machine lets it be: a stall of
// distlock or of the service longer than the lock's at-risk window brings
// the deadline near without a confirmed renewal, and the supervisor is
// then right to end the command, and distlock to exit 76. So a run that
// ends so is made again, up to outlastRuns times, and the test fails if
// every run ends so: a supervisor that times its SIGTERM from --ttl rather
// than the lock's deadline ends every run on ZooKeeper (the lock's TTL
// is 5/12 of its session timeout of 10s). Any other outcome fails at once.
func TestRunOutlastsRenewals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		backend func(t *testing.T, e *env) string
	}{
		{"file", func(t *testing.T, e *env) string { return "file://" + e.dir }},
		{"redis", func(t *testing.T, e *env) string { return "redis://" + testserver.StartRedis(t).Addr }},
		{"redlock", func(t *testing.T, e *env) string {
			var addrs []string
			for range 3 {
				addrs = append(addrs, testserver.StartRedis(t).Addr)
			}
			return "redlock://" + strings.Join(addrs, ",")
		}},
		{"etcd", func(t *testing.T, e *env) string { return "etcd://" + testserver.StartEtcd(t).Members[0].ClientAddr }},
		{"zk", func(t *testing.T, e *env) string {
			return "zk://" + testserver.StartZooKeeper(t).ConnectString() + "/locks"
		}},
		{"postgres", func(t *testing.T, e *env) string { return testserver.StartPostgres(t).DSN }},
		{"postgres-lease", func(t *testing.T, e *env) string {
			pg := testserver.StartPostgres(t)
			return fmt.Sprintf("%s&mode=lease&listen_host=127.0.0.1:%d", testserver.StartPgBouncer(t, pg).DSN, pg.Port)
		}},
		{"gateway", func(t *testing.T, e *env) string { return "distlock+" + e.serve().url }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			backend := c.backend(t, e)
			for run := 1; ; run++ {
				finish := e.path(fmt.Sprintf("finish%d", run))
				s := e.start(e.command("--verbose", "--backend", backend, "run", "k", "--", "sh", "-c",
					fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.05; done; echo ran; exit 7`, sh(finish))))
				waitFor(t, "two renewals, or the command's end", func() bool {
					out := s.stderr.String()
					return strings.Count(out, `msg="distlock: renewed"`) >= 2 || strings.Contains(out, `msg="command ended"`)
				})
				if err := os.WriteFile(finish, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				r := e.wait(s)
				switch {
				case r.code == 7 && r.stdout == "ran\n":
					return
				case r.code != cli.ExitLockLost || !strings.Contains(r.stderr, "of its deadline without a confirmed renewal"):
					t.Fatalf("a command through two renewals on %s: exit %d, stdout %q; want 7 and %q; stderr:\n%s", c.name, r.code, r.stdout, "ran\n", r.stderr)
				case run == outlastRuns:
					t.Fatalf("a command through two renewals on %s: exit %d for the lock's deadline in each of %d runs; want 7 and %q; the last stderr:\n%s", c.name, r.code, run, "ran\n", r.stderr)
				}
				t.Logf("run %d on %s ended for the lock's deadline (exit %d); running it again; stderr:\n%s", run, c.name, r.code, r.stderr)
			}
		})
	}
}

// outlastRuns is how many runs TestRunOutlastsRenewals makes on a backend
// before it fails.
const outlastRuns = 3

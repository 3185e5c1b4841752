//go:build linux

package cli_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/distlock/distlock/internal/testserver"
)

// On every backend, with the command's defaults (no --ttl, no --grace, the
// URL's own settings), a command that runs through two renewals of its
// lock ends with its own status and output: the supervisor's SIGTERM
// comes only when the lock's deadline nears without a confirmed renewal,
// as the Client keeps that deadline and renews it (a ZooKeeper session of
// 10s, say, whatever --ttl is), never before a healthy renewal.
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
			finish := e.path("finish")
			s := e.start(e.command("--verbose", "--backend", backend, "run", "k", "--", "sh", "-c",
				fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.05; done; echo ran; exit 7`, sh(finish))))
			waitFor(t, "two renewals, or the command's end", func() bool {
				out := s.stderr.String()
				return strings.Count(out, `msg="distlock: renewed"`) >= 2 || strings.Contains(out, `msg="command ended"`)
			})
			if err := os.WriteFile(finish, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if r := e.wait(s); r.code != 7 || r.stdout != "ran\n" {
				t.Errorf("a command through two renewals on %s: exit %d, stdout %q; want 7 and %q; stderr:\n%s", c.name, r.code, r.stdout, "ran\n", r.stderr)
			}
		})
	}
}

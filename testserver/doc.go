// Package testserver starts real Redis, etcd, ZooKeeper, PostgreSQL and
// PgBouncer servers for Go tests: distlock's own, and yours, when your
// code under a lock should meet the real service in its tests:
//
//	func TestJob(t *testing.T) {
//		r := testserver.StartRedis(t)
//		client := redis.NewClient(&redis.Options{Addr: r.Addr})
//		...
//	}
//
// Every server runs as a child process of the test binary, listens only on
// 127.0.0.1 on free ports, keeps its data and log files in directories from
// t.TempDir, and is stopped (and waited for) by t.Cleanup. Each server type
// embeds a *Process, which owns that life cycle for all of them: start,
// Stop (graceful), Kill (SIGKILL), Pause (SIGSTOP), Resume (SIGCONT) and
// Restart on the same ports and data directories, which makes the helpers
// suitable for crash, persistence and failover tests; the server types add
// only their command line, configuration file, readiness probe and client
// address.
//
// No server outlives the test process: child processes are started in their
// own process group and, on Linux, with a parent-death signal, so the kernel
// sends them SIGKILL when the test binary dies, even of SIGKILL, without
// running its cleanups (their own children, such as PostgreSQL's backends,
// exit when they see their parent gone). The kernel sends that signal when
// the thread that started the server exits, which the Go runtime does only
// for a goroutine that ends while locked to its thread
// (runtime.LockOSThread): do not start servers from such a goroutine.
//
// The server binaries come from the operating system. On Debian/Ubuntu they
// are installed by scripts/install-test-deps.sh of distlock's repository (packages redis-server,
// etcd-server, etcd-client, zookeeper, postgresql, pgbouncer, and gcc for
// the clock shim of WithRedisMovableClock and WithPostgresMovableClock,
// which moves a Redis or PostgreSQL server's wall clock under a test). When a binary
// is missing the test is skipped, or fails when the environment variable
// CI=true is set, so that CI cannot silently skip the integration tests.
// PostgreSQL and PgBouncer refuse to run as root: a test running as root
// runs them as the "postgres" user.
//
// Each Start function waits until the server answers its protocol (RESP PING,
// etcd /health, ZooKeeper ruok/srvr, the PostgreSQL startup handshake, also
// through PgBouncer) and fails the test with the tail of the server log if it
// does not become ready in time. A start that fails because a port was taken
// by another process is retried with new ports.
//
// The helpers use only the standard library; the package starts no goroutine
// that outlives the server it belongs to, so tests can use go.uber.org/goleak.
package testserver

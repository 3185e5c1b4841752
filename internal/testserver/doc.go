// Package testserver starts real Redis, etcd, ZooKeeper and PostgreSQL
// servers for Go tests.
//
// Every server runs as a child process of the test binary, listens only on
// 127.0.0.1 on free ports, keeps its data and log files in directories from
// t.TempDir, and is stopped (and waited for) by t.Cleanup. Child processes are
// started in their own process group and, on Linux, receive SIGKILL when the
// test binary dies, so no server outlives the test run.
//
// The server binaries come from the operating system. On Debian/Ubuntu they
// are installed by scripts/install-test-deps.sh (packages redis-server,
// etcd-server, etcd-client, zookeeper, postgresql). When a binary is missing
// the test is skipped, or fails when the environment variable CI=true is set,
// so that CI cannot silently skip the integration tests.
//
// Each Start function waits until the server answers its protocol (RESP PING,
// etcd /health, ZooKeeper ruok/srvr, PostgreSQL startup handshake) and fails
// the test with the tail of the server log if it does not become ready in
// time. A start that fails because a port was taken by another process is
// retried with new ports.
//
// Servers can be killed (SIGKILL), stopped (graceful), paused (SIGSTOP),
// resumed and restarted on the same ports and data directories, which makes
// the helpers suitable for crash, persistence and failover tests.
//
// The helpers use only the standard library; the package starts no goroutine
// that outlives the server it belongs to, so tests can use go.uber.org/goleak.
package testserver

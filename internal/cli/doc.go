// Package cli implements the distlock command: cmd/distlock calls Run.
//
//	distlock [--backend URL] [--verbose] run [--timeout D | --no-wait] [--ttl D] [--grace D] KEY -- COMMAND [ARG...]
//	distlock [--backend URL] status [--json] [PREFIX]
//
// # Backends
//
// --backend, or the DISTLOCK_BACKEND environment variable, names the lock
// service by URL. The default, file://, is the filelock backend in the
// per-user directory filelock.DefaultDir (file:///dir names another). The
// schemes redis, rediss, redis+sentinel, redlock, etcd, zk and postgres are
// reserved for the other backends and report that they are not available
// until they are wired into the registry (one line each, in backends.go).
// Passwords in URLs, and password-like query parameters, are never printed:
// messages and logs show URLs through redact.
//
// # run
//
// run waits for the lock (forever, or up to --timeout; --no-wait tries
// once), starts COMMAND with DISTLOCK_KEY and DISTLOCK_TOKEN added to its
// environment, and keeps the lock while it runs: the distlock.Client renews
// it every TTL/3 (--ttl, default 15s). When the command ends, the lock is
// released and distlock exits with the command's status.
//
// Loss: if the lock is lost while the command runs, the command gets
// SIGTERM, then SIGKILL after --grace (default 10s), and distlock exits 76.
// A command may be stopped only after its lock was lost: let it check
// DISTLOCK_TOKEN against fenced storage for the writes that matter.
//
// Signals: SIGINT, SIGTERM and SIGHUP sent to distlock are forwarded to the
// command, whose status distlock then returns; the lock is released on
// every path. The command runs in distlock's process group, so a Ctrl-C
// typed at a terminal reaches it directly as well as through distlock. A
// signal that arrives while distlock is still waiting ends the wait (exit
// 128+n) and the command is not started.
//
// Death of distlock: on Linux the command is started with a parent-death
// signal (SIGKILL) from a thread that stays alive until the command exits,
// so that if distlock is killed, the command, which would go on without a
// lock (another holder may start at once), is killed too. This reaches the
// command itself, not processes it started in the background; commands
// that fork should exec their last step or wait for their children. Other
// systems have no parent-death signal: there the command survives a killed
// distlock.
//
// # Exit codes
//
// The table is at ExitOK; in short: the command's status, 126/127 when it
// cannot be started, 128+n for a signal; 64 usage, 69 lock service failed,
// 70 internal error, 75 not acquired, 76 lock lost.
//
// # Status
//
// status lists holders through distlock.Lister: key, token, owner, how long
// held and the time left before the service expires the grant unless
// renewed ("unbounded" when it has no time bound, as with file://).
//
// Run is safe for concurrent use; each call parses its own flags.
package cli

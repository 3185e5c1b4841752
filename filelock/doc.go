// Package filelock is a distlock.Backend for processes on one host: each key
// is a lock file in a directory, held with flock(2). It is the default
// backend of the distlock command.
//
// # Safety model
//
// One host only. The directory must be on a local file system. On NFS or
// SMB, flock is emulated or not coherent between clients and the wake-ups
// below do not see other clients: do not use this package there.
//
// Exclusion is the kernel's: a grant is an exclusive flock on the key's lock
// file, taken on a file description of its own. flock locks belong to the
// open file description, so two acquisitions exclude each other whether
// they come from two processes, two Backends of one process, or one Backend
// (which also queues its own acquirers of a key, so that only one of them
// touches the file).
//
// A grant has no time bound (its Validity has TTL 0): it ends when the
// holder releases it or when its process ends. The kernel drops the lock of
// a process that crashes, is killed or runs out of memory at once, as a
// session service drops an ephemeral node; there is no TTL to wait for. A
// paused or stuck holder keeps the key: that is safe, but it blocks others
// (use distlock.WithMaxHold to bound holds).
//
// Lease.Refresh is a cheap liveness check: the lease was not released and
// its lock file was neither removed nor replaced. Nothing else can take a
// flock away from a live process, so OnLost is never called; the Client's
// periodic refresh (every TTL/3 by default) is how a holder learns that its
// lock file was removed. Removing a held lock file breaks exclusion (the
// next acquirer creates a new file) until the old holder's next refresh:
// never clean the directory while it is in use. Fence the storage with the
// tokens, as with any backend.
//
// # Fencing tokens
//
// Each lock file holds the key's token counter. A new token is taken only
// while holding the flock, written and made durable (fdatasync; the
// directory entry is synced at the key's first grant) before Acquire
// returns. Tokens therefore increase across releases, crashes and reboots,
// and a write torn by a crash can only concern a token never handed out.
//
// A new token is the last one plus one, or the wall clock in microseconds
// since 1970 if that is larger: tokens look like 1764500000000000. The
// clock is a floor for the counter, not a replacement: it is what keeps
// tokens increasing when the lock file is lost while nobody holds the key,
// unless the wall clock was set back meanwhile.
//
// DefaultDir, /var/tmp/distlock-<uid>, depends on the user id only (never
// on $XDG_RUNTIME_DIR or $TMPDIR, so that a login shell and a cron job of
// one user share locks) and survives reboots and logouts. /var/tmp is swept by
// age-based cleaners (systemd-tmpfiles: 30 days): Lease.Refresh touches a
// held lock file whose times are older than TouchAfter, but the lock file
// of a key left unused longer than the cleaner's age may be removed; its
// next token then comes from the clock floor. To depend on the wall clock
// for nothing, give New a directory no cleaner visits (for example
// /var/lib/<app>/locks). An unreadable counter is refused with
// ErrCorruptCounter rather than guessed.
//
// # Handing a grant to a child process
//
// LeaseFile returns a descriptor of a lease's lock file. Since the flock
// belongs to the open file description, a child process that inherits the
// descriptor keeps the key held after the holder dies, until it exits
// itself: the distlock command gives it to the supervisor of the command
// it runs, so that the key is not granted again before that command is
// gone. Any holder of the description that unlocks it unlocks it for all;
// Release does so.
//
// # Waiting
//
// A blocking flock cannot be cancelled: a goroutine blocked in it (and the
// lock it might get later) would outlive the caller's context. So a waiter
// keeps its file open and tries LOCK_EX|LOCK_NB whenever inotify reports
// that the lock file was closed (a holder that releases or exits closes
// it), removed or renamed. The kernel reports a close just before it drops
// the closed file's lock, so a failed try after a wake-up is repeated a few
// times over a few tens of milliseconds. A slow poll (WithPollInterval)
// covers wake-ups that never come. Without inotify (other systems, or when
// its limits are reached) waiters poll, backing off up to the poll
// interval. Cancelling the context ends the wait at once and leaves no
// goroutine or lock behind.
//
// A release wakes every waiter of the key on the host, one per Backend, and
// they race for it: there is no FIFO order between processes.
//
// # Files and keys
//
// A key's files are <name>.lock (the flock, the token counter and the key;
// kept for good, since it carries the counter) and, while the key is held,
// <name>.info (the holder: key, token, owner, pid, host, since). The name
// is the key with every byte outside [a-z0-9._-] percent-encoded, upper
// case letters included (for case-insensitive file systems), and a leading
// "." encoded too; a name longer than 200 bytes is replaced by the SHA-256
// of the key. No key can name a path outside the directory, and two keys
// never share a file.
//
// Backend.List reports the keys whose lock file is locked. A description
// left behind by a dead holder is not reported, because its lock file is
// not locked; List checks that with a brief shared, non-blocking flock.
//
// # Concurrency
//
// A Backend and its leases are safe for concurrent use. A Backend runs one
// goroutine (reading inotify events) while it has waiters, and none
// otherwise; it needs no closing.
//
// The package builds on Linux and the BSDs, macOS included; the inotify
// wake-ups are Linux only.
package filelock

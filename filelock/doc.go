// Package filelock is a driver.Backend for processes on one host: each key
// is a lock file in a directory, held with flock(2). It is the default
// backend of the distlock command.
//
//	backend, err := filelock.New("/var/lib/myapp/locks")
//	locks, _ := distlock.New(backend)
//
// # Guarantees
//
// Exclusion is the kernel's: a grant is an exclusive flock on the key's lock
// file, taken on an open file description of its own, so two acquisitions
// exclude each other whether they come from two processes, two Backends of
// one process, or one Backend.
//
// A grant has no time bound (its Validity has TTL 0): it ends when the
// holder releases it or when its process ends. The kernel drops the lock of
// a process that crashes, is killed or runs out of memory at once, as a
// session service drops an ephemeral node; there is no TTL to wait for.
//
// Lease.Refresh is a cheap liveness check: the lease was not released and
// its lock file was neither removed nor replaced. Nothing else can take a
// flock away from a live process, so OnLost is never called; the Client's
// periodic refresh (every TTL/3 by default) is how a holder learns that its
// lock file was removed.
//
// Permits of counting semaphores (Backend.AcquirePermit, package
// semaphore) are flocks too: a permit is an exclusive flock on one of the
// semaphore's slot files, <name>.slot.<i> with i below the limit, so that
// no more than the limit are ever held, and the slot is the permit's own
// (driver.SlotLease). It has no time bound either, and comes back at once
// when its holder releases it or dies. The limit is stored with the
// semaphore while a permit is held or awaited, and a permit that names
// another limit is refused with a *driver.LimitError; when nothing holds
// or awaits one, the next asker sets it.
//
// Shared (read) locks (Backend.AcquireShared, package rwlock) are flocks
// of the same lock file: a shared grant is a shared flock of the key's
// lock file, whose exclusive flock is the key's lock, so the kernel lets
// any number of readers hold a key together and keeps its writers (every
// Acquire of the key: a write lock is an ordinary lock) apart from them.
// Other programs take part: util-linux `flock -s FILE` on a key's lock
// file shares it with distlock's readers and keeps its writers out, and
// `flock FILE` keeps its readers out. A shared grant has no time bound
// either, comes back at once when released or when its process dies, and
// draws its token from the key's counter (see Fencing). Readers lists a
// key's shared grants and List lists them after its exclusive holder;
// Holder and WatchHolder report the exclusive holder only.
//
// # Not guaranteed
//
//   - Other hosts: the directory must be on a local file system. On NFS or
//     SMB, flock is emulated or not coherent between clients and the
//     wake-ups below do not see other clients: do not use this package
//     there.
//   - Progress: a paused or stuck holder keeps the key. That is safe, but
//     it blocks others (use distlock.WithMaxHold to bound holds). A process
//     paused while it changes a semaphore's state (a few file operations
//     under the semaphore's flock) holds up every asker of the semaphore,
//     even one that does not wait, until it resumes or dies, or the
//     asker's context ends.
//   - Exclusion when the directory is tampered with: removing a held lock
//     file (or slot file) breaks exclusion (the next acquirer creates a
//     new file) until the old holder's next refresh. Never clean the
//     directory while it is in use. Only this user and root (and a group the Backend is shared
//     with) can: see Permissions.
//   - Fairness between processes for locks (see Waiting); permits are
//     served in arrival order across processes. For shared locks,
//     writers are preferred rather than served in arrival order: while a
//     writer waits, no reader is granted, not even one that asked
//     before it, so that readers cannot starve writers but a stream of
//     writers can starve readers.
//   - Order with programs other than distlock: a `flock -s` of a lock
//     file is granted while distlock's writers wait (it does not see
//     them), and a `flock` waiting in the kernel does not keep
//     distlock's readers out; a program's flock holds no token and is
//     not listed (Holder, Readers and List read distlock's holder
//     descriptions).
//   - A lock and the permits of one key are independent grants, but share
//     the key's token counter (see Fencing): while a lock of a semaphore's
//     key is held, its permits are not granted (an asker that does not
//     wait is refused), and a lock of the key asked without waiting can
//     be refused while a permit's token is drawn, as while List probes it.
//
// # Durability
//
// Each lock file holds the key's token counter. A new token is taken only
// while holding the flock, and is written and made durable (fdatasync; the
// directory entry is synced at the key's first grant) before Acquire
// returns. Tokens therefore increase across releases, crashes and reboots,
// and a write torn by a crash can only concern a token never handed out. An
// unreadable counter is refused with ErrCorruptCounter rather than guessed.
//
// That needs a directory that persists: on a local file system, surviving
// reboots, and not swept by cleaners. DefaultDir, /var/tmp/distlock-<uid>,
// depends on the user id only (never on $XDG_RUNTIME_DIR or $TMPDIR, so
// that a login shell and a cron job of one user share locks) and survives
// reboots and logouts, but /var/tmp is swept by age-based cleaners
// (systemd-tmpfiles: 30 days). Lease.Refresh touches a held lock file (a
// permit's: its slot file) whose times are more than an hour old, but the lock file of a key left unused
// longer than the cleaner's age may be removed; its next token then comes
// from the clock floor (see Fencing). To depend on the wall clock for
// nothing, give New a directory no cleaner visits (for example
// /var/lib/<app>/locks).
//
// A permit's token, and a shared grant's, is made durable the same way,
// in the key's lock file.
// The rest of a semaphore's state (its limit, its permits' owners, its
// line of waiters) concerns live processes only, none of which survives a
// reboot: it is replaced whole by a rename, never synced, and a state that
// cannot be read is taken as empty.
//
// # Waiting
//
// Acquirers of a key through one Backend queue in this process, first come
// first served, and only the first of them touches the lock file. It keeps
// the file open and tries the flock again whenever inotify reports that the
// file was closed (a holder that releases or exits closes it), removed or
// renamed, with a slow poll (WithPollInterval) for wake-ups that never come.
// Without inotify (other systems, or when its limits are reached) waiters
// poll, backing off up to the poll interval. Cancelling the context ends the
// wait at once and leaves no goroutine or lock behind.
//
// Between processes there is no order: a release wakes every waiting
// Backend of the key on the host, and they race for it.
//
// Readers of a key (AcquireShared) wait the same way, each on its own
// open lock file (the Backend's queue is for exclusive askers), and are
// granted together whenever no writer holds or waits. A writer waits
// visibly to readers of every process: from its first failed try (or
// as soon as another asker of its Backend has the key's turn) until it
// is granted or gives up, it holds a shared flock of the key's writers
// file, <name>.writers, and a reader is not granted while that file is
// locked (it probes it with a try of its exclusive flock, given back at
// once, under the exclusive flock of <name>.sem, which readers wait for
// with a blocking flock: readers' probes never meet, so only a writer's
// mark refuses one). So a waiting writer keeps later readers out, tries included,
// and is granted once the readers before it are gone. Waiting readers
// are woken by inotify when the lock file is closed and when a writer
// lets the writers file go (granted, or giving up); a writer that dies
// lets it go at once, as a holder its lock. Writers still race each
// other across processes.
//
// Waiters for a permit are served in arrival order, across processes: a
// waiter takes a place in the semaphore's line (an arrival number in its
// state, and a waiter file, <name>.wait.<n>, that it holds with a flock
// while it waits), and is granted a permit only when no live waiter is
// ahead of it. On Linux inotify wakes the first in line alone when a slot
// file is closed (a permit given back, or its holder dead), and each
// waiter behind it when the one just before it leaves the line; they poll
// otherwise, as lock waiters do. A waiter whose context ends, or whose
// process dies, leaves the line at once (its flock goes), with its hold on
// the stored limit: whoever next changes the state purges it, and the
// permits of dead holders likewise.
//
// A watch of a key's holder (Client.Watch, an election's Observe) is an
// inotify watch of the lock directory on Linux, for the key's lock file
// and holder description: a grant, a release, a holder's death and a new
// owner (SetOwner) wake it. Elsewhere, or past inotify's limits, the
// watcher polls. Reading the holder takes the brief shared flock that
// List takes, and reports a grant once its description is written: a grant
// or a release in progress reads as free (see Backend.Holder).
//
// # Fencing
//
// A new token is the last one plus one, or the wall clock in microseconds
// since 1970 if that is larger: tokens look like 1764500000000000. The
// clock is a floor for the counter, not a replacement: it is what keeps
// tokens increasing when the lock file is lost while nobody holds the key,
// unless the wall clock was set back meanwhile. Fence the storage with the
// tokens through package fence, as with any backend.
//
// A permit's token is drawn from the same counter, the key's lock file's,
// when it is granted (under a shared flock of the lock file, which
// excludes the grants of locks, and the semaphore's own flock, which
// excludes those of other permits): every grant of a key, a lock's or a
// permit's, is above every one before it, and so each slot's tokens rise.
// A shared grant draws its token the same way, under the shared flock
// that is its grant and the exclusive flock of the key's semaphore file,
// <name>.sem, which every draw under a shared flock takes: readers'
// tokens are unique, and every grant of a key, a reader's, a writer's or
// a permit's, is above every one before it. A writer's token fences as a
// lock's does; a reader's orders it among the key's grants (a storage
// that takes reads need not check it).
//
// # Permissions
//
// A lock is only as safe as its lock file: a user who can remove or
// replace it breaks exclusion, one who can write it can set its token
// counter back. New and Acquire therefore refuse, with an error matching
// ErrUnsafe that names the path, its owner and its mode, whatever lets a
// user other than this one and root do either, as ssh does for ~/.ssh:
//
//   - The lock directory, every directory above it, and every symbolic
//     link followed to reach it must belong to root or to this user: the
//     owner of a directory can always change it.
//   - None of those directories may be writable by others unless it is
//     sticky, as /tmp and /var/tmp are: there others can create entries
//     but not remove or rename this user's.
//   - Nor writable by their group, unless sticky or the Backend is shared
//     with the group: a file mode that lets the group write
//     (WithFileMode(0o660)); a directory above the lock directory then
//     only by the lock directory's group, the one the Backend is shared
//     with. Sharing locks between users needs it, since
//     each member must be able to create lock files; the group is then
//     trusted as the owner is (a member who removes a held lock file
//     breaks exclusion, as the owner would), and nobody outside it can.
//     Give such a directory to root or to one of the users, with the
//     sharing group and mode 2770 (setgid, so that lock files get that
//     group). The lock directory of a shared Backend must not be writable
//     by others at all, sticky or not: a lock file one of them made there
//     would be the group's lock.
//   - A lock file must be a regular file with a single name (in a sticky
//     directory, another user could plant a hard link to some other file
//     of ours, to have its token counter written into it), belong to root
//     or this user (shared: to anyone, since only the group can create
//     one there), and be writable by no one else (shared: by no one
//     outside its group). In a sticky directory another
//     user can create the lock file of a key first; that key is then
//     refused: a denial of service, not a breach.
//
// The checks read permission bits, not access control lists (an ACL that
// lets another user write shows as the group's write permission, refused
// unless the Backend is shared). They
// are made when New opens the directory and whenever a lock file is
// opened (a writers file is checked as a lock file is); only users they
// trust can make them wrong later. Holder descriptions (<name>.info, and
// readers' <name>.reader.<token>) are read from regular files only, at
// most 1 MB, and written through a file created afresh; in a sticky directory
// another user can plant one, which List may then show as the holder's
// owner, but it grants nothing. Files a Backend creates may be readable by
// others (WithFileMode(0o644)): any user who can open a lock file can hold
// its key (flock needs no more), a denial of service to allow only to
// trusted users. DefaultDir is held to more: it must belong to this user
// and be closed to everyone else (mode 0700).
//
// # Handing a grant to a child process
//
// Backend.File returns a descriptor of a held lock's lock file. Since the
// flock belongs to the open file description, a child process that inherits
// the descriptor keeps the key held after the holder dies, until it exits
// itself: the distlock command gives it to the supervisor of the command
// it runs, so that the key is not granted again before that command is
// gone. Any holder of the description that unlocks it unlocks it for all;
// Release does so. For a permit, File returns a descriptor of its slot
// file, which keeps the permit held the same way; for a shared grant, a
// descriptor of the lock file, whose shared flock stays held the same
// way.
//
// # Files and keys
//
// A key's files are <name>.lock (the flock, the token counter and the key;
// kept for good, since it carries the counter) and, while the key is held,
// <name>.info (the holder, in JSON: key, token as a decimal string,
// owner, pid, host, since). The name
// is the key with every byte outside [a-z0-9._-] percent-encoded, upper
// case letters included (for case-insensitive file systems), and a leading
// "." encoded too; a name longer than 200 bytes is replaced by the SHA-256
// of the key. No key can name a path outside the directory, and two keys
// never share a file. Backend.List reports the keys whose lock file is
// locked, not descriptions left behind by dead holders; a lock file it
// cannot read (permission denied) does not hide the others: it lists them
// and names that one in a ListError.
//
// A semaphore kept at a key has, besides the key's lock file (for its
// token counter), <name>.sem (the flock that guards the semaphore's
// state), <name>.sem.json (the state, in JSON: key, limit, the permits'
// slots, tokens, owners, pids, hosts and start times, the waiters' arrival
// numbers and pids), its slot files, <name>.slot.<i>, kept for good as
// lock files are, and the files of its waiters, <name>.wait.<n>, removed
// when they leave. List shows locks only, never permits: a key's
// exclusive holder, then its readers (Holder.Shared set) by token, as
// driver.Lister says; Backend.Permits lists a semaphore's permits.
// The semaphore's flock file and its slot files are checked as lock files
// are (see Permissions); its state and waiter files are created afresh, as
// holder descriptions are, and read from regular files only.
//
// Shared grants of a key add <name>.reader.<token>, the description of
// the reader granted that token (as <name>.info, in JSON), locked by the
// reader while it holds and removed when it releases (written as
// <name>.reader.<token>.tmp, locked, and renamed into place); a dead
// reader's is removed by the next Readers or List that finds it
// unlocked. Its writers wait through <name>.writers, and readers draw
// their tokens under the flock of <name>.sem (see Fencing); both are
// kept for good.
//
// # Concurrency
//
// A Backend and its leases are safe for concurrent use. A Backend runs one
// goroutine (reading inotify events) while it has waiters (for locks,
// shared locks or permits), and none otherwise; besides, a reader that
// finds <name>.sem locked waits for it in a goroutine of its own, which
// ends when it has the flock (held for microseconds), even after the
// reader gave up. Close ends the waiters and refuses later acquisitions; held
// leases stay held until released.
//
// The package builds on Linux and the BSDs, macOS included; the inotify
// wake-ups are Linux only.
package filelock

// Package cli implements the distlock command: cmd/distlock calls Main.
//
//	distlock [--backend URL] [--verbose] run [--timeout D | --no-wait] [--held-exit N] [--quiet] [--ttl D] [--grace D] [--shared | --permits N [--slots]] KEY -- COMMAND [ARG...]
//	distlock [--backend URL] [--verbose] elect [--value V] [--ttl D] [--grace D] NAME -- COMMAND [ARG...]
//	distlock [--backend URL] leader [--json] [--watch] NAME
//	distlock [--backend URL] status [--json] [PREFIX]
//	distlock [--backend URL] status [--json] --semaphore NAME
//	distlock [--backend URL] status [--json] --readers KEY
//	distlock [--backend URL] [--verbose] partition [--member ID] [--reconcile D] [--min-hold D] [--ttl D] [--grace D] GROUP (--units N | --unit NAME...) -- COMMAND [ARG...]
//	distlock [--backend URL] status [--json] --partition GROUP (--units N | --unit NAME...)
//
// # Backends
//
// --backend, or the DISTLOCK_BACKEND environment variable, names the lock
// service by URL. The default, file://, is the filelock backend in the
// per-user directory filelock.DefaultDir, /var/tmp/distlock-<uid>: it
// depends on the user id only, not on the environment ($XDG_RUNTIME_DIR,
// $TMPDIR), so that a login shell and a cron job of one user take the same
// locks, and it survives reboots and logouts. file:///dir names another.
// status --verbose and the help name the directory; status on a directory
// that does not exist says that no lock is held, and creates nothing. A
// lock directory, the default or another, that a user other than this one
// and root could remove or replace lock files in is refused (exit 69),
// with its path, owner and mode (see Permissions in package filelock). The
// other schemes are those of package backends, which opens every URL but
// file:// for the command, as it does for Go programs: redis, rediss,
// redis+cluster, rediss+cluster, redis+sentinel, redlock, redlocks, etcd,
// etcds, zk, postgres, postgresql, and distlock+http and distlock+https
// (a gateway). A URL without a host is
// refused (exit 64). Passwords in URLs, and password-like query
// parameters, are never printed: messages and logs show URLs as
// backends.Redact does. A password given with --backend shows in the
// process list (ps) to every user of the host; in DISTLOCK_BACKEND it is
// readable only by the user and root.
//
// # run
//
// run waits for the lock (forever, or up to --timeout; --no-wait tries
// once), starts COMMAND with DISTLOCK_KEY and DISTLOCK_TOKEN added to its
// environment, and keeps the lock while it runs: the distlock.Client renews
// it every TTL/3 (--ttl, default 15s; see The lease, below, for what the
// TTL is on each backend). When the command ends, the lock is released and
// distlock exits with the command's status.
//
// --timeout bounds the opening of the lock service (given 1s at least; a
// service that does not answer in time exits 69) and the wait for a held
// lock, not the first try: one try is always made (given up to 5s,
// however short the timeout). When the lock
// is not acquired, distlock exits 75, or the status chosen with
// --held-exit, and says so unless --quiet; a lock service that does not
// answer is still reported, with 69. For cron, where every output is
// mailed:
//
//	*/5 * * * * distlock run --no-wait --quiet --held-exit 0 jobs/sync -- /usr/local/bin/sync
//
// Permits: with --permits N, run holds one of N permits of the semaphore
// KEY (package semaphore's, kept at semaphore/KEY) instead of the lock,
// so that at most N commands run at once under KEY; everything above and
// below holds for the permit as for the lock. DISTLOCK_KEY is then
// semaphore/KEY, and with --slots DISTLOCK_SLOT is the permit's slot in
// [0, N). A limit other than the one the semaphore stores is refused
// (exit 64), as is a lock service that grants no permits (redlock://,
// distlock+http://). status --semaphore KEY shows the semaphore.
//
// Shared locks: with --shared, run holds a shared (read) lock of KEY, as
// flock -s does: shared runs of KEY run together, and a run of KEY without
// --shared, an exclusive lock (the writer of package rwlock's read/write
// lock KEY), excludes them and is excluded by them. Askers are served in
// arrival order, and a writer waiting for KEY blocks the shared runs that
// ask after it; with --no-wait a shared run fails (75) while a writer
// holds or waits. Everything above and below holds for the shared lock as
// for the lock: its own DISTLOCK_TOKEN, above every earlier grant's on
// KEY, renewal, loss and release. --shared with --permits is a usage
// error (64), as is a lock service whose backend grants no shared locks
// (driver.SharedLocks; never redlock://): the Client's error, matching
// errors.ErrUnsupported, is said. status lists shared locks with a MODE
// column, and status --readers KEY shows one key's exclusive holder and
// shared locks.
//
// The command's environment: DISTLOCK_BACKEND names the lock service
// that distlock used, whether --backend or DISTLOCK_BACKEND named it (it
// is absent for the default, file://), with the password of its URL and
// its password-like query parameters removed: the command is other code,
// which may print or report its environment. A distlock run inside it
// reaches the same lock service and must be given the password itself. A
// URL that cannot be cleaned with certainty (a password with "?" in it)
// is not passed at all, and distlock says so on standard error: a
// distlock inside the command would then take its locks in the default
// file:// directory, unless given --backend.
//
// The job: the command runs in a process group of its own, so that the job
// is the group, workers it starts included. When the command exits,
// whatever is left of its group is killed (SIGKILL), and the lock is
// released only once the group is gone: no worker of the job outlives the
// lock. A command should therefore wait for its workers.
//
// Loss: if the lock is lost while the command runs, the group gets SIGTERM
// at once (before distlock writes anything), then SIGKILL after --grace
// (default 10s), or at the lock's deadline (below) if that comes first,
// and distlock exits 76, saying so once when the command has ended. The
// group gets one SIGTERM: when the lock has a deadline, distlock has the
// supervisor send it, which sends none if its deadline sent one already. A command may be stopped only after its lock was lost: let it
// check DISTLOCK_TOKEN against fenced storage for the writes that matter.
//
// The deadline: the supervisor (below) keeps the lock's local deadline
// itself, the one the Client keeps (distlock.Lock.RiskWindow), which comes
// from the lease the service confirmed, not always from --ttl (see The
// lease, below). distlock tells it the deadline before the command starts
// and after each confirmed renewal (within a tenth of the lock's at-risk
// window, at most 500ms); when the deadline comes within the grace
// without a newer one, the supervisor sends the group SIGTERM (and
// SIGCONT, for a stopped job), then SIGKILL at the deadline, whatever
// distlock is doing: stopped alone (SIGSTOP, a debugger, a freezer of its
// pid), or starved. The grace counts against the deadline, so that the
// job is gone before the lease can lapse, and for this it is cut to the
// lock's at-risk window (distlock.WithAtRiskWindow's default): the Client
// sends each renewal at least two windows before the deadline, so that a
// renewal that is merely on time never meets a SIGTERM, and one further
// ahead would come before a renewal is even late. Once it has sent
// SIGTERM, the supervisor keeps to that deadline for SIGKILL, and distlock
// exits 76, also if a renewal came in after all. Only a pause of both
// distlock and the supervisor remains, which fencing covers.
//
// The lease, per backend, with the defaults (--ttl 15s; the Client renews
// every TTL/3, or halfway to the deadline when that comes sooner; the
// deadline is the lease's TTL×0.99 less 10ms after the send of the
// request that confirmed it):
//   - redis (every form), redlock, etcd and postgres with ?mode=lease: a
//     lease of --ttl (etcd: a session lease of whole seconds; redlock: less
//     the quorum's time and the drift), renewed every 5s; the window is
//     about 4.9s.
//   - zk: five twelfths of the ZooKeeper session timeout
//     (?session_timeout=, default 10s: about 4.2s; see zklock's
//     Guarantees), whatever --ttl is, which only sets the renewal
//     interval: renewed halfway to each deadline, about every 2s, with a
//     window of about 1s; a session timeout of 20s, renewals about every
//     4s, a window of about 2s.
//   - distlock+http (a gateway): the time left that the gateway reports
//     for its lock, from the send of the keepalive it answered; the window
//     is half of what is left after the next renewal, at most TTL/3.
//   - file:// and postgres (its session locks): no time bound. The Client
//     keeps no deadline and neither does the supervisor: the lock lasts
//     as long as the lock file is open (the supervisor holds it too) or
//     distlock's connection to the server, whatever distlock is doing;
//     the Client checks it every TTL/3. A lock found lost (the connection
//     broke) ends the command as above, once distlock learns it.
//
// Signals: the signals one sends on purpose (SIGHUP, SIGINT, SIGQUIT,
// SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGWINCH and SIGCONT) sent
// to distlock are forwarded to the command's group, whose status distlock
// then returns; the lock is released on every path. Not forwarded: SIGKILL
// and SIGSTOP (they cannot be caught), SIGCHLD, SIGPIPE and SIGURG (about
// distlock itself, or used by its runtime), the resource and fault signals
// (distlock's own), and the job control stops (below). A signal that
// distlock inherits as ignored (SIGHUP under nohup, SIGINT for the
// background jobs of a shell without job control) stays ignored, by
// distlock and by the command. A signal that arrives while distlock is
// still waiting (SIGHUP, SIGINT, SIGQUIT, SIGTERM) ends the wait and the
// command is not started.
//
// Dying of a signal: when the command died of SIGHUP, SIGINT, SIGQUIT or
// SIGTERM, or one of them ended the wait, the distlock command (Main)
// releases the lock, then kills itself with the same signal (on Linux;
// elsewhere it exits 128+n), so that a shell that runs it sees what it
// would have seen of the command itself: a loop stops on Ctrl-C.
//
// Terminal: when one of distlock's standard streams is a terminal whose
// foreground process group is distlock's, and distlock is alone in its
// group (an interactive shell runs it as a job of its own), the command's
// group is made the terminal's foreground group: Ctrl-C and Ctrl-\ reach
// the job once, from the terminal, and not a second time through distlock,
// which is not in that group, and full-screen programs work. distlock's
// group gets the terminal back when the job ends. Ctrl-Z stops the job:
// distlock, told by the supervisor that the command stopped, takes the
// terminal back and stops itself with the same signal, so that the shell
// sees its job stopped; `fg` or `bg` continues distlock, which gives the
// terminal back (after `fg`) and continues the job. SIGTSTP sent to
// distlock itself then stops distlock alone, as it would any program.
//
// When distlock shares its process group with other processes (a pipeline
// such as `distlock run k -- make | less`, or a script run by a shell
// without job control), the terminal stays with that group, so that they
// keep it: what is typed reaches distlock, which forwards it to the job,
// once, and Ctrl-Z (SIGTSTP) is relayed to the job, after which distlock
// stops itself (SIGSTOP) until continued. A command that reads the
// terminal is then a background job of it, and is stopped by SIGTTIN as
// such; run it from an interactive shell. Without a terminal the same
// relay applies to SIGTSTP sent to distlock.
//
// While stopped, distlock renews nothing: on a backend with a lease a
// stop longer than the lease loses the lock (for ZooKeeper and etcd, the
// client's keep-alives of the session stop too), and the supervisor ends
// the job at the lock's deadline, stopped or not. file:// and postgres
// session locks stay held. Members of the job that catch SIGTSTP
// and go on running go on while distlock is stopped, until then. SIGTTIN
// and SIGTTOU concern distlock's own use of the terminal: they stop
// distlock alone (with `stty tostop`, its own messages while the job has
// the terminal do).
//
// Death of distlock: a small supervisor, distlock itself started again
// with the hidden first argument SupervisorCommand, sits between distlock
// and the command. It leads no group: it starts the command as the leader
// of the job's group, waits for it, kills the rest of the group when it
// exits, and reports to distlock over a pipe. Most of a start of distlock
// is Go's initialisation of the packages it links, so the supervisor runs
// from an early package init of the distlock command, before the lock
// services' clients initialise, and exits there (package supervisor); and
// on Linux the distlock command starts its supervisor from that early init
// too (package standby): the two starts overlap, and the supervisor waits
// until distlock, holding the
// lock, sends it the command, its environment and the lock file over a
// control socket (an unused one exits when distlock does). Its own
// environment holds only the Go runtime's settings. On Linux it has a
// parent-death signal (SIGTERM, set by the kernel when the distlock thread
// that started it ends: the main thread, which never exits, or one that
// stays alive, locked, until the supervisor exits) and checks its parent
// right after catching it; it is a child subreaper, so that it reaps the
// job's orphans. When distlock
// dies, however it dies (SIGKILL, the OOM killer, a crash), the supervisor
// kills the job's group with SIGKILL, waits until none of its processes is
// alive, and exits. With file:// it holds a descriptor of the lock file
// (filelock.Backend.File, passed over the socket), so the flock, and the lock, stays held until then:
// the key is never granted again while the job runs. On the backends with
// a lease the lock lapses with the lease (the TTL, etcd's session lease,
// the ZooKeeper session timeout), long after the job is gone. With
// postgres session locks the server frees the lock as soon as distlock's
// connection closes, which is when distlock dies: the next holder may be
// granted it while the supervisor is still killing the job, and only
// fencing covers that. If the supervisor alone dies, distlock kills the
// group itself and exits 70.
//
// What remains uncovered: processes of the job that leave its process
// group (setsid, setpgid; daemons do) are neither signalled nor killed;
// processes that run as another user than distlock (a setuid program, or
// sudo, when distlock is not root) cannot be signalled, and are not
// waited for; a supervisor killed together with distlock (kill -9 of
// both, an OOM kill of both) leaves the job running without the lock, and
// one paused together with it (SIGSTOP of both, or of the whole host) past
// the lease leaves it running unprotected; a process stuck in the kernel
// (state D) is waited for. Tests show each of these limits. On other Unix systems there is no parent-death signal: the
// supervisor polls its parent every 100ms, the job's orphans are not
// reaped by it, and the wait for the group gives up after 10s. On Windows
// run and the file:// backend are not available.
//
// # elect and leader
//
// elect runs a command while leading an election of package election:
// the lock of the key election/NAME (election.KeyPrefix), held by the
// leader with its value as the grant's owner, which etcd:// keeps in
// etcd's own election layout (`etcdctl elect NAME` campaigns in the same
// election, `etcdctl elect -l NAME` observes it). It campaigns with
// --value (default host:pid, the owner that run's locks have), waiting
// until elected; a signal that would end distlock (SIGHUP, SIGINT,
// SIGQUIT, SIGTERM) ends the campaign, and distlock then exits, or dies,
// as run does when one ends its wait. Once elected it runs COMMAND as run
// does, with DISTLOCK_TOKEN set to the term's token, DISTLOCK_KEY to
// election/NAME and DISTLOCK_BACKEND as for run, through the same
// supervisor: the term is renewed while the command runs, kept by the
// supervisor's deadline too, and its loss ends the command (SIGTERM, then
// SIGKILL after --grace) with exit 76; signals are forwarded, the job is
// killed when the command exits. Then distlock resigns, so that the next
// candidate is elected at once rather than when the term would have
// lapsed, and exits with the command's status. What run says of the
// lease, the job, the terminal and the death of distlock holds for the
// term.
//
// leader prints the leader of an election: its value and its term's
// token, as "VALUE (term TOKEN)", the value Go-quoted with escapes when a
// character of it does not print (as status shows owners). With no leader
// it says so on standard error and exits 1 (ExitNoLeader), which no
// other outcome of leader gives. --watch prints a line at each change
// (election.Observe: a new term, a new value, "no leader" when a term
// ends) until interrupted (Ctrl-C or SIGTERM), which ends it with status
// 0; a first read that fails ends it as without --watch, and later
// failures are retried silently. --json prints each line as a JSON object
// {election, leader, value, token} (leader false and no value or token
// when there is none; the token a string of decimal digits), escaped as
// status --json is. leader creates nothing: a file:// lock directory that
// does not exist has no leader, and a watch of it looks for it again at
// each read.
//
// # partition
//
// partition is a member of a work partitioning group of package
// partition: it holds the lock partition/GROUP/members/ID (--member,
// default HOST-PID, the default of partition.WithMember) while it is a
// member, and the lock partition/GROUP/units/UNIT, with its member id as
// the owner, of each unit it owns. The group's units are "0" to "N-1"
// (--units N, partition.Count) or named (--unit NAME, repeated), at most
// MaxUnitCommands (partition.MaxUnits for status); every member must be given the same ones. Units are
// planned by rendezvous hashing with bounded loads, shares within one
// unit; every --reconcile (±25%) a member reads the members and takes the
// units planned to it, and gives up a unit planned elsewhere once it has
// held it for --min-hold. Package partition's guarantees and limits hold
// (see its documentation): the command of a unit runs under the unit's
// lock, so two never run at once on services that keep their locks, and
// each has a DISTLOCK_TOKEN greater than every earlier owner's of the
// unit; a unit is not always owned (between a loss or a move and the
// next grant nobody owns it).
//
// partition runs COMMAND once for each unit it owns, all at once, each
// with DISTLOCK_UNIT, DISTLOCK_TOKEN (the unit lock's token), DISTLOCK_KEY
// (partition/GROUP/units/UNIT), DISTLOCK_GROUP, DISTLOCK_MEMBER and
// DISTLOCK_BACKEND (as for run; the warning about a URL that cannot be
// passed is said once) in its environment, and /dev/null as its standard
// input (the commands share standard output and error with distlock).
// Each runs as run's command does, through a supervisor of its own, in a
// process group of its own, without the terminal: the supervisor keeps
// the unit lock's deadline (SIGTERM --grace before it, SIGKILL at it) and
// kills the group if distlock dies (at once on Linux), so that a distlock
// that is SIGKILLed leaves no command running unsupervised; with file://
// it keeps the unit's flock until the group is gone. A unit's command is
// ended, SIGTERM and then SIGKILL after --grace, when its unit's lock is
// lost (through the supervisor, as run does), when the unit is planned to
// another member (a hand-off: once its group is gone the unit's lock is
// released, and the new owner, already waiting for it, starts its
// command without waiting out a TTL), and when distlock ends. How it
// ends decides what follows:
//
//   - exit 0: the unit is released and taken again at the next
//     reconcile if it is still planned here, and the command started
//     again with a new token; a command that is done at once is thus
//     run about once per --reconcile;
//   - any other status, or death by a signal that distlock did not send:
//     partition ends every other unit's command (SIGTERM, then SIGKILL
//     after --grace), releases every lock, leaves the group and exits
//     with that status (128+n for signal n, dying of the same signal for
//     SIGHUP, SIGINT, SIGQUIT and SIGTERM as run does), saying which unit
//     failed; as package partition's Run returns fn's error;
//   - ended by distlock (a loss, a hand-off, distlock's end): the status
//     is not an outcome; a loss, or a deadline that neared without a
//     confirmed renewal, is said on standard error, and the unit is taken
//     again when planned here.
//
// SIGHUP, SIGINT, SIGQUIT and SIGTERM sent to distlock end every command
// (SIGTERM, SIGKILL after --grace), release every lock and the
// membership, and distlock then dies of that signal as run does (exits
// 128+n where it cannot); SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGWINCH
// and SIGCONT are forwarded to every command's group; so are further
// SIGHUP, SIGINT, SIGQUIT and SIGTERM once the commands are being ended
// (a second Ctrl-C reaches them; SIGKILL still waits for --grace). A
// nested distlock run, elect or partition inside a unit's command does
// not pass the unit's DISTLOCK_UNIT, DISTLOCK_GROUP and DISTLOCK_MEMBER
// on to its own command. A member that loses its own lock ends every
// command and joins again. Bad input is a usage error (64) before the
// lock service is opened: no units, --units 0, more units than
// MaxUnitCommands (4096: a member alone owns them all, and each runs a
// supervisor process, its command and an OS thread of distlock; Go
// programs die past 10,000 threads), --units with --unit, a unit
// named twice, a unit name or --member with "/", an invalid key, a
// missing GROUP or COMMAND. A COMMAND that is not found exits 127 before
// the member joins. The lock service must list holders (driver.Lister):
// one that cannot is a usage error (64). On postgres:// with session
// locks (its default mode) every lock held takes a connection of the
// pool, the member's and each unit's: without pool_max_conns (see
// pglock) in the URL the pool is given the units plus two, and a smaller
// pool_max_conns is a usage error (64). The memory backend of the tests
// (WithOpener) is the process's own: a group over it forms only among
// the Runs of one process.
//
// status --partition GROUP, given the group's units as partition is,
// shows the group's assignment (partition.Assignment): its live members
// (id, member token, units owned and planned, time a member), each unit
// with the member it is planned to, its owner and its token, and a last
// line saying whether the group is settled (every unit held by the
// member it is planned to); member ids and owners are shown as status
// shows owners. --json prints {group, settled, members: [{id, token,
// since, owned, planned}], units: [{name, planned, held, owner, token}]}
// with tokens as strings, escaped as status --json is.
//
// # Exit codes
//
// The table is at ExitOK; in short: the command's status, 126/127 when it
// cannot be started, 128+n for a signal (or death by the same signal, see
// above); 1 no leader (leader); 64 usage, 69 lock service failed or set
// up unsafely (a Redis that may evict keys: accept the risk with
// ?eviction_allowed=true), 70 internal error (the supervisor failed), 75
// not acquired (or --held-exit), 76 lock (or term) lost.
//
// # Status
//
// status lists holders through driver.Lister: key, token, owner, how long
// held and the time left before the service expires the grant unless
// renewed ("unbounded" when it has no time bound, as with file://), both
// in tenths of a second below a minute and in whole seconds above. Keys
// and owners are what anyone with access to the service wrote: the table
// shows one with a character that does not print (control characters,
// format characters such as the bidirectional controls and the
// zero-width ones, invalid UTF-8) Go-quoted, with escapes; --json
// escapes the same characters as \uXXXX, which decodes to the same
// string (the rule is internal/visible's, which the gateway's dashboard
// follows too). In --json the token is a string of decimal digits, as in
// the gateway's API: a JSON number above 2^53 would lose digits in
// JavaScript. status changes nothing in the service: on PostgreSQL, a
// database without pglock's tables holds no lock, and a role that may
// only read the tables can list. With file://, a lock file that cannot be
// read (permission denied) is named on standard error, and the others
// listed: status fails (exit 69) only when it could read no lock file
// under the prefix, since it could then tell nothing.
//
// A key's shared locks are listed after its exclusive holder, by token,
// one row each; a table with any adds a MODE column (shared or exclusive)
// after KEY, and --json marks them "shared": true. status --readers KEY
// shows the one key: its exclusive holder (Client.Holder) and its shared
// locks (Client.Readers), and is a usage error (64) on a service that
// grants none.
//
// Logging: without --verbose distlock reports each outcome once, on
// standard error; with it, it and the Client log what they do (renewals,
// refresh failures, losses, the release) as they happen.
//
// Run is safe for concurrent use; each call parses its own flags.
package cli

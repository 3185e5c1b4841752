package torture

import (
	"time"
)

// The control protocol between the harness and a worker process: JSON
// objects, one per line, over a TCP connection the worker opens to the
// harness. The harness sends commands (with an id) and "go" messages; the
// worker answers each command once (same id) and sends events (no id) as
// they happen.

// Commands.
const (
	cmdOpen         = "open"          // open the backend and the store connection
	cmdAcquire      = "acquire"       // acquire Key; the worker holds at most one lock
	cmdAcquireAll   = "acquire-all"   // acquire Keys as one lock set (Client.AcquireAll): plain locks, held in place of a lock
	cmdRead         = "read"          // read Resource with the lock's token
	cmdWrite        = "write"         // write Value to Resource with the lock's token
	cmdRMW          = "rmw"           // read, then write value+1
	cmdRelease      = "release"       // release the lock
	cmdNaiveRelease = "naive-release" // delete the lock without checking its owner
	cmdNaiveAcquire = "naive-acquire" // Redis SET NX PX, one attempt, no clean-up
	cmdObserve      = "observe"       // follow the election named Key: leader events until exit
	cmdSharedRead   = "shared-read"   // check, announce, read; validate against the store's fence if asked
	cmdMember       = "member"        // join the group named Key (package partition): write each owned unit
	cmdStubborn     = "stubborn"      // a member's unit writers ignore their contexts (Stubborn) or not
	cmdGo           = "go"            // continue after an announce
	cmdExit         = "exit"          // close everything and exit
)

// Events.
const (
	evHello     = "hello"      // first message: Name, Pid
	evEnd       = "end"        // the lock's context ended: Grant, Cause, Lost
	evAnnounce  = "announce"   // between the read and the write of an rmw with Announce
	evLeader    = "leader"     // an observed leader: Token (0: none), Leader; Closed when Observe's channel closed
	evUnit      = "unit"       // a member was granted a unit: Key (the unit's lock key), Grant, Token; or Err: its Run ended
	evUnitWrite = "unit-write" // a member wrote a unit: Grant, WriteSeq, LiveAfter, NoCheck
)

// Backend kinds.
const (
	backendRedis = "redis"
	backendEtcd  = "etcd"
	backendFile  = "file"
	backendZK    = "zookeeper"
	backendPG    = "postgres"
)

// request is a message from the harness to a worker.
type request struct {
	ID  int64  `json:"id,omitempty"`
	Cmd string `json:"cmd"`

	// open
	Backend    string        `json:"backend,omitempty"`
	URL        string        `json:"url,omitempty"`
	StoreAddr  string        `json:"store_addr,omitempty"`
	TTL        time.Duration `json:"ttl,omitempty"`
	Drift      float64       `json:"drift,omitempty"`
	Margin     time.Duration `json:"margin,omitempty"`
	RenewEvery time.Duration `json:"renew_every,omitempty"`
	// Election makes acquire campaign in the election named Key
	// (election.Campaign, the worker's name as the value) and release
	// resign the term.
	Election bool `json:"election,omitempty"`
	// Permit makes acquire take the permit of a semaphore of limit 1
	// named Key (package semaphore), and release give it back.
	Permit bool `json:"permit,omitempty"`
	// RW makes acquire take the read/write lock named Key (package
	// rwlock): its write lock, or with Shared a read lock.
	RW bool `json:"rw,omitempty"`

	// acquire
	Key     string        `json:"key,omitempty"`
	Wait    bool          `json:"wait,omitempty"`
	NoRetry bool          `json:"no_retry,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
	// Shared (with RW) asks a read lock instead of the write lock.
	Shared bool `json:"shared,omitempty"`
	// Limit (with Permit), when above 1, makes acquire take a permit of
	// a semaphore of that limit with slots (semaphore.WithSlots); the
	// answer's Slot is the permit's.
	Limit int `json:"limit,omitempty"`
	// Keys (acquire-all) are the keys of the lock set.
	Keys []string `json:"keys,omitempty"`

	// read, write, rmw (Key: with a lock set held, the part whose token
	// and liveness the request takes)
	Resource string `json:"resource,omitempty"`
	Value    int64  `json:"value,omitempty"`
	// NoCheck skips the check that the lock is live before the store
	// request (for rmw: before the write), as a holder does that ignores
	// its lock or was paused between its check and its write.
	NoCheck bool `json:"no_check,omitempty"`
	// Announce makes an rmw report between its read and its write and wait
	// for "go".
	Announce bool `json:"announce,omitempty"`
	// Validate (shared-read) has the worker ask the store, after its
	// read, for the highest token admitted for Resource, and discard the
	// read when it is above the lock's own.
	Validate     bool          `json:"validate,omitempty"`
	StoreTimeout time.Duration `json:"store_timeout,omitempty"`

	// member: the group's unit count (partition.Count), the reconcile
	// interval and the minimum hold; stubborn: on or off.
	Units     int           `json:"units,omitempty"`
	Reconcile time.Duration `json:"reconcile,omitempty"`
	MinHold   time.Duration `json:"min_hold,omitempty"`
	Stubborn  bool          `json:"stubborn,omitempty"`
}

// reply is a message from a worker to the harness: the answer to a command
// (ID set) or an event (Event set).
type reply struct {
	ID    int64  `json:"id,omitempty"`
	Event string `json:"event,omitempty"`

	Err     string `json:"err,omitempty"`
	ErrKind string `json:"err_kind,omitempty"` // see errKind

	Token uint64 `json:"token,string,omitempty"`
	Grant int    `json:"grant,omitempty"`
	// Slot (an acquire's answer, with Limit) is the permit's slot.
	Slot int `json:"slot,omitempty"`
	// Parts (an acquire-all's answer) are the set's locks, in key order,
	// each a grant of its own: its end is reported as an evEnd of its
	// Grant. A set's release answers with each part's outcome.
	Parts []setPart `json:"parts,omitempty"`

	Value    int64  `json:"value,omitempty"`
	ReadSeq  int    `json:"read_seq"`
	WriteSeq int    `json:"write_seq"`
	Outcome  string `json:"outcome,omitempty"` // write: ok, stale, timeout, error, skipped
	Detail   string `json:"detail,omitempty"`  // why a write timed out or failed
	// LiveAfter reports that the lock was live (context not done, local
	// deadline not passed) after the store's reply arrived: the grant was
	// held at least until the store answered.
	LiveAfter bool `json:"live_after,omitempty"`
	// Deadline (an rmw with Announce) is the lock's, or term's, local
	// deadline as it stood when the harness stopped the worker: the latest
	// Deadline read from the check until the write (or, for one ended
	// before the announce, when it was found ended), in Unix nanoseconds
	// of the machine's wall clock (0: none read); DoneBefore reports that its
	// context was already cancelled when the write went out.
	Deadline   int64 `json:"deadline,omitempty"`
	DoneBefore bool  `json:"done_before,omitempty"`
	// Granted (an acquire's answer) is when the acquire, or Campaign,
	// returned in the worker, in Unix nanoseconds of the wall clock.
	Granted int64 `json:"granted,omitempty"`
	// Highest and Discarded (a shared-read with Validate): the highest
	// token the store had admitted for the resource after the read, and
	// whether the read was discarded for it (above the lock's token).
	Highest   uint64 `json:"highest,string,omitempty"`
	Discarded bool   `json:"discarded,omitempty"`

	Leader string `json:"leader,omitempty"` // evLeader: the leader's value
	Closed bool   `json:"closed,omitempty"` // evLeader: Observe's channel closed

	Cause string `json:"cause,omitempty"`
	Lost  bool   `json:"lost,omitempty"`

	Key     string `json:"key,omitempty"`      // evUnit: the unit's lock key
	NoCheck bool   `json:"no_check,omitempty"` // evUnitWrite: written unchecked (stubborn)

	Name string `json:"name,omitempty"`
	Pid  int    `json:"pid,omitempty"`
}

// setPart is one lock of a set in an acquire-all's answer.
type setPart struct {
	Key   string `json:"key"`
	Grant int    `json:"grant"`
	Token uint64 `json:"token,string,omitempty"`
	// A release's answer: Lost reports that the part had been lost
	// (before the release, or as its release found); Err and ErrKind are
	// the part's own release error, if any.
	Lost    bool   `json:"lost,omitempty"`
	Err     string `json:"err,omitempty"`
	ErrKind string `json:"err_kind,omitempty"`
}

// Error kinds in replies.
const (
	kindNotAcquired = "not-acquired"
	kindLost        = "lost"
	kindUnavailable = "unavailable"
	kindNotHeld     = "not-held"
	kindNotLive     = "not-live"
	kindTimeout     = "timeout"
	kindOther       = "error"
)

// Write outcomes in replies.
const (
	writeOK      = "ok"
	writeStale   = "stale"
	writeTimeout = "timeout"
	writeError   = "error"
	writeSkipped = "skipped" // the lock was not live: nothing sent
)

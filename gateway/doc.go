// Package gateway serves fenced locks, and leader elections, over HTTP, so
// that programs in any language get the same locks as a Go program with a
// distlock.Client: a blocking acquire that waits on the lock service's own
// signal, a fencing token with every grant, renewal by the gateway, and
// loss reported early.
// `distlock serve` runs it.
//
// # Model
//
// A client first creates a session (POST /v1/sessions {owner, ttl}). The
// session is a lease that owns the client's locks: the client keeps it
// alive with POST /v1/sessions/{id}/keepalive, a long-poll that returns
// at once when something happened to one of its locks (lock_lost, at_risk)
// and otherwise after ?wait=, always with the time left. A session that
// is not kept alive for its TTL ends, and its locks are released; so does
// DELETE /v1/sessions/{id}. A session does not expire while one of its
// requests (an acquire or a keepalive) is in progress, which bounds how
// long a vanished client's session lives to its longest wait plus its TTL.
//
// The gateway holds each lock through a distlock.Client of the session
// (with the session's owner and TTL), which renews it and applies the
// local deadline rule; the time left it reports for a lock is the lesser
// of the session's and that lock's. A client must treat a lock as held
// only until the send time of its last confirming request plus the time
// left reported in the answer, and must pass the token to the storage it
// protects: a gateway that dies frees nothing early on a lock service
// with TTLs, but a lock held by a connection or a process (the file
// backend) is freed at once, and then only the token keeps an old holder
// out.
//
// A session id carries an epoch drawn when the gateway starts: a
// restarted gateway answers 404 to the sessions of its previous life, and
// never re-creates them.
//
// Several gateways over one network lock service (etcd, ZooKeeper, Redis,
// PostgreSQL) exclude each other's clients, since every grant comes from
// the service; the gateway keeps no lock state of its own beyond its
// sessions.
//
// # API
//
// Served under /v1 as JSON, described by the OpenAPI document served at
// /v1/openapi.json (and kept in this package as openapi.json). Errors are
// application/problem+json (RFC 9457) with a stable type per kind of
// error (see the Problem constants) and a real status code. A request
// body is a JSON object of known fields; a field is given a value or left
// out for its default, and one set to null is refused (400 bad-request
// naming it), never taken as left out ("shared": null is not an
// exclusive acquire).
//
// An acquirer that gives up (its acquire's answer may be lost, or the
// acquire may still wait here, not having seen the client go) sends POST
// /v1/locks/{name}/abandon {session}: it ends the session's acquire of
// the name in progress and releases the session's grant of it, whatever
// its token, and answers 204 once nothing of the session is pending or
// held on the name.
//
// POST /v1/locks/{name}/owner {session, token, owner} replaces the owner
// of the session's lock at the lock service (distlock.Lock.SetOwner),
// owner-checked as a release is: a token that is not the session's grant
// changes nothing (409, ProblemNotHeld), nor does a lock lost meanwhile
// (409, ProblemLockLost); reads of the lock, listings, the dashboard and
// an owner event report the new owner. A term's value changes with
// proclaim (see Elections), and is reported as the term's owner the same
// way; a service that cannot change a held grant's owner is answered 501.
//
// Watching: GET /v1/locks/{name}?index=N&wait=30s is a blocking read
// (after Consul's): it answers who holds the lock once the lock changes
// through this gateway after index N, or the wait ends; GET /v1/events is
// a stream of Server-Sent Events (granted, released, lost, owner) of the
// locks held through this gateway, with heartbeats and Last-Event-ID resume. A
// stream that cannot be sent every event since the one it asks for, or
// since it began (it resumes too late, or it reads more slowly than the
// events come for more than the 1024 events the gateway keeps), gets a
// reset event: events were missed, and what it knows must be read anew.
// A slow stream never holds up the gateway, and one that takes more than
// 10 seconds to accept a write is closed.
// Neither sees the changes made through another gateway before the lock
// service is asked (a blocking read asks it once, when it answers).
//
// Listing: GET /v1/locks?prefix= answers the holders from the lock
// service when it can list them (else those held through this gateway),
// asking it only about the names the caller may use. When the service
// could not read some lock entries (a file:// lock file that the
// gateway's user may not open), the others are listed and those are
// named under "unread", as `distlock status` names them; only a listing
// that could read none under its prefix fails. A read of one lock, and
// the sequencer check, answer for a holder found so; a read of a lock
// whose entry could not be read answers held null, "cannot tell".
//
// Lock names are path segments and must be percent-encoded ("/" as %2F;
// a name that is exactly "." or ".." as %2E or %2E%2E); a path with a raw
// "." or ".." segment is refused with 400. Names are distlock keys
// (distlock.ValidateKey): 1 to 512 bytes of UTF-8 without control
// characters. So are election names, which leave room for the prefix
// "election/".
//
// # Shared locks
//
// POST /v1/locks/{name}/acquire {session, shared: true} asks for a shared
// (read) lock of the name, on a lock service that grants them
// (driver.SharedLocks; any other answers 501, ProblemUnsupported, and
// holds nothing). It shares the name with the name's other shared locks
// and excludes its ordinary, exclusive locks, which exclude it (an
// exclusive lock of the name is the writer of the read/write lock of
// package rwlock): askers are served in arrival order, a writer waiting
// for the name blocks the readers who come after it, and a try (wait=0)
// fails while a writer holds or waits. Each shared lock has its own
// token, from the name's lock counter (above every earlier grant's of
// the name), and is the session's as a lock is: renewed by its
// keepalives (which list it with shared true), reported lost as a lock
// is, released through the lock routes with its token (release, abandon),
// and released when the session ends. A session holds a name once, as
// one kind: a shared lock is never upgraded (an exclusive acquire of a
// name the session holds shared is refused with 409, as is the reverse).
// GET /v1/locks/{name} answers the name's shared locks under "readers",
// by token, as the lock service has them (whichever gateway or client
// holds them), and held and holder of its exclusive holder alone; a
// listing marks a name's shared locks "shared", after its exclusive
// holder; the sequencer check answers a live shared lock's token with
// "reader": true and "current": false, so that a store fencing writes by
// "current" refuses a reader's; an event of a shared lock has shared true. A forced release
// names one shared lock by its token, or, without a token, releases
// every shared lock of the name held through this gateway (answered under
// "tokens"; when the lock service fails to release some of them, the
// answer is the failure's problem, 500 or 503, counting them and naming
// the tokens released and failed under "released_tokens" and
// "failed_tokens"). The dashboard shows each shared lock as a holder (its
// owner, token and time left), marked shared with the count of the name's
// readers.
//
// # Elections
//
// Leader elections of package election, over the same sessions: POST
// /v1/elections/{name}/campaign?wait=30s {session, value} waits until the
// session is elected (wait defaults to WithMaxWait; wait=0, or any wait
// under WithMaxWait(0), makes a campaign one try, elected at once when
// the election has no leader), and answers the term: its token (strictly
// greater than every earlier term's of the election: the fencing token),
// its value (the session's owner unless sent) and its time left, which a
// client counts as for a lock. A wait
// that ends first is answered 409 (ProblemNotElected, with the leader when
// it can be read). The session holds the term as the lock election/NAME
// (election.KeyPrefix), through its own Client: its keepalives renew the
// term and report its loss as that lock's lock_lost, the term counts among
// the session's locks, and a session that ends (deleted, expired, its
// gateway closed) ends its term, whose context is cancelled before another
// candidate can be elected, as it ends a campaign in progress, which then
// never answers a term. A retried campaign answers the session's term, or
// waits for its campaign in progress. A session cannot campaign while it
// holds the election's key as a lock, nor acquire it as a lock while it
// leads.
//
// POST .../resign {session, token} and POST .../proclaim {session,
// token, value} are owner-checked: a token that is not the session's
// live term (an earlier term's, another session's) changes nothing
// (409, ProblemNotHeld). GET .../leader answers the leader as the lock
// service has it, whoever elected it (another gateway, a Go program, an
// etcdctl elect on etcd), or 404 (ProblemNoLeader). GET .../observe is a
// stream of Server-Sent Events: the leader first, then each change in
// term order, a "leader" event {election, value, token} (a proclamation
// too) or a "no_leader" event; like election.Observe it reports states,
// so that a slow stream gets the latest, and a term that begins and ends
// between two reads of the service is not seen. Observe streams count
// with the event streams (WithMaxStreams). A token may use an election
// if it may use its lock name, election/NAME. A leader's value is at most
// 1024 bytes of UTF-8 without control characters; one that another
// client of the service stored with control characters is answered with
// them escaped, as every answer is.
//
// # Dashboard
//
// GET / is a page (one HTML file with its script and style inline, no
// external assets) that names the lock service it serves (its kind, and
// the URL given with WithServiceURL, with its user information and
// secrets masked) and shows the locks held through this gateway: holder, token,
// held for, time left, and what keeps the lock, as is true of the
// service (a lease the gateway renews, with its last confirmed renewal; a
// session with the service kept alive; or, for a lock without a lease,
// the lock file or connection it lasts as long as). Locks at risk (no
// renewal confirmed in time: see distlock.Lock.AtRisk) and expiring (its
// client has not kept its gateway session alive for two thirds of the
// session's TTL) are coloured and said. The acquires waiting for a lock
// are listed under it, in order, with their count on its row. A filter
// keeps the locks whose names start with a prefix, and the locks can be
// sorted by any column. The page also shows contention (acquires and
// hand-offs per second, a wait p95 that counts the acquires still
// waiting with their wait so far, the most contended locks: see
// Gateway.Contention), the sessions, and a feed of losses with their
// reasons, forced releases and stale-token rejections. On a narrow screen
// each row is a card of labelled lines, and names break after their
// separators ("/", ".", "-", "_", ":"), inside a part only when it is
// wider than the screen. It reads GET /v1/dashboard and refreshes on each
// event of GET /v1/events (a reset event included), and every second.
// With tokens the page asks for one and keeps it in the tab's
// sessionStorage; without tokens it shows no token field. A forced
// release needs an admin token, or, on a gateway without tokens,
// WithForceWithoutTokens (`distlock serve --allow-force-release`): the
// page says which holds, and a caller who may gets a forced release
// button per lock, which asks for confirmation; a refresh keeps the rows
// of the locks still held, so that a click that spans it is not lost.
// Names and owners are shown as text only, one with a character that does
// not print (a control, a bidirectional control such as U+202E, a
// zero-width character) quoted with escapes, as `distlock status` shows
// it; and the page's Content-Security-Policy allows its own script alone.
//
// # Limits
//
// Request bodies are at most MaxBody bytes; the number of sessions, of
// locks per session (its terms included), of waiting requests (acquires,
// campaigns, keepalives and blocking reads) and of event streams (observe
// streams included) is bounded (WithMaxSessions, WithMaxLocks,
// WithMaxWaiting, WithMaxStreams), each wait at most
// WithMaxWait, and a session's TTL at most 10 minutes (WithTTLRange), so
// that a client that vanishes frees its locks and its place in time.
// With tokens each token has its own share of the sessions, waiting
// requests and event streams (set in its entry of the token file, or an
// even part of what the other tokens leave), so that one token's clients
// cannot starve another's; without tokens all callers share the limits.
//
// A request over a limit is answered 429. Over the limits of the gateway
// or of a token's share it is ProblemTooMany, with a Retry-After: others
// free their places in time, so that a retry later may pass. An acquire
// (or a campaign, or a permit) in a session that already holds or waits
// for WithMaxLocks locks (`distlock serve --max-locks`) is
// ProblemSessionLimit instead, with the limit as the problem's "limit"
// member and no Retry-After: only the session itself frees a place, by a
// release, so that a client is to give up, release, or use another
// session, never retry as it is.
//
// An idle session costs about 5 KB of heap and no goroutine (measured with 10,000 sessions, the default limit: about 48 MB
// in all); a held lock costs one goroutine, and a session holding locks
// one more (its Client's watchdog). A session keeps at most 256 events for
// its next keepalive, and the gateway the last 1024 for its event streams;
// a stream writes at most about 64 KB of them at once.
// The dashboard's counts keep at most 1024 lock names, 512 waits and 64
// rejections. Every body is read into memory (at most MaxBody) before a
// handler runs, within a timeout, and Serve sets the HTTP server's
// timeouts, so that a slow client cannot hold a connection.
//
// # Authentication
//
// With tokens (WithTokens, `distlock serve --tokens FILE`; ReadTokens
// refuses a file that other users may read or write, or own), every request
// under /v1 but the OpenAPI document needs "Authorization: Bearer TOKEN";
// each token may use the lock names that start with one of its prefixes,
// and only a token with the admin scope may force the release of another
// session's lock. A session belongs to the token that created it (and an
// admin token that may use every name may use it too). Tokens
// are never logged. Without tokens every request may take any lock, which
// is safe only on the loopback interface: `distlock serve` then refuses to
// listen elsewhere, and the gateway answers only requests whose Host is
// localhost or a loopback address (against DNS rebinding). Forced
// releases are then refused, unless WithForceWithoutTokens (`distlock
// serve --allow-force-release`) allows them to every caller; the
// dashboard shows a forced release button only to a caller who may.
//
// A web page that the user of the gateway's host opens is not a caller:
// the gateway refuses every request that changes something (any method
// but GET, HEAD and OPTIONS) when the browser says that it comes from a
// page of another origin, another port of the same host included
// (Sec-Fetch-Site other than same-origin or none, or else an Origin that
// is not the gateway's), and every request body not sent as
// application/json, which a page can send to another origin only after
// a CORS preflight that the gateway never grants. Programs send neither
// header; the dashboard is served from the gateway's own origin.
package gateway

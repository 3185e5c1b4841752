// Package gatewaylock is a driver.Backend that takes its locks from a
// distlock gateway (`distlock serve`, package gateway) over HTTP, so that
// Go programs share the gateway's locks with programs in other languages.
//
//	b, err := gatewaylock.OpenURL(ctx, "distlock+http://127.0.0.1:7420")
//	if err != nil {
//		return err
//	}
//	defer b.Close()
//	client, err := distlock.New(b)
//
// # Sessions
//
// The Backend keeps one gateway session per distinct TTL and owner it is
// asked for (a Client has one of each, so one session per Client as a
// rule), created by the first Acquire that needs it and shared by every
// lock with that TTL and owner: an acquire and a release are one request
// each, and nothing else is sent per lock. The gateway holds each lock of
// a session with the session's TTL, which is the TTL of the Acquire that
// created it; the ttl given to Refresh is only checked. Two Clients of one
// Backend that want the same key at once get a session each, since the
// gateway answers a second acquire of a key in one session with the
// first one's grant.
//
// Each session is kept alive by one loop: a long-poll keepalive of a
// quarter of the TTL (at most WithMaxWait), repeated. The gateway answers
// it early when a lock of the session is lost or at risk, and always with
// the time left of each lock. The validity of a grant is the time left
// that the gateway reported, counted from the send time of the request
// that the answer was to (the acquire, then the newest keepalive), so the
// Client's local deadline never outlasts what the gateway vouches for.
// Refresh hands out the loop's newest answer when it still vouches for
// half its time, and otherwise sends a keepalive that does not wait
// (RefreshAll: one per session).
//
// Losses are reported through OnLost: a lock_lost event, a lock that an
// answer no longer lists, and the end of the session, which ends every
// lock in it. The session ends when the gateway answers 404 (it restarted,
// with a new epoch, or the session expired), refuses the token, or nothing
// listens where it was; and when the long-poll's connection is cut (a
// gateway that dies cuts it at once) and a keepalive sent at once on a new
// connection fails to reach the gateway too. That is what tells a holder
// of a lock on a backend that frees a dead process's locks at once (the
// file backend) that its lock is gone before a restarted gateway can grant
// it again; a holder that sees no cut (a partition at the same time) learns
// of it only when its keepalive times out, and then only the fencing token
// keeps it out. A busy or failing gateway (5xx, 429, a timeout) does not
// end the session: the loop retries, and the local deadline covers the
// time between. The next Acquire after a session ended creates a new one.
//
// An acquire whose answer is lost on the way (the connection broke after
// the request was sent) is sent again, twice at most: the gateway answers
// the same acquire in the same session with the grant it made. An Acquire
// that fails or is cancelled in a way that leaves the gateway's outcome
// unknown abandons the key before it returns (POST
// /v1/locks/{name}/abandon): the gateway ends the session's acquire of it
// still waiting there and releases whatever it granted, so that the lock
// is nobody's once Acquire has returned. A grant that no lease has all
// the same (the abandon failed too, a release did not reach the gateway)
// is released, fenced by its token, when the next keepalive answer lists
// it. Close deletes the sessions, which
// releases whatever they still hold (and reports it lost through OnLost).
//
// A blocking Acquire waits in the gateway (a long-poll of at most
// WithMaxWait, repeated), which waits on the lock service's own signal.
//
// The gateway bounds the locks that one session holds or waits for at
// once (gateway.WithMaxLocks, `distlock serve --max-locks`; 64 by
// default, terms included), and so the locks of one Client with one TTL
// and owner: a partition member alone in its group holds every unit plus
// its membership. An acquire past the limit fails at once with an error
// matching ErrSessionLimit that names the limit, a blocking Acquire and a
// partition's Run included; it is not retried as a busy gateway's 429 is,
// since the gateway refuses it until a lock of the session is released.
//
// # Elections
//
// A candidacy (package election's Campaign: driver.AcquireOptions.Election
// with the key election/NAME) goes through the gateway's election routes:
// a campaign (POST /v1/elections/{name}/campaign, with the candidate's
// value) in a session of the candidacy's TTL with the value as its owner,
// as for a lock. A campaign that does not wait (distlock.WithWait(false)
// among the election's lock options) is sent with wait=0, one try at the
// gateway, which needs a gateway that takes wait=0 on a campaign (an
// older one refuses it 400 unless its WithMaxWait is 0). The gateway holds the term as the lock
// election/NAME of the session, renewed by the session's keepalives and
// reported lost as its other locks are; Proclaim is POST .../proclaim and
// Resign POST .../resign, both owner-checked by the term's token. A Go
// candidate and a program that campaigns through the HTTP routes, in any
// language, thus take part in one election. A lock's SetOwner is POST
// /v1/locks/{name}/owner, owner-checked too; a gateway without that route
// gives an error matching errors.ErrUnsupported.
//
// # Shared locks
//
// The Backend is a driver.SharedLocks: AcquireShared is POST
// /v1/locks/{name}/acquire with shared true, in a session as for a lock,
// so that a shared lock is renewed, reported lost, abandoned and released
// as a lock is, and excludes (and is excluded by) the gateway's exclusive
// locks of the key, whichever clients of the gateway's lock service ask:
// the gateway's lock service grants, orders and fences them (its tokens
// come from the key's lock counter), and what it guarantees of shared
// locks (the waiting order, writers before later readers, the release of
// an abandoned reader's grant within its TTL) holds through the gateway,
// a blocking acquire waiting there as for a lock. A session holds a key
// once, so that each shared lock of one key asked at once through one
// Backend gets a session of its own. A gateway whose lock service cannot
// grant shared locks answers 501, which AcquireShared gives as an error
// matching errors.ErrUnsupported (never retried as an unavailable
// service). Readers is the readers of GET /v1/locks/{name}, as the lock
// service has them; a gateway that does not list them gives an error
// matching errors.ErrUnsupported. List marks a key's shared locks as
// Shared.
//
// # Holders, and how a watch waits
//
// The Backend is a driver.HolderReader: the holder of an election's key
// is its leader (GET /v1/elections/{name}/leader, with its value as the
// owner), as the lock service has it whoever elected it; the holder of
// any other key is the lock's (GET /v1/locks/{name}). It is a
// driver.HolderWatcher pushed by the gateway's Server-Sent Events, one
// stream per watch: an election's key through its observe stream, which
// follows the lock service, so that a change made through another gateway
// or by another client of the service wakes it too; any other key through
// the events of the locks held through this gateway (GET /v1/events:
// grants, releases, losses, new owners), which do not tell of a change
// made elsewhere: a Client's Watch then
// reads the holder again at its expiry, where the service tells one. A
// watch ends with its context, with its stream (the Client's Watch then
// reads and watches again), and with Close; a gateway that has no room
// for another stream (429) or no such route makes the Client's Watch poll
// (errors.ErrUnsupported).
//
// The Backend is a driver.Lister (GET /v1/locks), so that `distlock
// status --backend distlock+http://...` lists the locks through a gateway.
package gatewaylock

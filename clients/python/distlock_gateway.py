"""A client of the distlock gateway (`distlock serve`), standard library only.

    from distlock_gateway import Gateway

    gw = Gateway("http://127.0.0.1:7420")            # token="..." with --tokens
    with gw.session(owner="report-job", ttl=15) as s:  # kept alive in a thread
        lock = s.acquire("reports/daily", wait=30)     # raises NotAcquired (SessionLimit past --max-locks)
        storage.write(data, fence=lock.token)          # the storage refuses older tokens
        if not lock.valid():                           # lost, or not confirmed in time
            ...
        lock.release()

Elections (a term is held by the session as the lock election/NAME, so
that the keepalive thread renews it and reports its loss as a lock's):

    term = s.campaign("payments/leader", value="10.0.0.7:8080", wait=30)  # raises NotElected
    storage.write(data, fence=term.token)          # strictly greater than every earlier term's
    if not term.valid(): ...                       # lost (term.lost says why), or not confirmed in time
    term.proclaim("10.0.0.7:9090")                 # a new value, same term
    term.resign()                                  # a stale term never ends a later one
    gw.leader("payments/leader")                   # Leader(election, value, token), or None
    for leader in gw.observe("payments/leader"):   # each change in term order; None: no leader
        ...

Semaphores (a permit is held by the session as the lock semaphore/NAME,
renewed and lost as a lock; every holder names the same limit):

    permit = s.acquire_permit("exports", limit=3, slots=True, wait=30)  # raises NotAcquired
    storage.write(data, fence=permit.token)        # strictly greater than every earlier grant's
    permit.slot                                    # with slots: in [0, 3), no other live permit's
    permit.release()
    gw.permits("exports")                          # Permits(semaphore, limit, waiting, holders)

Shared (read) locks, on a lock service that grants them (the gateway
answers 501, kind "unsupported", otherwise): readers share the name, and
exclude its ordinary locks, which exclude them; a writer waiting for the
name blocks the readers who come after it:

    lock = s.acquire("reports/daily", wait=30, shared=True)  # raises NotAcquired
    lock.shared                                    # True; token, valid(), release() as a lock's
    gw.readers("reports/daily")                    # the live shared locks (dicts: token, owner, since, expires)

A lock is valid until the send time of the last request that confirmed it
plus the time left the gateway reported, unless the gateway reported it
lost. A keepalive that cannot reach the gateway, because nothing listens
there any more, ends the session at once: a gateway keeps its sessions in
memory, so one that went away took them along. So does a keepalive that
the gateway refuses (401 or 403: the token was revoked or rotated), or
that fails in this process: the session's locks are then lost with that
reason (lock.lost), on_lost(lock, reason) is called if given, session.error
holds the exception, and the session's next acquire raises SessionGone.
A gateway keeps a session's 256 newest events for its next keepalive:
session.events_dropped counts those it dropped, and a lock found gone,
without an event of its own, by a keepalive that reports dropped events
is lost with the reason "event_dropped".

Pass lock.token to the storage you protect: only the token keeps out a
holder that was paused past its deadline.
"""

import collections
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["Gateway", "Session", "Lock", "Term", "Permit", "Leader", "Permits", "GatewayError", "NotAcquired",
           "NotElected", "SessionGone", "SessionLimit"]

# The lock name of the election NAME is ELECTION_PREFIX + NAME.
ELECTION_PREFIX = "election/"

# The lock name of the semaphore NAME is SEMAPHORE_PREFIX + NAME.
SEMAPHORE_PREFIX = "semaphore/"

Permits = collections.namedtuple("Permits", "semaphore limit waiting holders")
Permits.__doc__ = """A semaphore as the lock service has it: its stored limit (0 when
nothing holds or awaits a permit, None where the service stores none), how
many wait, and its live permits (dicts: token, owner, since, expires, slot)."""

Leader = collections.namedtuple("Leader", "election value token")
Leader.__doc__ = "The leader of an election: its value and the token (an int) of its term."


class GatewayError(Exception):
    """An error answer of the gateway (application/problem+json), or no answer."""

    def __init__(self, status, type_, detail, holder=None, leader=None, limit=None):
        super().__init__("%s %s: %s" % (status, type_.rsplit(":", 1)[-1], detail))
        self.status = status
        self.type = type_
        self.detail = detail
        self.holder = holder
        self.leader = leader
        self.limit = limit

    @property
    def kind(self):
        """The last part of the problem type, such as "not-acquired"."""
        return self.type.rsplit(":", 1)[-1]


class NotAcquired(GatewayError):
    """The lock was held by another when the wait ended; .holder may say who."""


class NotElected(GatewayError):
    """Another candidate led when the campaign's wait ended; .leader (a Leader) may say who."""


class SessionGone(GatewayError):
    """The session ended (expired, deleted, or the gateway went away)."""


class SessionLimit(GatewayError):
    """The session already holds or waits for .limit locks (terms and permits
    included), the most the gateway allows in one session (distlock serve
    --max-locks). Unlike kind "too-many" (a 429 with Retry-After, which may
    pass later), it lasts until the session releases one: release a lock,
    use another session, or raise the gateway's limit; do not retry as is."""


def _quote(name):
    # One path segment: "/" and "." too, so that "." and ".." stay names.
    return urllib.parse.quote(name, safe="").replace(".", "%2E")


class Gateway:
    """A distlock gateway at url, with an optional bearer token."""

    def __init__(self, url, token=None, timeout=30.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _open(self, method, path, body, timeout):
        """Sends one request and returns the open response, or raises GatewayError."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            try:
                p = json.loads(e.read())
            except ValueError:
                p = {}
            cls = GatewayError
            t = p.get("type", "http")
            if t.endswith(":not-acquired"):
                cls = NotAcquired
            elif t.endswith(":not-elected"):
                cls = NotElected
            elif t.endswith(":session-not-found"):
                cls = SessionGone
            elif t.endswith(":session-limit"):
                cls = SessionLimit
            leader = p.get("leader")
            if isinstance(leader, dict):
                leader = Leader(leader.get("election"), leader.get("value"), int(leader.get("token", 0)))
            raise cls(e.code, t, p.get("detail", e.reason), p.get("holder"), leader, p.get("limit")) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, ConnectionRefusedError):
                raise SessionGone(0, "unreachable", "nothing listens at %s: the gateway went away" % self.url) from None
            raise GatewayError(0, "unavailable", str(reason)) from None

    def request(self, method, path, body=None, wait=0.0):
        """Sends one request; returns the decoded answer or raises GatewayError."""
        resp = self._open(method, path, body, wait + self.timeout)
        try:
            with resp:
                raw = resp.read()
                status = resp.status
        except OSError as e:
            raise GatewayError(0, "unavailable", str(e)) from None
        try:
            return json.loads(raw) if raw else {}
        except ValueError as e:
            raise GatewayError(status, "malformed", "the answer is not JSON: %s" % e) from None

    def session(self, owner="", ttl=15.0, keepalive=True, on_lost=None):
        """Creates a session; with keepalive, a thread keeps it alive.
        on_lost(lock, reason), if given, is called (from the keepalive
        thread) when a lock of the session is lost; it must not block."""
        sent = time.monotonic()
        a = self.request("POST", "/v1/sessions", {"owner": owner, "ttl": "%dms" % int(ttl * 1000)})
        s = Session(self, a["id"], ttl, sent + a["ttl_remaining_ms"] / 1000.0, on_lost)
        if keepalive:
            s.start()
        return s

    def check(self, name, token):
        """The sequencer check: is token the current exclusive grant of name?

        A live shared (read) lock's token is not: see check_reader."""
        return self.request("POST", "/v1/locks/%s/check" % _quote(name), {"token": str(token)})["current"]

    def check_reader(self, name, token):
        """Is token a live shared (read) lock's of name? A reader validates its read so."""
        return self.request("POST", "/v1/locks/%s/check" % _quote(name), {"token": str(token)}).get("reader", False)

    def leader(self, election):
        """The election's leader as the lock service has it now: a Leader, or None."""
        try:
            a = self.request("GET", "/v1/elections/%s/leader" % _quote(election))
        except GatewayError as e:
            if e.kind == "no-leader":
                return None
            raise
        return Leader(a["election"], a["value"], int(a["token"]))

    def readers(self, name):
        """The live shared locks of name as the lock service has them, by
        token (dicts: token, owner, since, expires; token a decimal string),
        or None when the lock service cannot grant shared locks."""
        return self.request("GET", "/v1/locks/%s" % _quote(name)).get("readers")

    def permits(self, semaphore):
        """The semaphore's limit, waiters and live permits (Permits)."""
        a = self.request("GET", "/v1/semaphores/%s" % _quote(semaphore))
        return Permits(semaphore, a["limit"], a["waiting"], a["holders"])

    def observe(self, election):
        """Yields the election's leader as it changes: first as it is, then
        each change in term order (tokens never decrease), a Leader, or None
        when the election has no leader. It reports states, not every
        event: a term that begins and ends while the caller is slow is not
        seen, the latest state always is. It ends when the gateway ends the
        stream; close() the generator to stop. Raises GatewayError if the
        gateway refuses, or the stream breaks (no heartbeat within timeout)."""
        resp = self._open("GET", "/v1/elections/%s/observe" % _quote(election), None, self.timeout)
        with resp:
            typ, data = None, None
            while True:
                try:
                    raw = resp.readline()
                except OSError as e:
                    raise GatewayError(0, "unavailable", "the stream broke: %s" % e) from None
                if not raw:
                    return
                line = raw.decode("utf-8").rstrip("\r\n")
                if line == "":
                    if typ == "leader" and data is not None:
                        yield Leader(data["election"], data["value"], int(data["token"]))
                    elif typ == "no_leader":
                        yield None
                    typ, data = None, None
                elif line.startswith("event:"):
                    typ = line[6:].strip()
                elif line.startswith("data:"):
                    data = json.loads(line[5:].strip())


class Lock:
    """A lock held by a session. token is the fencing token (an int);
    shared is True for a shared (read) lock."""

    def __init__(self, session, name, token, deadline, shared=False):
        self.session = session
        self.name = name
        self.token = token
        self.shared = shared
        self.deadline = deadline  # time.monotonic() until which it is held
        self.lost = None  # why it was lost, once it was
        self.at_risk = False
        self.granted = time.monotonic()  # when the grant's answer came
        self.giving_up = False  # a release (or resignation) was sent

    def valid(self):
        """Whether the lock is still held, as far as this process can vouch."""
        with self.session._mu:
            return self.lost is None and time.monotonic() < self.deadline

    def time_left(self):
        with self.session._mu:
            return 0.0 if self.lost else max(0.0, self.deadline - time.monotonic())

    def release(self):
        """Releases the lock, fenced by its token: a newer holder is never freed.
        Raises GatewayError (kind "not-held" or "lock-lost") if it was not
        held: lost then says so ("not_held", or "lost"), not "released"."""
        self.session._giving_up(self)
        why = "released"
        try:
            self.session.gw.request("POST", "/v1/locks/%s/release" % _quote(self.name),
                                    {"session": self.session.id, "token": str(self.token)})
        except GatewayError as e:
            why = _gone_why(e, why)
            raise
        finally:
            self.session._forget(self, why)


def _gone_why(err, why):
    """What a release or resignation that raised err says of the lock: that
    it was not held, or lost, when the gateway says so; else why."""
    return {"not-held": "not_held", "lock-lost": "lost"}.get(err.kind, why)


class Term(Lock):
    """A term of an election, held by its session as the lock election/NAME:
    token is its fencing token (an int, strictly greater than every earlier
    term's), value the leader's value. valid(), lost and on_lost are a
    Lock's: the keepalives renew the term and report its loss."""

    def __init__(self, session, election, token, value, deadline):
        super().__init__(session, ELECTION_PREFIX + election, token, deadline)
        self.election = election
        self.value = value

    def proclaim(self, value):
        """Replaces the leader's value, in the same term. Raises GatewayError
        (kind "not-held" or "lock-lost") if the term ended."""
        a = self.session.gw.request("POST", "/v1/elections/%s/proclaim" % _quote(self.election),
                                    {"session": self.session.id, "token": str(self.token), "value": value})
        self.value = a["value"]

    def resign(self):
        """Ends the term, owner-checked by its token: a later term, this
        session's or another's, is never ended. Raises GatewayError (kind
        "not-held" or "lock-lost") if the term had ended: lost then says so
        ("not_held", or "lost"), not "resigned"."""
        self.session._giving_up(self)
        why = "resigned"
        try:
            self.session.gw.request("POST", "/v1/elections/%s/resign" % _quote(self.election),
                                    {"session": self.session.id, "token": str(self.token)})
        except GatewayError as e:
            why = _gone_why(e, why)
            raise
        finally:
            self.session._forget(self, why)

    release = resign


class Permit(Lock):
    """A permit of a semaphore, held by its session as the lock
    semaphore/NAME: token is its fencing token (an int), slot its slot
    (None without slots). valid(), lost, on_lost and release() are a
    Lock's."""

    def __init__(self, session, semaphore, token, slot, deadline):
        super().__init__(session, SEMAPHORE_PREFIX + semaphore, token, deadline)
        self.semaphore = semaphore
        self.slot = slot


class Session:
    """A gateway session: a lease that owns locks and terms."""

    def __init__(self, gw, id_, ttl, deadline, on_lost=None):
        self.gw = gw
        self.id = id_
        self.ttl = ttl
        self.deadline = deadline
        self.on_lost = on_lost
        self.gone = None  # why the session ended, once it did
        self.error = None  # the exception that ended the keepalive thread, if one did
        self.events = []  # every event the keepalives reported
        self.events_dropped = 0  # events the gateway dropped before a keepalive took them
        self.locks = {}
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        self._thread = threading.Thread(target=self._keepalive_loop, name="distlock-keepalive", daemon=True)
        self._thread.start()

    def acquire(self, name, wait=30.0, shared=False):
        """Acquires name, waiting at most wait seconds; with shared, a
        shared (read) lock of it. Raises NotAcquired (also when the session
        holds name as the other kind: a shared lock is never upgraded),
        GatewayError (kind "unsupported") for a shared lock the lock
        service cannot grant, SessionLimit when the session holds the most
        locks the gateway allows in one, or SessionGone once the session
        ended."""
        if self.gone is not None:
            raise SessionGone(0, "session-ended", "the session ended: %s" % self.gone) from self.error
        body = {"session": self.id}
        if shared:
            body["shared"] = True
        sent = time.monotonic()
        a = self.gw.request("POST", "/v1/locks/%s/acquire?wait=%dms" % (_quote(name), int(wait * 1000)),
                            body, wait=wait)
        lock = Lock(self, name, int(a["token"]), sent + a["ttl_remaining_ms"] / 1000.0, bool(a.get("shared")))
        with self._mu:
            self.locks[name] = lock
        return lock

    def campaign(self, election, value=None, wait=30.0):
        """Campaigns in election, waiting at most wait seconds (more than 0)
        to be elected, with value as the leader's value (default: the
        session's owner); returns the Term. Raises NotElected when the wait
        ends, SessionLimit when the session holds the most locks the
        gateway allows in one, or SessionGone once the session ended. A
        campaign retried
        after a lost answer returns the session's term."""
        if self.gone is not None:
            raise SessionGone(0, "session-ended", "the session ended: %s" % self.gone) from self.error
        body = {"session": self.id}
        if value is not None:
            body["value"] = value
        sent = time.monotonic()
        a = self.gw.request("POST", "/v1/elections/%s/campaign?wait=%dms" % (_quote(election), max(1, int(wait * 1000))),
                            body, wait=wait)
        term = Term(self, election, int(a["token"]), a["value"], sent + a["ttl_remaining_ms"] / 1000.0)
        with self._mu:
            self.locks[term.name] = term
        return term

    def acquire_permit(self, semaphore, limit, slots=False, wait=30.0):
        """Acquires one of limit permits of semaphore, waiting at most wait
        seconds; with slots, the permit names its slot. Raises NotAcquired
        when the wait ends, GatewayError (kind "limit-mismatch") if the
        semaphore stores another limit, SessionLimit when the session
        holds the most locks the gateway allows in one, or SessionGone once
        the session ended. A session holds at most one permit of a
        semaphore: a retry
        returns it."""
        if self.gone is not None:
            raise SessionGone(0, "session-ended", "the session ended: %s" % self.gone) from self.error
        sent = time.monotonic()
        a = self.gw.request("POST", "/v1/semaphores/%s/acquire?wait=%dms" % (_quote(semaphore), int(wait * 1000)),
                            {"session": self.id, "limit": limit, "slots": slots}, wait=wait)
        permit = Permit(self, semaphore, int(a["token"]), a.get("slot"), sent + a["ttl_remaining_ms"] / 1000.0)
        with self._mu:
            self.locks[permit.name] = permit
        return permit

    def keepalive(self, wait=0.0):
        """One keepalive: waits up to wait seconds for an event; applies what it says."""
        sent = time.monotonic()
        try:
            a = self.gw.request("POST", "/v1/sessions/%s/keepalive?wait=%dms" % (self.id, int(wait * 1000)), wait=wait)
        except SessionGone as e:
            self._end(e.kind if e.kind != "session-not-found" else "session_ended")
            raise
        lost = []
        with self._mu:
            self.deadline = sent + a["ttl_remaining_ms"] / 1000.0
            # The gateway keeps a session's newest events only (256): a
            # lock whose loss was told in an event it dropped is found
            # missing below, and its reason is gone with the event.
            dropped = a.get("events_dropped", 0)
            self.events_dropped += dropped
            held = {x["lock"]: x for x in a["locks"]}
            for e in a["events"]:
                self.events.append(e)
                lock = self.locks.get(e["lock"])
                if lock is None or str(lock.token) != e["token"]:
                    continue
                if e["type"] == "lock_lost":
                    if lock.lost is None:
                        lock.lost = e.get("reason", "lost")
                        lost.append(lock)
                elif e["type"] == "at_risk":
                    lock.at_risk = True
            for name, lock in list(self.locks.items()):
                x = held.get(name)
                if lock.granted > sent and (x is None or x["token"] != str(lock.token)):
                    # Granted after this keepalive was sent: its answer
                    # may predate the grant, so it says nothing of it.
                    continue
                if x is None or x["token"] != str(lock.token):
                    if lock.giving_up:
                        # Its release was sent: the answer may follow it,
                        # and the release says how it ended.
                        continue
                    if lock.lost is None:
                        lock.lost = "event_dropped" if dropped else "not_held"
                        lost.append(lock)
                    del self.locks[name]
                else:
                    lock.deadline = sent + x["ttl_remaining_ms"] / 1000.0
                    lock.at_risk = False
        self._tell(lost)
        return a

    def _tell(self, locks):
        if self.on_lost is not None:
            for lock in locks:
                self.on_lost(lock, lock.lost)

    def _keepalive_loop(self):
        # Long-polls short enough that a lock's time left, counted from the
        # send time, is renewed well before it runs out.
        retried = False
        while not self._stop.is_set():
            try:
                self.keepalive(wait=self._wait())
                retried = False
            except SessionGone:
                return
            except GatewayError as e:
                if e.status in (401, 403) or (400 <= e.status < 500 and e.status not in (408, 429)):
                    # Refused (a revoked or rotated token), or a request
                    # the gateway will never take: nothing keeps the
                    # session alive any more.
                    self._fail(e, "refused" if e.status in (401, 403) else e.kind)
                    return
                # Not confirmed: the locks run out at their deadlines.
                lost = []
                with self._mu:
                    now = time.monotonic()
                    for lock in self.locks.values():
                        if lock.lost is None and not lock.giving_up and now >= lock.deadline:
                            lock.lost = "deadline_passed"
                            lost.append(lock)
                self._tell(lost)
                if e.status == 0 and not retried:
                    # No answer (a cut connection: a gateway that died cuts
                    # it at once): ask again at once, on a new connection,
                    # so that a restarted gateway's 404 (or nothing
                    # listening) ends the session before it can grant the
                    # lock to another; pause only if that fails too.
                    retried = True
                    continue
                retried = True
                self._stop.wait(min(0.1, self.ttl / 10))
            except Exception as e:
                # A failure in this process: the thread ends, and says so.
                self._fail(e, "keepalive_failed")
                return

    def _fail(self, err, why):
        """Ends the session for an error of its keepalive thread."""
        self.error = err
        self._end("%s: %s" % (why, err))
        try:  # release what the gateway still holds, if it lets us
            self.gw.request("DELETE", "/v1/sessions/" + self.id)
        except Exception:
            pass

    def _wait(self):
        """How long the next keepalive may wait: a quarter of the session's
        TTL, and at most a third of the time left of the lock that runs out
        first, so that the answer renews it in time: the lock service may
        confirm less than the TTL (a ZooKeeper lock lasts 5/12 of the
        gateway's session timeout, whatever the TTL)."""
        wait = self.ttl / 4
        with self._mu:
            now = time.monotonic()
            for lock in self.locks.values():
                if lock.lost is None:
                    wait = min(wait, max(0.0, lock.deadline - now) / 3)
        return wait

    def _giving_up(self, lock):
        with self._mu:
            lock.giving_up = True

    def _forget(self, lock, why):
        with self._mu:
            if self.locks.get(lock.name) is lock:
                del self.locks[lock.name]
            if lock.lost is None:
                lock.lost = why

    def _end(self, why):
        lost = []
        with self._mu:
            if self.gone is None:
                self.gone = why
            for lock in self.locks.values():
                if lock.lost is None:
                    lock.lost = why
                    if not lock.giving_up:
                        lost.append(lock)
            self.locks.clear()
        if why != "closed":
            self._tell(lost)

    def close(self):
        """Ends the session, releasing its locks."""
        self._stop.set()
        try:
            if self.gone is None:
                self.gw.request("DELETE", "/v1/sessions/" + self.id)
        except SessionGone:
            pass
        finally:
            self._end(self.gone or "closed")
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=self.ttl + self.gw.timeout)

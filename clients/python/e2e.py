"""End-to-end walk through the distlock gateway, driven by the Go tests
(cmd/distlock/internal/cli/serve_test.go and the gateway package's
runE2E): python3 e2e.py MODE URL DIR

walk: acquire, keepalive, fenced write, loss (forced release), a stale
      write refused, release; prints one JSON object.
kill: holds a lock and prints "ready TOKEN"; when the gateway is killed,
      prints how the loss was seen and how much of the lock's time was
      left then.
race: a keepalive answered before a grant but read after it leaves the
      lock valid; prints one JSON object.
hold: holds a lock for 8s with a session of the default TTL, checking
      each keepalive's wait against the lock's time left in the answer
      before, and looking at valid() every 50ms; prints one JSON object.
release: a keepalive answered after a release (or a resignation) but
      before the caller read its answer does not report a loss; a release
      (and a resignation) of a lock forced away, unseen by a keepalive,
      says it was not held; prints one JSON object.
refused TOKEN: holds a lock, then its token stops being accepted (as when
      it is rotated away): the keepalive thread ends the session and says
      why; prints one JSON object.
broken: holds a lock, then the keepalive thread fails in this process (a
      bug, a malformed answer): it ends the session and says why; prints
      one JSON object.
elect: two campaigners, one leader at a time; a resignation elects the
      next; a stale resignation refused; proclaim; a campaigner whose
      session dies loses its term before the next is elected; a term
      forced away is seen lost; observe follows it all; prints one JSON
      object.
limit MAX: a session of a gateway that allows MAX locks per session holds
      MAX; one more lock, shared lock, term or permit raises SessionLimit,
      which names the limit; after a release the next lock is granted; prints
      one JSON object.
dropped N: a session without keepalives takes N locks, each forced away
      (N loss events, more than the gateway keeps), then keeps alive once:
      the events dropped are counted and every lock is lost, with its
      event's reason or "event_dropped"; prints one JSON object.
(permits and shared, see their functions.)
"""

import collections
import fcntl
import json
import os
import sys
import threading
import time
import urllib.parse

from distlock_gateway import Gateway, GatewayError, NotAcquired, NotElected, SessionGone, SessionLimit


class FencedFile:
    """Storage that keeps its own fence: it refuses a write whose token is
    below the highest it has seen. Tokens are kept in JSON as decimal
    strings, as distlock writes them: a JSON number above 2^53 loses
    digits in JavaScript."""

    def __init__(self, path):
        self.path = path

    def write(self, token, data):
        with open(self.path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            raw = f.read()
            cur = json.loads(raw) if raw else {"token": "0"}
            if token < int(cur["token"]):
                return False
            f.seek(0)
            f.truncate()
            json.dump({"token": str(token), "data": data}, f)
            return True


def until(cond, timeout, what):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise SystemExit("timed out: " + what)
        time.sleep(0.01)


def walk(url, d):
    out = {}
    gw = Gateway(url)
    store = FencedFile(os.path.join(d, "store.json"))
    name = "e2e/report.daily"
    s = gw.session(owner="python-e2e", ttl=2.0)
    lock = s.acquire(name, wait=5)
    out["token"] = str(lock.token)
    # Several keepalives renew the lock past its TTL.
    time.sleep(3.0)
    out["valid_after_ttl"] = lock.valid()
    out["time_left"] = lock.time_left()
    out["first_write"] = store.write(lock.token, "v1")
    out["check_current"] = gw.check(name, lock.token)
    # An operator forces the release (the gateway allows it: serve
    # --allow-force-release): the keepalive reports the loss.
    gw.request("POST", "/v1/locks/e2e%2Freport%2Edaily/release", {"force": True})
    until(lambda: not lock.valid(), 10, "the loss was not reported")
    out["lost_reason"] = lock.lost
    s2 = gw.session(owner="python-e2e-2", ttl=2.0)
    lock2 = s2.acquire(name, wait=5)
    out["token2"] = str(lock2.token)
    out["second_write"] = store.write(lock2.token, "v2")
    out["stale_write"] = store.write(lock.token, "stale")
    out["check_stale"] = gw.check(name, lock.token)
    try:
        lock.release()
        out["stale_release"] = "released"
    except GatewayError as e:
        out["stale_release"] = e.kind
    lock2.release()
    out["check_after_release"] = gw.check(name, lock2.token)
    s.close()
    s2.close()
    with open(store.path) as f:
        out["stored"] = json.load(f)
    print(json.dumps(out), flush=True)


def kill(url, d):
    gw = Gateway(url, timeout=5)
    s = gw.session(owner="python-kill", ttl=5.0)
    lock = s.acquire("e2e/kill", wait=5)
    print("ready %d" % lock.token, flush=True)
    until(lambda: not lock.valid(), 30, "the loss was not seen")
    with s._mu:
        left = lock.deadline - time.monotonic()
    print(json.dumps({"lost": lock.lost, "time_left": left, "session": s.gone}), flush=True)


class SlowKeepalive(Gateway):
    """A gateway whose keepalive answers reach the session late, as when
    the answer was delayed on the way: after answered is set, until go is."""

    def __init__(self, url):
        super().__init__(url)
        self.answered = threading.Event()
        self.go = threading.Event()

    def request(self, method, path, body=None, wait=0.0):
        a = super().request(method, path, body, wait)
        if path.endswith("/keepalive?wait=0ms") and not self.go.is_set():
            self.answered.set()
            self.go.wait(10)
        return a


def race(url, d):
    gw = SlowKeepalive(url)
    s = gw.session(owner="python-race", ttl=5.0, keepalive=False)
    t = threading.Thread(target=s.keepalive)
    t.start()
    if not gw.answered.wait(10):
        raise SystemExit("timed out: the keepalive was not answered")
    lock = s.acquire("e2e/race", wait=5)
    gw.go.set()
    t.join(10)
    out = {"token": str(lock.token), "valid": lock.valid(), "lost": lock.lost}
    s.keepalive()  # a keepalive sent after the grant confirms it
    out["valid_after_next"] = lock.valid()
    lock.release()
    s.close()
    print(json.dumps(out), flush=True)


class KeepaliveAfterRelease(Gateway):
    """A gateway whose session keeps alive once more between a release's
    answer and the caller's reading it, as the keepalive thread may."""

    def __init__(self, url):
        super().__init__(url)
        self.s = None

    def request(self, method, path, body=None, wait=0.0):
        a = super().request(method, path, body, wait)
        if path.endswith("/release") or path.endswith("/resign"):
            self.s.keepalive()
        return a


def release(url, d):
    gw = KeepaliveAfterRelease(url)
    told = []
    s = gw.session(owner="python-release", ttl=5.0, keepalive=False, on_lost=lambda lock, why: told.append(why))
    gw.s = s
    lock = s.acquire("e2e/release", wait=5)
    term = s.campaign("e2e-release", wait=5)
    lock.release()
    term.resign()
    # Forced away by an operator, unseen (no keepalive runs): the release
    # and the resignation find them not held.
    forced = s.acquire("e2e/release-forced", wait=5)
    fterm = s.campaign("e2e-release-forced", wait=5)
    operator = Gateway(url)  # no keepalive after its requests
    operator.request("POST", "/v1/locks/e2e%2Frelease-forced/release", {"force": True})
    operator.request("POST", "/v1/locks/election%2Fe2e-release-forced/release", {"force": True})
    errs = []
    for end in (forced.release, fterm.resign):
        try:
            end()
            errs.append(None)
        except GatewayError as e:
            errs.append(e.kind)
    s.close()
    print(json.dumps({"lock": lock.lost, "term": term.lost, "told": told,
                      "forced": forced.lost, "forced_term": fterm.lost, "errors": errs}), flush=True)


class WaitChecked(Gateway):
    """A gateway that checks each keepalive's wait against the time left
    of the locks its previous answer listed: the wait must be at most a
    third of the least of them."""

    def __init__(self, url):
        super().__init__(url)
        self.left = None  # the least ttl_remaining_ms of the last answer's locks
        self.checked = 0
        self.over = []  # (wait ms, time left ms) of keepalives that waited too long

    def request(self, method, path, body=None, wait=0.0):
        keepalive = "/keepalive?wait=" in path
        if keepalive and self.left is not None:
            ms = int(path.rsplit("=", 1)[1].rstrip("ms"))
            self.checked += 1
            if 3 * ms > self.left:
                self.over.append((ms, self.left))
        a = super().request(method, path, body, wait)
        if keepalive:
            lefts = [x["ttl_remaining_ms"] for x in a["locks"]]
            self.left = min(lefts) if lefts else None
        return a


def hold(url, d):
    gw = WaitChecked(url)
    told = []
    s = gw.session(owner="python-hold", on_lost=lambda lock, why: told.append(why))  # the default TTL, 15s
    lock = s.acquire("e2e/hold", wait=5)
    end = time.monotonic() + 8.0
    samples = invalid = 0
    while time.monotonic() < end:
        samples += 1
        if not lock.valid():
            invalid += 1
        time.sleep(0.05)
    out = {"samples": samples, "invalid": invalid, "lost": lock.lost, "told": told,
           "checked": gw.checked, "over": gw.over}
    lock.release()
    s.close()
    print(json.dumps(out), flush=True)


def ended(gw, s, lock, told, ttl):
    """What the holder learned when its keepalive thread ended the session."""
    until(lambda: not lock.valid(), 30, "the lock stayed valid")
    with s._mu:
        left = lock.deadline - time.monotonic()
    out = {"lost": lock.lost, "told": told, "session": s.gone,
           "error": type(s.error).__name__ if s.error else None,
           "status": getattr(s.error, "status", None), "time_left": left, "ttl": ttl}
    try:
        s.acquire("e2e/after", wait=0)
        out["next_acquire"] = "acquired"
    except SessionGone as e:
        out["next_acquire"] = e.kind
    return out


def refused(url, d, token):
    ttl = 8.0
    gw = Gateway(url, token=token)
    told = []
    s = gw.session(owner="python-refused", ttl=ttl, on_lost=lambda lock, why: told.append(why))
    lock = s.acquire("e2e/refused", wait=5)
    gw.token = "not-" + token  # rotated away: every request is refused now
    print(json.dumps(ended(gw, s, lock, told, ttl)), flush=True)


class BrokenKeepalive(Gateway):
    """A gateway client whose keepalive fails in this process once broken
    is set, as a bug or an unexpected answer would."""

    def __init__(self, url):
        super().__init__(url)
        self.broken = threading.Event()

    def request(self, method, path, body=None, wait=0.0):
        if "/keepalive" in path and self.broken.is_set():
            raise KeyError("ttl_remaining_ms")
        return super().request(method, path, body, wait)


def broken(url, d):
    ttl = 8.0
    gw = BrokenKeepalive(url)
    told = []
    s = gw.session(owner="python-broken", ttl=ttl, on_lost=lambda lock, why: told.append(why))
    lock = s.acquire("e2e/broken", wait=5)
    gw.broken.set()
    out = ended(gw, s, lock, told, ttl)
    # The session was deleted: the lock is free for another session.
    s2 = Gateway(url).session(owner="python-broken-2", ttl=5.0)
    out["free_after"] = s2.acquire("e2e/broken", wait=5).token > lock.token
    s2.close()
    print(json.dumps(out), flush=True)


class Observer:
    """Follows an election's leader through gw.observe in a thread; await_
    waits until a state is seen, each state as "TOKEN=VALUE", or "" for
    no leader."""

    def __init__(self, gw, election):
        self.seen = []
        self.error = None
        self._cv = threading.Condition()
        self._gen = gw.observe(election)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            for leader in self._gen:
                with self._cv:
                    self.seen.append("" if leader is None else "%d=%s" % (leader.token, leader.value))
                    self._cv.notify_all()
        except Exception as e:  # reported by await_
            with self._cv:
                self.error = e
                self._cv.notify_all()

    def await_(self, state, after):
        """Waits until state is seen at or after index after; returns its index."""
        with self._cv:
            def found():
                return self.error is not None or state in self.seen[after:]
            if not self._cv.wait_for(found, timeout=30):
                raise SystemExit("timed out: observe did not show %r: %r" % (state, self.seen))
            if self.error is not None:
                raise SystemExit("observe failed: %r" % self.error)
            return self.seen.index(state, after)


def campaign_async(s, election, value):
    """Campaigns in a thread; returns a dict that gets the term, or the error,
    and the monotonic time of the answer, and the thread."""
    out = {}

    def run():
        try:
            out["term"] = s.campaign(election, value=value, wait=60)
        except Exception as e:
            out["error"] = e
        out["at"] = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return out, t


def leader_json(leader):
    """A Leader as JSON, its token a decimal string as distlock writes it."""
    return None if leader is None else {"value": leader.value, "token": str(leader.token)}


def elect(url, d):
    out = {}
    gw = Gateway(url)
    name = "e2e/leader"
    out["leader_before"] = leader_json(gw.leader(name))
    obs = Observer(gw, name)
    at = obs.await_("", 0)
    s1 = gw.session(owner="py-1", ttl=2.0)
    s2 = gw.session(owner="py-2", ttl=1.0)
    t1 = s1.campaign(name, value="10.0.0.1:80", wait=5)
    at = obs.await_("%d=10.0.0.1:80" % t1.token, at)
    # The second waits while the first leads; a short campaign is not elected.
    try:
        s2.campaign(name, value="x", wait=0.05)
        out["short_campaign"] = "elected"
    except NotElected as e:
        out["short_campaign"] = e.kind
        out["short_campaign_leader"] = leader_json(e.leader)
    c2, th2 = campaign_async(s2, name, "10.0.0.2:80")
    until(lambda: gw.leader(name) is not None and gw.leader(name).token == t1.token, 10, "the first leads")
    out["second_waits"] = "term" not in c2 and "error" not in c2
    out["leader_first"] = leader_json(gw.leader(name))
    t1.proclaim("10.0.0.1:81")
    at = obs.await_("%d=10.0.0.1:81" % t1.token, at)
    t1.resign()
    th2.join(30)
    if "term" not in c2:
        raise SystemExit("the second was not elected: %r" % c2.get("error"))
    t2 = c2["term"]
    out["t1"], out["t2"] = str(t1.token), str(t2.token)
    at = obs.await_("%d=10.0.0.2:80" % t2.token, at)
    out["first_valid_after_resign"] = t1.valid()
    try:
        t1.resign()
        out["stale_resign"] = "resigned"
    except GatewayError as e:
        out["stale_resign"] = e.kind
    out["leader_after_stale"] = leader_json(gw.leader(name))
    # The second's session dies (its keepalive stops, as in a crashed
    # process): its term ends before a third is elected.
    s3 = gw.session(owner="py-3", ttl=5.0)
    c3, th3 = campaign_async(s3, name, "10.0.0.3:80")
    s2._stop.set()
    s2._thread.join(5)
    th3.join(30)
    if "term" not in c3:
        raise SystemExit("the third was not elected: %r" % c3.get("error"))
    t3 = c3["term"]
    with s2._mu:
        out["dead_deadline_before_next"] = t2.deadline <= c3["at"]
    out["dead_valid"] = t2.valid()
    out["t3"] = str(t3.token)
    at = obs.await_("%d=10.0.0.3:80" % t3.token, at)
    # An operator forces the term away: the keepalive reports the loss.
    gw.request("POST", "/v1/locks/election%2Fe2e%2Fleader/release", {"force": True})
    until(lambda: not t3.valid(), 10, "the forced loss was not reported")
    out["forced_lost"] = t3.lost
    at = obs.await_("", at)
    out["leader_after"] = leader_json(gw.leader(name))
    out["observed"] = obs.seen
    s1.close()
    s3.close()
    print(json.dumps(out), flush=True)


def permits(url, d):
    """Two sessions hold both permits of a limit of 2, with their slots; a
    third waits, a limit of 3 is refused; a release admits the third, a
    dead session's permit comes back."""
    out = {}
    gw = Gateway(url)
    name = "e2e/exports"
    s1 = gw.session(owner="py-1", ttl=5.0)
    s2 = gw.session(owner="py-2", ttl=1.0)
    s3 = gw.session(owner="py-3", ttl=5.0)
    p1 = s1.acquire_permit(name, 2, slots=True, wait=5)
    p2 = s2.acquire_permit(name, 2, slots=True, wait=5)
    out["slots"] = sorted([p1.slot, p2.slot])
    out["increasing"] = p2.token > p1.token
    out["lock"] = p1.name
    try:
        s3.acquire_permit(name, 2, wait=0.05)
        out["third"] = "granted"
    except NotAcquired as e:
        out["third"] = e.kind
    try:
        s3.acquire_permit(name, 3, wait=0)
        out["other_limit"] = "granted"
    except GatewayError as e:
        out["other_limit"] = e.kind
    st = gw.permits(name)
    out["state"] = {"limit": st.limit, "waiting": st.waiting, "tokens": [h["token"] for h in st.holders],
                    "slots": [h.get("slot") for h in st.holders]}
    p1.release()
    p3 = s3.acquire_permit(name, 2, slots=True, wait=5)
    out["after_release"] = {"slot": p3.slot, "increasing": p3.token > p2.token}
    p3.release()
    # The second's session dies (its keepalive stops): its permit comes
    # back once the session expires, to a waiter.
    s2._stop.set()
    s2._thread.join(5)
    p4 = s1.acquire_permit(name, 2, wait=0)
    p5 = s3.acquire_permit(name, 2, wait=30)
    out["dead_came_back"] = p5.token > p4.token and not p2.valid()
    p4.release()
    p5.release()
    out["empty"] = gw.permits(name).holders == []
    s1.close()
    s3.close()
    print(json.dumps(out), flush=True)


def shared(url, d):
    """Two sessions share a lock as readers, with increasing tokens, listed
    as the readers; a writer's try and a reader's upgrade are refused; a
    writer waiting for them is granted once both are released, above their
    tokens, and refuses a reader meanwhile; a dead session's shared lock
    comes back to a waiting writer."""
    out = {}
    gw = Gateway(url)
    name = "e2e/shared"
    s1 = gw.session(owner="py-1", ttl=5.0)
    s2 = gw.session(owner="py-2", ttl=1.0)
    s3 = gw.session(owner="py-3", ttl=5.0)
    r1 = s1.acquire(name, wait=5, shared=True)
    r2 = s2.acquire(name, wait=5, shared=True)
    out["shared"] = r1.shared and r2.shared
    out["increasing"] = r2.token > r1.token
    toks = [r1.token, r2.token]
    out["readers"] = [[h["owner"], i < len(toks) and int(h["token"]) == toks[i]] for i, h in enumerate(gw.readers(name))]
    out["reader_check"] = [gw.check(name, r1.token), gw.check_reader(name, r1.token)]
    for key, f in [("writer_try", lambda: s3.acquire(name, wait=0)), ("upgrade", lambda: s1.acquire(name, wait=0))]:
        try:
            f()
            out[key] = "granted"
        except NotAcquired as e:
            out[key] = e.kind
    r1.release()
    r2.release()
    w = s3.acquire(name, wait=5)
    out["writer"] = {"shared": w.shared, "above": w.token > r2.token}
    try:
        s1.acquire(name, wait=0.05, shared=True)
        out["reader_under_writer"] = "granted"
    except NotAcquired as e:
        out["reader_under_writer"] = e.kind
    w.release()
    # The second's session dies (its keepalive stops) holding a shared
    # lock: it comes back once the session expires, to a waiting writer.
    r2 = s2.acquire(name, wait=5, shared=True)
    s2._stop.set()
    s2._thread.join(5)
    w = s3.acquire(name, wait=30)
    out["dead_came_back"] = w.token > r2.token and not r2.valid()
    w.release()
    out["empty"] = gw.readers(name) == []
    s1.close()
    s3.close()
    print(json.dumps(out), flush=True)


def limit(url, d, most):
    out = {}
    gw = Gateway(url)
    s = gw.session(owner="py-limit", ttl=30.0)
    held = [s.acquire("e2e/limit/%d" % i, wait=0) for i in range(most)]
    for key, f in [("lock", lambda: s.acquire("e2e/limit/more", wait=30)),
                   ("shared", lambda: s.acquire("e2e/limit/more", wait=30, shared=True)),
                   ("term", lambda: s.campaign("e2e/limit", wait=30)),
                   ("permit", lambda: s.acquire_permit("e2e/limit", 2, wait=30))]:
        try:
            f()
            out[key] = {"raised": None}
        except GatewayError as e:
            out[key] = {"raised": type(e).__name__, "kind": e.kind, "status": e.status, "limit": e.limit}
    held[0].release()
    s.acquire("e2e/limit/more", wait=0).release()
    out["after_release"] = True
    s.close()
    print(json.dumps(out), flush=True)


def dropped(url, d, n):
    """Takes n locks in a session without keepalives, has the gateway
    force each one's release (n lock_lost events, more than it keeps),
    then keeps the session alive once."""
    gw = Gateway(url)
    told = []
    s = gw.session(owner="py-dropped", ttl=60.0, keepalive=False, on_lost=lambda lock, why: told.append(why))
    locks = [s.acquire("e2e/dropped/%d" % i, wait=0) for i in range(n)]
    for lock in locks:
        gw.request("POST", "/v1/locks/%s/release" % urllib.parse.quote(lock.name, safe=""), {"force": True})
    s.keepalive()
    reasons = collections.Counter(lock.lost for lock in locks)
    out = {"events_dropped": s.events_dropped, "events": len(s.events), "reasons": dict(reasons),
           "told": dict(collections.Counter(told)), "valid": sum(lock.valid() for lock in locks),
           "first_kept": s.events[0]["token"] == str(locks[n - len(s.events)].token)}
    s.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    mode, url, d = sys.argv[1:4]
    if mode == "refused":
        refused(url, d, sys.argv[4])
    elif mode == "limit":
        limit(url, d, int(sys.argv[4]))
    elif mode == "dropped":
        dropped(url, d, int(sys.argv[4]))
    else:
        {"walk": walk, "kill": kill, "race": race, "release": release, "hold": hold, "broken": broken, "elect": elect,
         "permits": permits, "shared": shared}[mode](url, d)

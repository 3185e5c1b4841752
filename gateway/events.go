package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// Defaults of the event stream.
const (
	DefaultMaxStreams = 256
	DefaultHeartbeat  = 15 * time.Second
	feedSize          = 1024             // events kept for streams to resume from, or catch up on
	streamWriteTime   = 10 * time.Second // bounds each write to a stream
	streamBatch       = 64 << 10         // bytes of events a stream builds before it writes them
)

// WithMaxStreams bounds the event streams (GET /v1/events, and GET
// /v1/elections/{name}/observe) open at once (split among the tokens, see
// WithTokens). Default: DefaultMaxStreams (256).
func WithMaxStreams(n int) Option { return func(c *config) { c.maxStreams = n } }

// WithHeartbeat sets how often an idle event stream gets a comment line,
// so that proxies keep it open and the client knows the gateway lives.
// Default: DefaultHeartbeat (15s).
func WithHeartbeat(d time.Duration) Option { return func(c *config) { c.heartbeat = d } }

// feedEvent is one event of GET /v1/events: what happened to a lock held
// through this gateway.
type feedEvent struct {
	seq    uint64
	Type   string    `json:"type"` // granted, released, lost, owner
	Lock   string    `json:"lock"`
	Token  string    `json:"token"`
	Owner  string    `json:"owner,omitempty"`
	Shared bool      `json:"shared,omitempty"` // an event of a shared (read) lock
	Reason string    `json:"reason,omitempty"` // released: by_holder, forced, resigned, session_deleted, session_expired, session_gateway_closed; lost: as lock_lost
	Time   time.Time `json:"time"`
}

// feed is the gateway's recent events, guarded by the Gateway's mu.
type feed struct {
	seq     uint64
	ring    []feedEvent   // the last feedSize events, oldest first
	changed chan struct{} // closed (and replaced) on each event, and at Close
	streams int
}

// publishLocked records an event of h; g.mu is held.
func (g *Gateway) publishLocked(typ string, h *held, reason string) {
	f := &g.feed
	f.seq++
	e := feedEvent{seq: f.seq, Type: typ, Lock: h.name, Token: strconv.FormatUint(h.token, 10), Owner: h.ownerName(),
		Shared: h.shared, Reason: reason, Time: time.Now().UTC()}
	if len(f.ring) == feedSize {
		f.ring = append(f.ring[:0], f.ring[1:]...)
	}
	f.ring = append(f.ring, e)
	close(f.changed)
	f.changed = make(chan struct{})
}

// publish records an event of h.
func (g *Gateway) publish(typ string, h *held, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.publishLocked(typ, h, reason)
}

// eventID is the SSE id of event seq: the gateway's epoch and the
// sequence number, so that a stream resumed on a restarted gateway knows.
func (g *Gateway) eventID(seq uint64) string { return g.epoch + "." + strconv.FormatUint(seq, 10) }

// events streams the events of the locks the caller may use, whose names
// start with ?prefix=, as Server-Sent Events, resuming after Last-Event-ID.
func (g *Gateway) events(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	prefix := r.URL.Query().Get("prefix")
	last := r.Header.Get("Last-Event-ID")
	if v := r.URL.Query().Get("last_event_id"); v != "" {
		last = v
	}
	end, pr := g.startStream(p)
	if pr != nil {
		return pr
	}
	defer end()
	g.mu.Lock()
	from := g.feed.seq
	reset := ""
	if last != "" {
		epoch, n, _ := strings.Cut(last, ".")
		seq, err := strconv.ParseUint(n, 10, 64)
		oldest := from + 1
		if len(g.feed.ring) > 0 {
			oldest = g.feed.ring[0].seq
		}
		switch {
		case epoch != g.epoch || err != nil || seq > from:
			reset = "the event id is not of this gateway instance (it restarted?): events since then are unknown"
		case seq+1 < oldest:
			reset = "the events after this id are no longer kept: some were missed"
		default:
			from = seq
		}
	}
	g.mu.Unlock()
	write := startSSE(w)
	hello := "retry: 1000\n\n"
	if reset != "" {
		data, _ := json.Marshal(map[string]string{"reason": reset})
		hello += "event: reset\ndata: " + string(data) + "\n\n"
	}
	if !write(hello) {
		return nil
	}
	beat := time.NewTimer(g.cfg.heartbeat)
	defer beat.Stop()
	var out strings.Builder
	for {
		out.Reset()
		g.mu.Lock()
		from = g.streamNextLocked(&out, from, prefix, p)
		ch, closed, more := g.feed.changed, g.closed, from < g.feed.seq
		g.mu.Unlock()
		if out.Len() > 0 && !write(out.String()) {
			return nil
		}
		if more {
			continue
		}
		if closed {
			return nil
		}
		select {
		case <-ch:
		case <-beat.C:
			if !write(": heartbeat\n\n") {
				return nil
			}
			beat.Reset(g.cfg.heartbeat)
		case <-r.Context().Done():
			return nil
		}
	}
}

// startStream counts an event stream of p, or refuses it past p's share
// of WithMaxStreams. The returned func ends it.
func (g *Gateway) startStream(p *principal) (func(), *problem) {
	sh := g.share(p)
	g.mu.Lock()
	defer g.mu.Unlock()
	var pr *problem
	switch {
	case sh.streams >= sh.maxStreams:
		pr = sh.tooMany(sh.streams, "event streams open")
	case g.feed.streams >= g.cfg.maxStreams:
		pr = tooMany(g.feed.streams, "event streams open")
	}
	if pr != nil {
		pr.retryAfter = 5
		return nil, pr
	}
	sh.streams++
	g.feed.streams++
	return func() {
		g.mu.Lock()
		sh.streams--
		g.feed.streams--
		g.mu.Unlock()
	}, nil
}

// startSSE answers 200 with the headers of an event stream, and returns
// the func that writes to it: each write is flushed, within
// streamWriteTime, and reports whether it was.
func startSSE(w http.ResponseWriter) func(string) bool {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	return func(s string) bool {
		rc.SetWriteDeadline(time.Now().Add(streamWriteTime))
		if _, err := fmt.Fprint(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
}

// streamNextLocked writes to out the events after seq from that a stream of
// the locks under prefix that p may use sends, at most about
// streamBatch bytes of them, and returns the sequence number of the last
// event it went through; g.mu is held. A stream so far behind that the
// events after from are no longer kept (its writes were slower than the
// events for feedSize of them) gets a reset event first, as a resumed
// one does: it cannot know what it missed, and must read the state anew.
func (g *Gateway) streamNextLocked(out *strings.Builder, from uint64, prefix string, p *principal) uint64 {
	f := &g.feed
	if len(f.ring) == 0 || from >= f.seq {
		return from
	}
	// The ring's sequence numbers follow each other, oldest first.
	oldest := f.ring[0].seq
	if from+1 < oldest {
		data, _ := json.Marshal(map[string]string{"reason": "the stream fell behind the events (more than " +
			strconv.Itoa(feedSize) + "), which are no longer kept: some were missed"})
		fmt.Fprintf(out, "event: reset\ndata: %s\n\n", data)
		from = oldest - 1
	}
	for _, e := range f.ring[from+1-oldest:] {
		if out.Len() >= streamBatch {
			break
		}
		from = e.seq
		if !strings.HasPrefix(e.Lock, prefix) || !p.may(e.Lock) {
			continue
		}
		data, _ := json.Marshal(e)
		data = escapeControls(data)
		fmt.Fprintf(out, "id: %s\nevent: %s\ndata: %s\n\n", g.eventID(e.seq), e.Type, data)
	}
	return from
}

// lockIndexLocked is the sequence number of the latest event of name
// still kept, or 0; g.mu is held.
func (g *Gateway) lockIndexLocked(name string) uint64 {
	for i := len(g.feed.ring) - 1; i >= 0; i-- {
		if g.feed.ring[i].Lock == name {
			return g.feed.ring[i].seq
		}
	}
	return 0
}

type lockResponse struct {
	Lock    string   `json:"lock"`
	Held    *bool    `json:"held"` // null when neither the gateway nor the lock service can tell
	Holder  *holder  `json:"holder,omitempty"`
	Readers []holder `json:"readers,omitzero"` // absent when the lock service cannot grant shared locks
	// ReadersUnread: the lock service failed to list the readers just now.
	ReadersUnread bool   `json:"readers_unread,omitempty"`
	Index         string `json:"index"`
}

// lockState is the blocking read of a lock: with ?index= it waits (up to
// ?wait=) until the lock changes through this gateway, then answers who
// holds it.
func (g *Gateway) lockState(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	name, pr := lockName(r)
	if pr != nil {
		return pr
	}
	if !p.may(name) {
		return p.forbidden(name)
	}
	wait, pr := waitParam(r, g.cfg.maxWait)
	if pr != nil {
		return pr
	}
	// An index, 0 included (a lock with no event kept), waits for a
	// change after it; without one the read answers at once.
	var since uint64
	v := r.URL.Query().Get("index")
	blocking := v != "" && wait > 0
	if v != "" {
		n, pr := parseUint64("index", v, "a decimal integer from an earlier answer")
		if pr != nil {
			return pr
		}
		since = n
	}
	if blocking {
		end, pr := g.startWait(p)
		if pr != nil {
			return pr
		}
		defer end()
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		g.mu.Lock()
		idx, ch, closed := g.lockIndexLocked(name), g.feed.changed, g.closed
		g.mu.Unlock()
		if !blocking || idx != since || closed {
			break
		}
		select {
		case <-ch:
			continue
		case <-timer.C:
		case <-r.Context().Done():
			return nil
		}
		break
	}
	g.mu.Lock()
	idx := g.lockIndexLocked(name)
	g.mu.Unlock()
	resp := lockResponse{Lock: name, Index: strconv.FormatUint(idx, 10)}
	hd, known, readers, readersKnown := g.holderAndReaders(r.Context(), name)
	if hd != nil {
		held := true
		resp.Held, resp.Holder = &held, hd
	} else if known {
		held := false
		resp.Held = &held
	}
	// Readers the service cannot list now are left out (with
	// readers_unread), and the holder is answered still.
	resp.Readers = readers
	if !readersKnown {
		var pr *problem
		resp.Readers, pr = g.readersOf(r, name)
		resp.ReadersUnread = pr != nil
	}
	w.Header().Set("X-Distlock-Index", resp.Index)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// holderAndReaders is holderOf, with the shared locks of name when they
// are known without asking the lock service for them (readersKnown): none
// when it cannot grant shared locks (nil), or when an exclusive grant of
// name is live here (an empty list: the service never grants a shared
// lock while an exclusive one is live, see driver.SharedLocks; the window
// in which a lost grant is not yet known lost here is the one in which
// holderOf reports it still). Otherwise the caller asks with readersOf: a
// listing of name is not taken for its readers, since a Lister may leave
// out what it may not read (pglock lists locks without their readers for
// a role that may not read the readers' table) where Readers fails.
func (g *Gateway) holderAndReaders(ctx context.Context, name string) (hd *holder, known bool, readers []holder, readersKnown bool) {
	hd, known = g.holderOf(ctx, name)
	if _, ok := g.b.(driver.SharedLocks); !ok {
		return hd, known, nil, true
	}
	g.mu.Lock()
	h := g.holders[name]
	g.mu.Unlock()
	if h != nil && h.lock.Err() == nil {
		return hd, known, []holder{}, true
	}
	return hd, known, nil, false
}

// readersOf returns the shared locks of name, as the lock service has
// them (Client.Readers: every gateway's, and others'), by token; nil when
// it cannot grant shared locks.
func (g *Gateway) readersOf(r *http.Request, name string) ([]holder, *problem) {
	if _, ok := g.b.(driver.SharedLocks); !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	hs, err := g.reader.Readers(ctx, name)
	switch {
	case err == nil:
	case errors.Is(err, errors.ErrUnsupported):
		return nil, nil
	case r.Context().Err() != nil:
		return nil, nil
	default:
		return nil, g.backendProblem(err)
	}
	out := make([]holder, 0, len(hs))
	for _, x := range hs {
		out = append(out, holderOfDriver(x))
	}
	return out, nil
}

// holderOfDriver is x in an answer.
func holderOfDriver(x driver.Holder) holder {
	hd := holder{Token: strconv.FormatUint(x.Token, 10), Owner: x.Owner}
	if !x.Since.IsZero() {
		hd.Since = &x.Since
	}
	if !x.Expires.IsZero() {
		hd.Expires = &x.Expires
	}
	return hd
}

type listResponse struct {
	Locks  []listedLock `json:"locks"`
	Unread []string     `json:"unread,omitempty"` // the lock entries the service could not read
}

type listedLock struct {
	Lock string `json:"lock"`
	holder
	Shared bool `json:"shared,omitempty"` // a shared (read) lock of the name, listed after its exclusive holder
}

// list answers the holders of the locks whose names start with ?prefix=
// and that the caller may use: from the lock service when it can list
// them (every gateway's locks, and others'), else those held through this
// gateway. Lock entries that the service could not read (see listFor)
// are named in unread, and the others listed.
func (g *Gateway) list(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	prefix := r.URL.Query().Get("prefix")
	resp := listResponse{Locks: []listedLock{}}
	if g.lister != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		hs, unread, err := g.listFor(ctx, prefix, p)
		if errors.Is(err, errNothingRead) {
			return newProblem(http.StatusInternalServerError, ProblemInternal,
				"the lock service could not read any lock entry under the prefix: "+strings.Join(unread, "; "))
		}
		if err != nil {
			return g.backendProblem(err)
		}
		resp.Unread = unread
		for _, x := range hs {
			resp.Locks = append(resp.Locks, listedLock{Lock: x.Key, holder: holderOfDriver(x), Shared: x.Shared})
		}
	} else {
		g.mu.Lock()
		for name, h := range g.holders {
			if strings.HasPrefix(name, prefix) && p.may(name) {
				since := h.since
				resp.Locks = append(resp.Locks, listedLock{Lock: name,
					holder: holder{Token: strconv.FormatUint(h.token, 10), Owner: h.ownerName(), Since: &since}})
			}
		}
		for name := range g.readers {
			if strings.HasPrefix(name, prefix) && p.may(name) {
				for _, h := range g.readersLocked(name) {
					since := h.since
					resp.Locks = append(resp.Locks, listedLock{Lock: name, Shared: true,
						holder: holder{Token: strconv.FormatUint(h.token, 10), Owner: h.ownerName(), Since: &since}})
				}
			}
		}
		g.mu.Unlock()
		// By name; a name's exclusive holder first, then its shared locks by token.
		slices.SortFunc(resp.Locks, func(a, b listedLock) int {
			return cmp.Or(strings.Compare(a.Lock, b.Lock), cmp.Compare(boolInt(a.Shared), boolInt(b.Shared)),
				cmp.Compare(len(a.Token), len(b.Token)), strings.Compare(a.Token, b.Token))
		})
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// boolInt is 1 for true, for sorting.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

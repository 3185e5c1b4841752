package gateway

import "github.com/distlock/distlock/election"

// Routes returns the methods of every route of g, by pattern.
func Routes(g *Gateway) map[string][]string {
	out := map[string][]string{}
	for _, rt := range g.routeTable() {
		for m := range rt.methods {
			out[rt.pattern] = append(out[rt.pattern], m)
		}
	}
	return out
}

// Authenticated reports, by pattern, whether each route of g needs a
// bearer token when g has tokens.
func Authenticated(g *Gateway) map[string]bool {
	out := map[string]bool{}
	for _, rt := range g.routeTable() {
		out[rt.pattern] = rt.auth
	}
	return out
}

// TermDone returns the Done channel of the term of the election name
// that the session id holds, or nil if it holds none.
func TermDone(g *Gateway, id, name string) <-chan struct{} {
	g.mu.Lock()
	s := g.sessions[id]
	g.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.locks[election.KeyPrefix+name]; h != nil && h.term != nil {
		return h.term.Done()
	}
	return nil
}

// SetObserveOpening sets f to run as each observe stream of g opens the
// election's observation. Set it before g's first use.
func SetObserveOpening(g *Gateway, f func()) { g.observeOpening = f }

// SetDropped sets f to run as each release (forced or not) has taken a
// lock from its session, before the lock service releases it. Set it
// before g's first use.
func SetDropped(g *Gateway, f func()) { g.dropped = f }

// ProblemTitle returns the title of the problem type typ, or "".
func ProblemTitle(typ string) string { return titles[typ] }

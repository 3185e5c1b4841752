package gateway

import (
	"fmt"
	"net/http"
)

// A share is what one caller may use of the gateway's limits at once:
// sessions, waiting requests and event streams. With tokens each token
// has its own, so that one token's clients (a leak, a bug, or a token in
// the wrong hands) cannot take what the others need: its share is the
// max_sessions, max_waiting and max_streams of its entry in the token
// file, or else an even part of what the gateway's limits (WithMaxSessions,
// WithMaxWaiting, WithMaxStreams) leave after the tokens that set theirs,
// and at least 1. The shares set add up to no more than the limits, so
// that every token can use its whole share, unless there are more tokens
// than a limit leaves room for: then those with a share of 1 take what
// is left of the limit in turn (the limits hold whatever the shares).
// Without tokens every caller is trusted alike (the users of the
// gateway's host): there is one share, the limits.
//
// Its counts are guarded by the Gateway's mu; the limits never change.
type share struct {
	who                                 string // for errors: `token "NAME"`, or "" without tokens
	maxSessions, maxWaiting, maxStreams int
	sessions, waiting, streams          int
}

// newShares returns the share of each token of cfg by name, or the one
// share ("") without tokens.
func newShares(cfg config) (map[string]*share, error) {
	if cfg.tokens == nil {
		return map[string]*share{"": {maxSessions: cfg.maxSessions, maxWaiting: cfg.maxWaiting, maxStreams: cfg.maxStreams}}, nil
	}
	out := map[string]*share{}
	for _, t := range cfg.tokens.list {
		out[t.name] = &share{who: fmt.Sprintf("token %q", t.name),
			maxSessions: t.maxSessions, maxWaiting: t.maxWaiting, maxStreams: t.maxStreams}
	}
	limits := []struct {
		what  string
		limit int
		field func(*share) *int
	}{
		{"sessions", cfg.maxSessions, func(s *share) *int { return &s.maxSessions }},
		{"waiting requests", cfg.maxWaiting, func(s *share) *int { return &s.maxWaiting }},
		{"event streams", cfg.maxStreams, func(s *share) *int { return &s.maxStreams }},
	}
	for _, l := range limits {
		set, unset := 0, 0
		for _, s := range out {
			if n := *l.field(s); n > 0 {
				set += n
			} else {
				unset++
			}
		}
		left := l.limit - set
		if left < 0 || (unset > 0 && left == 0) {
			return nil, fmt.Errorf("%w: the tokens' shares of %s add up to %d, and the gateway's limit is %d (with %d tokens without a share)",
				ErrInvalidOption, l.what, set, l.limit, unset)
		}
		for _, s := range out {
			if f := l.field(s); *f == 0 {
				*f = max(left/unset, 1)
			}
		}
	}
	return out, nil
}

// share is p's share.
func (g *Gateway) share(p *principal) *share { return g.shares[p.name] }

// tooMany is the answer to a request over sh, of which n things (such as
// "sessions open") are taken.
func (sh *share) tooMany(n int, what string) *problem {
	if sh.who == "" {
		return tooMany(n, what)
	}
	pr := newProblem(http.StatusTooManyRequests, ProblemTooMany,
		fmt.Sprintf("%s has %d %s, the most it may (its share of this gateway's limits)", sh.who, n, what))
	pr.retryAfter = 1
	return pr
}

// tooMany is the answer to a request over one of the gateway's limits,
// of which n things are taken.
func tooMany(n int, what string) *problem {
	pr := newProblem(http.StatusTooManyRequests, ProblemTooMany, fmt.Sprintf("%d %s, the most this gateway allows", n, what))
	pr.retryAfter = 1
	return pr
}

// sessionLimit is the answer to an acquire in a session that holds or
// waits for WithMaxLocks locks (what: "locks", "locks and terms", ...).
// It has its own type and no Retry-After, unlike tooMany's: it lasts
// until the session releases one, so that a retry at once is refused
// again.
func (g *Gateway) sessionLimit(what string) *problem {
	pr := newProblem(http.StatusTooManyRequests, ProblemSessionLimit,
		fmt.Sprintf("the session holds or waits for %d %s, the most this gateway allows in one session "+
			"(WithMaxLocks, distlock serve --max-locks): release one first, or use another session", g.cfg.maxLocks, what))
	pr.Limit = g.cfg.maxLocks
	return pr
}

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
// WithMaxWaiting, WithMaxStreams) leave after the tokens that set theirs.
// The shares add up to no more than the limits, so that every token can
// always use its whole share. Without tokens every caller is trusted
// alike (the users of the gateway's host): there is one share, the limits.
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
		if left < 0 || (unset > 0 && left < unset) {
			return nil, fmt.Errorf("%w: the tokens' shares of %s (%d, and at least 1 for each of the %d others) are more than the gateway's limit, %d",
				ErrInvalidOption, l.what, set, unset, l.limit)
		}
		for _, s := range out {
			if f := l.field(s); *f == 0 {
				*f = left / unset
			}
		}
	}
	return out, nil
}

// share is p's share.
func (g *Gateway) share(p *principal) *share { return g.shares[p.name] }

// tooMany is the answer to a request over a share of n things (such as
// "sessions open").
func (sh *share) tooMany(n int, what string) *problem {
	detail := fmt.Sprintf("%d %s, the most this gateway allows", n, what)
	if sh.who != "" {
		detail = fmt.Sprintf("%s has %d %s, the most it may (its share of this gateway's limits)", sh.who, n, what)
	}
	pr := newProblem(http.StatusTooManyRequests, ProblemTooMany, detail)
	pr.retryAfter = 1
	return pr
}

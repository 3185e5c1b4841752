package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/semaphore"
)

// The semaphores' routes. A semaphore is package semaphore's, over the
// session's Client: a permit is an acquire of the semaphore's key (see
// semaphore.KeyPrefix) with its limit, and the session holds it as that
// lock name, with what a lock has (renewal, the session's keepalive, loss
// reported as lock_lost, release and abandon through the lock routes,
// release when the session ends). A session holds at most one permit of a
// semaphore. A token may use a semaphore if it may use its key.

// semaphoreName reads the semaphore name of r's path, checks that p may
// use the semaphore's key, and returns both.
func semaphoreName(r *http.Request, p *principal) (name, key string, pr *problem) {
	return prefixedName(r, p, "semaphore", semaphore.KeyPrefix)
}

type permitRequest struct {
	Session string `json:"session"`
	Limit   int    `json:"limit"`
	Slots   bool   `json:"slots"`
}

type permitResponse struct {
	Semaphore      string `json:"semaphore"`
	Lock           string `json:"lock"`
	Token          string `json:"token"`
	Slot           *int   `json:"slot,omitempty"`
	TTLRemainingMS int64  `json:"ttl_remaining_ms"`
}

// permitHolder is a live permit in the answer of GET /v1/semaphores/{name}.
type permitHolder struct {
	holder
	Slot *int `json:"slot,omitempty"`
}

type permitsResponse struct {
	Semaphore string         `json:"semaphore"`
	Lock      string         `json:"lock"`
	Limit     *int           `json:"limit"` // null: the service's layout stores none
	Waiting   int            `json:"waiting"`
	Holders   []permitHolder `json:"holders"`
}

// acquirePermit waits, up to ?wait=, for a permit of the semaphore for
// the session, and answers it. A retried acquire (its answer lost)
// answers the session's permit, or waits for its acquire in progress.
func (g *Gateway) acquirePermit(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	var req permitRequest
	name, key, pr := semaphoreName(r, p)
	if pr != nil {
		return pr
	}
	if pr := readJSON(r, &req); pr != nil {
		return pr
	}
	if req.Limit < 1 || req.Limit > driver.MaxPermits {
		return newProblem(http.StatusBadRequest, ProblemBadRequest,
			fmt.Sprintf("limit %d is not in [1, %d]", req.Limit, driver.MaxPermits))
	}
	wait, pr := waitParam(r, g.cfg.maxWait)
	if pr != nil {
		return pr
	}
	s, pr := g.lookup(req.Session, p)
	if pr != nil {
		return pr
	}
	if !s.enter() {
		return sessionEnded()
	}
	defer s.leave()
	if wait > 0 {
		end, pr := g.startWait(p)
		if pr != nil {
			return pr
		}
		defer end()
	}
	sem := distlock.Semaphore{Limit: req.Limit, Slots: req.Slots}
	h, err := s.acquire(r.Context(), key, wait, candidacy{permit: &sem})
	var le *driver.LimitError
	switch {
	case err == nil:
	case errors.Is(err, errSessionEnded):
		return sessionEnded()
	case errors.Is(err, errTooManyLocks):
		return g.sessionLimit("locks, terms and permits")
	case errors.Is(err, errOtherSlots):
		return newProblem(http.StatusConflict, ProblemNotAcquired,
			fmt.Sprintf("the session holds a permit of semaphore %s asked otherwise: with slots %v", quoteName(name), !req.Slots))
	case errors.Is(err, errHeldOtherwise):
		return newProblem(http.StatusConflict, ProblemNotAcquired,
			fmt.Sprintf("the session holds the semaphore's key %s as a lock: release it first", quoteName(key)))
	case r.Context().Err() != nil:
		return nil // the client went away
	case errors.As(err, &le):
		return newProblem(http.StatusConflict, ProblemLimitMismatch,
			fmt.Sprintf("semaphore %s has the limit %d, not %d", quoteName(name), le.Stored, le.Asked))
	case errors.Is(err, errors.ErrUnsupported) && g.grantsPermits():
		return newProblem(http.StatusNotImplemented, ProblemUnsupported, "the lock service cannot name a permit's slot")
	case errors.Is(err, errors.ErrUnsupported):
		return newProblem(http.StatusNotImplemented, ProblemUnsupported, "the lock service cannot grant permits")
	case errors.Is(err, errNotAcquired), errors.Is(err, distlock.ErrNotAcquired):
		return newProblem(http.StatusConflict, ProblemNotAcquired,
			fmt.Sprintf("every permit of semaphore %s is held or awaited", quoteName(name)))
	default:
		return g.backendProblem(err)
	}
	s.mu.Lock()
	in := s.locks[key] == h
	left := s.lockLeftLocked(h)
	s.mu.Unlock()
	if !in || left <= 0 {
		return newProblem(http.StatusConflict, ProblemLockLost, "the permit was lost before it could be answered")
	}
	resp := permitResponse{Semaphore: name, Lock: key, Token: strconv.FormatUint(h.token, 10), TTLRemainingMS: ms(left)}
	if l, ok := h.lock.(*distlock.Lock); ok {
		if slot, ok := l.Slot(); ok {
			resp.Slot = &slot
		}
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// permits answers the semaphore's stored limit, its waiters and its live
// permits, as the lock service has them, within a few seconds.
func (g *Gateway) permits(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	name, key, pr := semaphoreName(r, p)
	if pr != nil {
		return pr
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	st, err := g.reader.Permits(ctx, key)
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		return nil
	case errors.Is(err, errors.ErrUnsupported):
		return newProblem(http.StatusNotImplemented, ProblemUnsupported, "the lock service cannot grant permits")
	default:
		return g.backendProblem(err)
	}
	resp := permitsResponse{Semaphore: name, Lock: key, Waiting: st.Waiting, Holders: []permitHolder{}}
	if st.Limit != driver.UnknownLimit {
		resp.Limit = &st.Limit
	}
	for _, h := range st.Holders {
		ph := permitHolder{holder: holder{Token: strconv.FormatUint(h.Token, 10), Owner: h.Owner}}
		if !h.Since.IsZero() {
			ph.Since = &h.Since
		}
		if !h.Expires.IsZero() {
			ph.Expires = &h.Expires
		}
		if h.HasSlot {
			ph.Slot = &h.Slot
		}
		resp.Holders = append(resp.Holders, ph)
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// grantsPermits reports whether the lock service grants permits at all.
func (g *Gateway) grantsPermits() bool {
	_, ok := g.b.(driver.Semaphores)
	return ok
}

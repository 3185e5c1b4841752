package gatewaylock

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// lease is one grant, held in a session shared with the Backend's other
// grants of the same TTL and owner.
//
// Who guards what: s, key, election, token, onLost never change; s.mu
// guards v, reported, granted, lost and abandoned; relMu serializes
// releases and guards relDone and relErr.
type lease struct {
	s        *session
	key      string
	election string // the election of a term, held through the election routes; "" for a lock
	token    uint64
	onLost   func(error)

	v         driver.Validity // the newest confirmation
	reported  time.Time       // the Sent of the last validity handed out
	granted   time.Time       // when the grant's answer came
	lost      error           // why the grant is gone; nil while held
	abandoned bool            // a release failed: the loop releases it, unless a retry does

	relMu   sync.Mutex
	relDone bool // the gateway answered a release
	relErr  error
}

func (l *lease) Token() uint64 { return l.token }

func (l *lease) Validity() driver.Validity {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.v
}

// cachedLocked returns a confirmation newer than the last one handed out,
// if the session's loop got one that still vouches for half its time.
func (l *lease) cachedLocked() (driver.Validity, bool) {
	fresh := l.v.Sent.After(l.reported) && time.Until(l.v.Sent.Add(l.v.TTL)) >= l.v.TTL/2
	return l.v, fresh
}

// report hands out the newest confirmation, or the loss.
func (l *lease) report() (driver.Validity, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.lost != nil {
		return driver.Validity{}, l.lost
	}
	l.reported = l.v.Sent
	return l.v, nil
}

// Refresh reports the time left of the grant: from the newest answer of
// the session's keepalive loop when it is fresh, else from a keepalive
// sent now. The session keeps its TTL: ttl is only checked.
func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	l.s.mu.Lock()
	lost := l.lost
	_, fresh := l.cachedLocked()
	l.s.mu.Unlock()
	if lost == nil && !fresh {
		if err := l.s.confirm(ctx); err != nil {
			if ending(err) {
				return driver.Validity{}, sessionLost(err)
			}
			return driver.Validity{}, err
		}
	}
	return l.report()
}

var _ driver.BatchRefresher = (*Backend)(nil)

// RefreshAll refreshes leases with one keepalive per session at most.
func (b *Backend) RefreshAll(ctx context.Context, leases []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	res := make([]driver.RefreshResult, len(leases))
	if err := driver.CheckTTL(ttl); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	ls := make([]*lease, len(leases))
	stale := map[*session]bool{}
	for i, x := range leases {
		l, ok := x.(*lease)
		if !ok || l.s.b != b {
			res[i].Err = fmt.Errorf("%w: gatewaylock: a lease of another Backend", driver.ErrInvalidOption)
			continue
		}
		ls[i] = l
		l.s.mu.Lock()
		if _, fresh := l.cachedLocked(); l.lost == nil && !fresh {
			stale[l.s] = true
		}
		l.s.mu.Unlock()
	}
	errs := map[*session]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range stale {
		wg.Go(func() {
			if err := s.confirm(ctx); err != nil {
				if ending(err) {
					err = sessionLost(err)
				}
				mu.Lock()
				errs[s] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i, l := range ls {
		if l == nil {
			continue
		}
		if err := errs[l.s]; err != nil {
			res[i].Err = err
			continue
		}
		res[i].Validity, res[i].Err = l.report()
	}
	return res
}

// Release releases the grant, fenced by its token; the session stays for
// the Backend's other grants. A release that does not reach the gateway
// leaves the grant to the session's loop, which releases it once the
// gateway answers again, unless the caller retries first.
func (l *lease) Release(ctx context.Context) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.relDone {
		return l.relErr
	}
	s := l.s
	s.mu.Lock()
	lost := l.lost
	if lost == nil {
		s.busy[l.key]++
	}
	s.mu.Unlock()
	if lost != nil {
		l.relDone, l.relErr = true, lost
		return lost
	}
	path := "/v1/locks/" + escape(l.key) + "/release"
	if l.election != "" {
		path = "/v1/elections/" + escape(l.election) + "/resign"
	}
	err := s.b.do(ctx, "POST", path, map[string]string{"session": s.id, "token": strconv.FormatUint(l.token, 10)}, nil, 0)
	var ae *apiError
	answered := err == nil || errors.As(err, &ae) && ae.Status/100 == 4 && !errors.Is(err, ErrRefused)
	s.mu.Lock()
	s.settleLocked(l.key)
	if answered {
		if s.leases[l.key] == l {
			delete(s.leases, l.key)
		}
		l.abandoned = false
		if l.lost == nil {
			l.lost = fmt.Errorf("%w: gatewaylock: the lease was released", driver.ErrLockLost)
		}
	} else {
		l.abandoned = true
	}
	s.mu.Unlock()
	if !answered {
		return err
	}
	if err != nil {
		// Not held, lost, or the session is gone.
		err = fmt.Errorf("%w: %w", driver.ErrLockLost, err)
		if isNotFound(err) {
			s.end(sessionLost(err), false)
		}
	}
	l.relDone, l.relErr = true, err
	if err == nil {
		// A later Release finds the lease gone.
		l.relErr = fmt.Errorf("%w: gatewaylock: the lease was released already", driver.ErrLockLost)
	}
	return err
}

var _ driver.OwnerSetter = (*lease)(nil)

// SetOwner replaces the owner of a lock (POST /v1/locks/{name}/owner), or
// the value of a term (POST /v1/elections/{name}/proclaim), owner-checked
// by its token. A gateway that cannot (an older one, or a lock service
// that cannot) gives an error matching errors.ErrUnsupported.
func (l *lease) SetOwner(ctx context.Context, owner string) error {
	l.s.mu.Lock()
	lost := l.lost
	l.s.mu.Unlock()
	if lost != nil {
		return lost
	}
	tok := strconv.FormatUint(l.token, 10)
	path, body := "/v1/locks/"+escape(l.key)+"/owner", map[string]string{"session": l.s.id, "token": tok, "owner": owner}
	if l.election != "" {
		path, body = "/v1/elections/"+escape(l.election)+"/proclaim", map[string]string{"session": l.s.id, "token": tok, "value": owner}
	}
	err := l.s.b.do(ctx, "POST", path, body, nil, 0)
	var ae *apiError
	switch {
	case err == nil || !errors.As(err, &ae):
		return err
	case ae.Status == http.StatusConflict || ae.kind() == "session-not-found":
		// Not the session's live grant (released, lost), or the session
		// is gone: nothing was changed.
		return fmt.Errorf("%w: %w", driver.ErrLockLost, err)
	case ae.Status == http.StatusNotImplemented || ae.kind() == "not-found":
		return fmt.Errorf("%w: %w", errors.ErrUnsupported, err)
	case ae.kind() == "bad-request":
		return fmt.Errorf("%w: %w", driver.ErrInvalidOption, err)
	}
	return err
}

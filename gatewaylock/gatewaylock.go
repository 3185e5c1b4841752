package gatewaylock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/backend"
)

// Defaults of the options.
const (
	// DefaultMaxWait is the longest wait of one acquire request: below the
	// gateway's own cap (gateway.DefaultMaxWait), so that the gateway
	// answers before it would cut the wait short.
	DefaultMaxWait = 50 * time.Second
	// DefaultRequestTimeout bounds a request beyond its wait.
	DefaultRequestTimeout = 30 * time.Second
)

// ErrRefused is matched by the errors of requests that the gateway
// refused for their bearer token (none, unknown, or not allowed the
// lock's name).
var ErrRefused = errors.New("gatewaylock: refused by the gateway")

// Option configures a Backend.
type Option func(*Backend)

// WithToken sets the bearer token sent to the gateway. Default: none.
func WithToken(secret string) Option { return func(b *Backend) { b.token = secret } }

// WithHTTPClient sets the HTTP client. It should have no Timeout (waits
// are bounded per request). Default: a client of its own, whose idle
// connections Close closes.
func WithHTTPClient(c *http.Client) Option { return func(b *Backend) { b.hc, b.ownClient = c, false } }

// withTransport gives the Backend's own HTTP client a transport (TLS
// settings from a URL).
func withTransport(t *http.Transport) Option {
	return func(b *Backend) { b.hc, b.ownClient = &http.Client{Transport: t}, true }
}

// WithMaxWait sets the longest wait of one acquire request. Default:
// DefaultMaxWait (50s).
func WithMaxWait(d time.Duration) Option { return func(b *Backend) { b.maxWait = d } }

// Backend takes locks from a gateway. It is safe for concurrent use.
type Backend struct {
	base      string // the gateway's URL, without a trailing "/"
	token     string
	hc        *http.Client
	ownClient bool
	maxWait   time.Duration
}

var _ distlock.Backend = (*Backend)(nil)

// New returns a Backend on the gateway at baseURL (http://HOST:PORT, or
// https://, with a path if the gateway is served under one).
func New(baseURL string, opts ...Option) (*Backend, error) {
	if !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://") {
		return nil, fmt.Errorf("%w: gatewaylock: the gateway URL must start with http:// or https://", distlock.ErrInvalidOption)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	b := &Backend{base: strings.TrimRight(baseURL, "/"), hc: &http.Client{Transport: t}, ownClient: true,
		maxWait: DefaultMaxWait}
	for _, o := range opts {
		o(b)
	}
	if b.hc == nil || b.maxWait <= 0 {
		return nil, fmt.Errorf("%w: gatewaylock: nil HTTP client or wait not positive", distlock.ErrInvalidOption)
	}
	return b, nil
}

// Close closes the idle connections of the Backend's own HTTP client. It
// releases nothing: release the locks first.
func (b *Backend) Close() error {
	if b.ownClient {
		b.hc.CloseIdleConnections()
	}
	return nil
}

// apiError is an error answer of the gateway.
type apiError struct {
	Status int    `json:"status"`
	Type   string `json:"type"`
	Detail string `json:"detail"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("gatewaylock: gateway answered %d %s: %s", e.Status, strings.TrimPrefix(e.Type, "urn:distlock:problem:"), e.Detail)
}

// kind reports the problem type's last part.
func (e *apiError) kind() string { return strings.TrimPrefix(e.Type, "urn:distlock:problem:") }

// Is sorts the gateway's answers into distlock's error kinds.
func (e *apiError) Is(target error) bool {
	switch target {
	case distlock.ErrUnavailable:
		return e.Status >= 500 || e.Status == http.StatusTooManyRequests || e.kind() == "session-not-found"
	case distlock.ErrInvalidKey:
		return e.kind() == "bad-name"
	case distlock.ErrInvalidOption:
		return e.kind() == "bad-ttl"
	case ErrRefused:
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
	}
	return false
}

// do sends a request and decodes a 2xx answer into out. Errors are
// *apiError for an answer, else match distlock.ErrUnavailable (or, when
// ctx ended, ctx.Err()).
func (b *Backend) do(ctx context.Context, method, path string, in, out any, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait+DefaultRequestTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("gatewaylock: %w", err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, body)
	if err != nil {
		return fmt.Errorf("%w: gatewaylock: %w", distlock.ErrInvalidOption, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: gatewaylock: %s %s: %w", distlock.ErrUnavailable, method, strings.SplitN(path, "?", 2)[0], unwrapURL(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%w: gatewaylock: reading the answer: %w", distlock.ErrUnavailable, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Type == "" {
			e.Type, e.Detail = "http", http.StatusText(resp.StatusCode)
		}
		e.Status = resp.StatusCode
		return e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%w: gatewaylock: malformed answer: %w", distlock.ErrUnavailable, err)
		}
	}
	return nil
}

// unwrapURL drops the *url.Error's repetition of the URL.
func unwrapURL(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// escape percent-encodes a lock name as one path segment: every byte but
// letters, digits, "-", "_" and "~" (so "." and ".." too).
func escape(name string) string {
	var sb strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~' {
			sb.WriteByte(c)
		} else {
			fmt.Fprintf(&sb, "%%%02X", c)
		}
	}
	return sb.String()
}

type sessionAnswer struct {
	ID string `json:"id"`
}

type grantAnswer struct {
	Token          string `json:"token"`
	TTLRemainingMS int64  `json:"ttl_remaining_ms"`
}

type keepaliveAnswer struct {
	Locks []struct {
		Lock           string `json:"lock"`
		Token          string `json:"token"`
		TTLRemainingMS int64  `json:"ttl_remaining_ms"`
	} `json:"locks"`
}

// Acquire creates a session with opts.TTL and opts.Owner and acquires key
// in it.
func (b *Backend) Acquire(ctx context.Context, key string, opts distlock.AcquireOptions) (distlock.Lease, error) {
	if err := backend.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	var s sessionAnswer
	err := b.do(ctx, "POST", "/v1/sessions", map[string]any{"owner": opts.Owner, "ttl": opts.TTL.String()}, &s, 0)
	if err != nil {
		return nil, b.acquireErr(ctx, err)
	}
	l, err := b.acquireIn(ctx, s.ID, key, opts)
	if err != nil {
		// Whatever the gateway granted meanwhile goes with the session.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultRequestTimeout)
		defer cancel()
		b.do(dctx, "DELETE", "/v1/sessions/"+s.ID, nil, nil, 0)
		return nil, b.acquireErr(ctx, err)
	}
	return l, nil
}

func (b *Backend) acquireErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return backend.Canceled(ctx)
	}
	return err
}

func (b *Backend) acquireIn(ctx context.Context, sid, key string, opts distlock.AcquireOptions) (*lease, error) {
	path := "/v1/locks/" + escape(key) + "/acquire"
	for {
		wait := time.Duration(0)
		if opts.Wait {
			wait = b.maxWait
			if d, ok := ctx.Deadline(); ok {
				wait = min(wait, time.Until(d)+time.Millisecond)
			}
			wait = max(wait, time.Millisecond)
		}
		sent := time.Now()
		var g grantAnswer
		err := b.do(ctx, "POST", path+"?wait="+wait.String(), map[string]string{"session": sid}, &g, wait)
		var ae *apiError
		switch {
		case err == nil:
		case errors.As(err, &ae) && ae.kind() == "not-acquired":
			if !opts.Wait {
				return nil, fmt.Errorf("%w: %w", distlock.ErrNotAcquired, err)
			}
			if ctx.Err() != nil {
				return nil, backend.Canceled(ctx)
			}
			continue
		default:
			return nil, err
		}
		tok, perr := strconv.ParseUint(g.Token, 10, 64)
		if perr != nil || tok == 0 {
			return nil, fmt.Errorf("%w: gatewaylock: malformed token %q", distlock.ErrUnavailable, g.Token)
		}
		l := &lease{b: b, sid: sid, key: key, token: tok, ttl: opts.TTL}
		v := distlock.Validity{Sent: sent, TTL: time.Duration(g.TTLRemainingMS) * time.Millisecond}
		if time.Since(sent) > opts.TTL/4 {
			// The grant came after a long wait: its validity counts from
			// the send time, so confirm it afresh.
			if v, err = l.Refresh(ctx, opts.TTL); err != nil {
				return nil, err
			}
		}
		l.v = v
		return l, nil
	}
}

// lease is one grant, in a session of its own.
type lease struct {
	b     *Backend
	sid   string
	key   string
	token uint64
	ttl   time.Duration

	mu sync.Mutex
	v  distlock.Validity
}

func (l *lease) Token() uint64 { return l.token }

func (l *lease) Validity() distlock.Validity {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.v
}

// lost is the error of a grant the gateway no longer has.
func (l *lease) lost(err error) error {
	if err == nil {
		return fmt.Errorf("%w: gatewaylock: the gateway no longer holds the grant", distlock.ErrLockLost)
	}
	return fmt.Errorf("%w: %w", distlock.ErrLockLost, err)
}

// Refresh keeps the session alive and reports the time left of the grant.
// A gateway that refuses the connection has gone away with its sessions:
// the grant is reported lost at once.
func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (distlock.Validity, error) {
	if err := backend.CheckTTL(ttl); err != nil {
		return distlock.Validity{}, err
	}
	sent := time.Now()
	var ka keepaliveAnswer
	err := l.b.do(ctx, "POST", "/v1/sessions/"+l.sid+"/keepalive", nil, &ka, 0)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.kind() == "session-not-found":
		return distlock.Validity{}, l.lost(err)
	case errors.Is(err, syscall.ECONNREFUSED):
		// Nothing listens where the gateway was: it went away, and its
		// sessions, which live in its memory, with it.
		return distlock.Validity{}, l.lost(err)
	case err != nil:
		return distlock.Validity{}, err
	}
	tok := strconv.FormatUint(l.token, 10)
	for _, x := range ka.Locks {
		if x.Lock == l.key && x.Token == tok && x.TTLRemainingMS > 0 {
			v := distlock.Validity{Sent: sent, TTL: time.Duration(x.TTLRemainingMS) * time.Millisecond}
			l.mu.Lock()
			l.v = v
			l.mu.Unlock()
			return v, nil
		}
	}
	return distlock.Validity{}, l.lost(nil)
}

// Release releases the grant, fenced by its token, and deletes the
// session.
func (l *lease) Release(ctx context.Context) error {
	err := l.b.do(ctx, "POST", "/v1/locks/"+escape(l.key)+"/release",
		map[string]string{"session": l.sid, "token": strconv.FormatUint(l.token, 10)}, nil, 0)
	var ae *apiError
	switch {
	case err == nil:
	case errors.As(err, &ae) && ae.Status/100 == 4 && !errors.Is(err, ErrRefused):
		err = l.lost(err) // not held, lost, or the session is gone
	default:
		return err // unreachable: the session stays, for a retry
	}
	l.b.do(ctx, "DELETE", "/v1/sessions/"+l.sid, nil, nil, 0)
	return err
}

var _ distlock.Lister = (*Backend)(nil)

type listAnswer struct {
	Locks []struct {
		Lock    string    `json:"lock"`
		Token   string    `json:"token"`
		Owner   string    `json:"owner"`
		Since   time.Time `json:"since"`
		Expires time.Time `json:"expires"`
	} `json:"locks"`
}

// List returns the holders of the locks whose keys start with prefix, as
// the gateway lists them (for `distlock status`).
func (b *Backend) List(ctx context.Context, prefix string) ([]distlock.Holder, error) {
	var a listAnswer
	if err := b.do(ctx, "GET", "/v1/locks?prefix="+url.QueryEscape(prefix), nil, &a, 0); err != nil {
		return nil, err
	}
	out := make([]distlock.Holder, 0, len(a.Locks))
	for _, x := range a.Locks {
		tok, err := strconv.ParseUint(x.Token, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: gatewaylock: malformed token %q", distlock.ErrUnavailable, x.Token)
		}
		out = append(out, distlock.Holder{Key: x.Lock, Token: tok, Owner: x.Owner, Since: x.Since, Expires: x.Expires})
	}
	return out, nil
}

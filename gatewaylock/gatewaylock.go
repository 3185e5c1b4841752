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

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
)

// Defaults of the options.
const (
	// DefaultMaxWait is the longest wait of one acquire request: below the
	// gateway's own cap (gateway.DefaultMaxWait), so that the gateway
	// answers before it would cut the wait short.
	DefaultMaxWait = 50 * time.Second
	// DefaultRequestTimeout bounds a request beyond its wait, unless set
	// with WithRequestTimeout.
	DefaultRequestTimeout = 30 * time.Second
)

// ErrRefused is matched by the errors of requests that the gateway
// refused for their bearer token (none, unknown, or not allowed the
// lock's name).
var ErrRefused = errors.New("gatewaylock: refused by the gateway")

// ErrSessionLimit is matched by the error of an acquire (a lock, a shared
// lock, a campaign) that the gateway refused because its session already
// holds or waits for as many locks as the gateway allows in one session
// (gateway.WithMaxLocks, `distlock serve --max-locks`; 64 by default):
// problem type session-limit. A Backend keeps one session per TTL and
// owner (see Sessions), so that this bounds the locks that one Client
// holds or waits for at once. It does not match distlock.ErrUnavailable:
// the gateway refuses the acquire again until a lock of the session is
// released, so that it is not retried, and a blocking Acquire returns it
// at once rather than wait for a lock it cannot be granted.
var ErrSessionLimit = errors.New("gatewaylock: the gateway's limit of locks per session reached")

// Option configures a Backend.
type Option func(*config)

type config struct {
	token          string
	hc             *http.Client
	ownClient      bool // Close closes hc's idle connections
	maxWait        time.Duration
	requestTimeout time.Duration
}

// WithToken sets the bearer token sent to the gateway. Default: none.
func WithToken(secret string) Option { return func(c *config) { c.token = secret } }

// WithHTTPClient sets the HTTP client. It should have no Timeout (waits
// are bounded per request). Default: a client of its own, whose idle
// connections Close closes.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) { c.hc, c.ownClient = hc, false }
}

// withTransport gives the Backend's own HTTP client a transport (TLS
// settings from a URL).
func withTransport(t *http.Transport) Option {
	return func(c *config) { c.hc, c.ownClient = &http.Client{Transport: t}, true }
}

// WithMaxWait sets the longest wait of one acquire request. Default:
// DefaultMaxWait (50s). It must be positive.
func WithMaxWait(d time.Duration) Option { return func(c *config) { c.maxWait = d } }

// WithRequestTimeout bounds each request to the gateway beyond the time
// it is asked to wait (an acquire's or a keepalive's long poll): a gateway
// that does not answer then fails the request with distlock.ErrUnavailable
// after this long. Close's requests are bounded by it too. Default:
// DefaultRequestTimeout (30s). It must be positive.
func WithRequestTimeout(d time.Duration) Option { return func(c *config) { c.requestTimeout = d } }

// Backend takes locks from a gateway. It is safe for concurrent use.
type Backend struct {
	base string // the gateway's URL, without a trailing "/"
	config

	ctx    context.Context // ends at Close: the keepalive loops and cleanups
	cancel context.CancelFunc

	// life says whether the Backend is open and tracks the loops and
	// background requests; Close shuts it holding mu, so that under mu it
	// stays as read.
	life *driver.Tracker

	mu       sync.Mutex
	sessions map[sessionKey][]*session // the live sessions (see Backend.session)
}

var _ driver.Backend = (*Backend)(nil)

// New returns a Backend on the gateway at baseURL (http://HOST:PORT, or
// https://, with a path if the gateway is served under one). A bad option
// returns an error matching distlock.ErrInvalidOption.
func New(baseURL string, opts ...Option) (*Backend, error) {
	if !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://") {
		return nil, fmt.Errorf("%w: gatewaylock: the gateway URL must start with http:// or https://", driver.ErrInvalidOption)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	cfg := config{hc: &http.Client{Transport: t}, ownClient: true,
		maxWait: DefaultMaxWait, requestTimeout: DefaultRequestTimeout}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.hc == nil:
		return nil, fmt.Errorf("%w: gatewaylock: nil HTTP client", driver.ErrInvalidOption)
	case cfg.maxWait <= 0:
		return nil, fmt.Errorf("%w: gatewaylock: max wait %v is not positive", driver.ErrInvalidOption, cfg.maxWait)
	case cfg.requestTimeout <= 0:
		return nil, fmt.Errorf("%w: gatewaylock: request timeout %v is not positive", driver.ErrInvalidOption, cfg.requestTimeout)
	}
	b := &Backend{base: strings.TrimRight(baseURL, "/"), config: cfg, life: driver.NewTracker(ErrClosed),
		sessions: map[sessionKey][]*session{}}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// ErrClosed is matched by the errors of a Backend used after Close; it
// matches distlock.ErrClosed.
var ErrClosed = driver.ClosedError("gatewaylock")

// Close ends the Backend's sessions (DELETE, which releases every lock
// still held in them: their holders are told through OnLost), stops their
// keepalives and closes the idle connections of the Backend's own HTTP
// client. Release the locks first.
func (b *Backend) Close() error {
	b.mu.Lock()
	if !b.life.Shut() {
		b.mu.Unlock()
		return nil
	}
	var all []*session
	for _, ss := range b.sessions {
		all = append(all, ss...)
	}
	clear(b.sessions)
	b.mu.Unlock()
	b.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), b.requestTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(func() { s.close(ctx) })
	}
	wg.Wait()
	b.life.Wait()
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
	Limit  int    `json:"limit"` // on session-limit
}

func (e *apiError) Error() string {
	return fmt.Sprintf("gatewaylock: gateway answered %d %s: %s", e.Status, strings.TrimPrefix(e.Type, "urn:distlock:problem:"), e.Detail)
}

// kind reports the problem type's last part.
func (e *apiError) kind() string { return strings.TrimPrefix(e.Type, "urn:distlock:problem:") }

// Is sorts the gateway's answers into distlock's error kinds.
func (e *apiError) Is(target error) bool {
	switch target {
	case driver.ErrUnavailable:
		// A session's limit of locks is a 429 too, which lasts until the
		// session releases a lock: not worth a retry.
		return e.Status >= 500 || e.Status == http.StatusTooManyRequests && e.kind() != "session-limit" ||
			e.kind() == "session-not-found"
	case ErrSessionLimit:
		return e.kind() == "session-limit"
	case driver.ErrInvalidKey:
		return e.kind() == "bad-name"
	case driver.ErrInvalidOption:
		return e.kind() == "bad-ttl"
	case driver.ErrLockLost:
		return e.kind() == "lock-lost"
	case ErrRefused:
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
	}
	return false
}

// do sends a request and decodes a 2xx answer into out. Errors are
// *apiError for an answer, else match distlock.ErrUnavailable (or, when
// ctx ended, ctx.Err()).
func (b *Backend) do(pctx context.Context, method, path string, in, out any, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(pctx, wait+b.requestTimeout)
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
		return fmt.Errorf("%w: gatewaylock: %w", driver.ErrInvalidOption, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		if pctx.Err() != nil {
			return pctx.Err()
		}
		// (A request that timed out stays a net.Error with Timeout.)
		return fmt.Errorf("%w: gatewaylock: %s %s: %w", driver.ErrUnavailable, method, strings.SplitN(path, "?", 2)[0], unwrapURL(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%w: gatewaylock: reading the answer: %w", driver.ErrUnavailable, err)
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
			return fmt.Errorf("%w: gatewaylock: malformed answer: %w", driver.ErrUnavailable, err)
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

type grantAnswer struct {
	Token          string `json:"token"`
	TTLRemainingMS int64  `json:"ttl_remaining_ms"`
}

// acquireRetries bounds the retries of an acquire whose answer was lost
// on the way (the gateway answers a retry with the same grant).
const acquireRetries = 2

// Acquire acquires key in a session of the Backend with opts.TTL and
// opts.Owner (created when there is none), in one request.
func (b *Backend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	return b.acquire(ctx, key, opts, exclusiveLock)
}

// AcquireShared acquires a shared (read) lock of key, as Acquire does a
// lock (POST /v1/locks/{name}/acquire with shared true). A gateway whose
// lock service cannot grant shared locks (501) gives an error matching
// errors.ErrUnsupported.
func (b *Backend) AcquireShared(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	return b.acquire(ctx, key, opts, sharedLock)
}

var _ driver.SharedLocks = (*Backend)(nil)

// lockKind is what an acquire asks for: a lock, or a shared lock.
type lockKind bool

const (
	exclusiveLock lockKind = false
	sharedLock    lockKind = true
)

// acquire is Acquire, or AcquireShared.
func (b *Backend) acquire(ctx context.Context, key string, opts driver.AcquireOptions, kind lockKind) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	for fresh := false; ; fresh = true {
		s, err := b.session(ctx, sessionKey{ttl: opts.TTL, owner: opts.Owner}, key)
		if err != nil {
			return nil, b.acquireErr(ctx, err)
		}
		l, err := s.acquire(ctx, key, opts, kind)
		var ae *apiError
		if errors.As(err, &ae) && ae.kind() == "session-not-found" {
			// The gateway no longer knows the session (it restarted, or
			// the session expired): its locks are gone, and the acquire
			// goes to a new one, once.
			s.end(fmt.Errorf("%w: gatewaylock: the gateway ended the session: %w", driver.ErrLockLost, err), false)
			if !fresh && ctx.Err() == nil {
				continue
			}
		}
		if err != nil {
			return nil, b.acquireErr(ctx, err)
		}
		return l, nil
	}
}

func (b *Backend) acquireErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return driver.Canceled(ctx)
	}
	return err
}

// candidacyOf returns the name of the election in which an acquire of key
// with opts is a candidacy, or "": a candidacy whose key is the election's
// lock name at the gateway (election.KeyPrefix+NAME) goes through the
// gateway's election routes.
func candidacyOf(key string, opts driver.AcquireOptions) string {
	if opts.Election == "" || key != election.KeyPrefix+opts.Election {
		return ""
	}
	return opts.Election
}

// acquireOnce asks for key in the session, retrying an acquire whose
// answer was lost. A candidacy is a campaign, which the gateway holds as
// the lock key; a shared lock is never a candidacy.
func (s *session) acquireOnce(ctx context.Context, key string, opts driver.AcquireOptions, kind lockKind) (grantAnswer, time.Time, error) {
	path := "/v1/locks/" + escape(key) + "/acquire"
	body := map[string]any{"session": s.id}
	name := ""
	shared := kind == sharedLock
	if shared {
		body["shared"] = true
	} else {
		name = candidacyOf(key, opts)
	}
	if name != "" {
		path = "/v1/elections/" + escape(name) + "/campaign"
		body["value"] = opts.Owner
	}
	for retries := 0; ; {
		wait := time.Duration(0)
		if opts.Wait {
			wait = s.b.maxWait
			if d, ok := ctx.Deadline(); ok {
				wait = min(wait, time.Until(d)+time.Millisecond)
			}
		}
		if opts.Wait {
			wait = max(wait, time.Millisecond)
		}
		// A campaign that does not wait is sent with wait=0: the gateway
		// tries once, without a deadline. (Sent as the shortest wait, it
		// was refused "another leader" while nobody led when the gateway
		// took longer than that wait to grant the free election.)
		sent := time.Now()
		var g grantAnswer
		err := s.b.do(ctx, "POST", path+"?wait="+wait.String(), body, &g, wait)
		var ae *apiError
		switch {
		case err == nil:
			return g, sent, nil
		case errors.As(err, &ae) && shared && ae.kind() == "bad-request" && strings.Contains(ae.Detail, `unknown field "shared"`):
			// A gateway from before shared locks.
			return g, sent, fmt.Errorf("gatewaylock: the gateway cannot grant shared locks (%s): %w", ae.Detail, errors.ErrUnsupported)
		case errors.As(err, &ae) && name != "" && ae.kind() == "bad-request":
			// The gateway's bound on a leader's value.
			return g, sent, fmt.Errorf("%w: %w", driver.ErrInvalidOption, err)
		case errors.As(err, &ae) && (ae.kind() == "not-acquired" || ae.kind() == "not-elected"):
			if !opts.Wait {
				return g, sent, fmt.Errorf("%w: %w", driver.ErrNotAcquired, err)
			}
			if ctx.Err() != nil {
				return g, sent, driver.Canceled(ctx)
			}
			continue
		case errors.As(err, &ae) && shared && ae.Status == http.StatusNotImplemented:
			// Not wrapped: a 501 would match ErrUnavailable, which is
			// retried.
			return g, sent, fmt.Errorf("gatewaylock: the gateway's lock service cannot grant shared locks (%s): %w",
				ae.Detail, errors.ErrUnsupported)
		case errors.As(err, &ae) && ae.kind() == "session-limit":
			return g, sent, sessionLimit(ae, opts)
		case errors.As(err, &ae) && ae.kind() == "lock-lost":
			// Granted, and lost before the answer: worth another try.
			return g, sent, fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
		case ae == nil && ctx.Err() == nil && !errors.Is(err, syscall.ECONNREFUSED) && retries < acquireRetries:
			// The request may have reached the gateway and its answer
			// been lost: the gateway answers the same acquire in the same
			// session with the grant it made, if any.
			retries++
			continue
		default:
			return g, sent, err
		}
	}
}

// sessionLimit is the error of an acquire refused for the session's
// limit of locks: it says which limit, and how to live with it.
func sessionLimit(ae *apiError, opts driver.AcquireOptions) error {
	limit := "no more locks"
	if ae.Limit > 0 {
		limit = fmt.Sprintf("%d locks", ae.Limit)
	}
	return fmt.Errorf("%w: the gateway allows %s (terms included) in one session, and this Backend's session for TTL %v and owner %q "+
		"holds or waits for as many: release one first, or raise the gateway's limit (distlock serve --max-locks N, gateway.WithMaxLocks)",
		ErrSessionLimit, limit, opts.TTL, opts.Owner)
}

var _ driver.Lister = (*Backend)(nil)

type listAnswer struct {
	Locks []struct {
		Lock    string    `json:"lock"`
		Token   string    `json:"token"`
		Owner   string    `json:"owner"`
		Since   time.Time `json:"since"`
		Expires time.Time `json:"expires"`
		Shared  bool      `json:"shared"`
	} `json:"locks"`
}

// List returns the holders of the locks whose keys start with prefix, as
// the gateway lists them (for `distlock status`).
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	var a listAnswer
	if err := b.do(ctx, "GET", "/v1/locks?prefix="+url.QueryEscape(prefix), nil, &a, 0); err != nil {
		return nil, err
	}
	out := make([]driver.Holder, 0, len(a.Locks))
	for _, x := range a.Locks {
		tok, err := strconv.ParseUint(x.Token, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: gatewaylock: malformed token %q", driver.ErrUnavailable, x.Token)
		}
		out = append(out, driver.Holder{Key: x.Lock, Token: tok, Owner: x.Owner, Since: x.Since, Expires: x.Expires, Shared: x.Shared})
	}
	return out, nil
}

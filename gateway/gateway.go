package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Defaults of the options. Each option's comment repeats its default.
const (
	DefaultMaxSessions   = 10000
	DefaultMaxLocks      = 64
	DefaultMaxWaiting    = 1024
	DefaultMaxWait       = time.Minute
	DefaultMinTTL        = 100 * time.Millisecond
	DefaultMaxTTL        = 10 * time.Minute
	DefaultHeaderTimeout = 5 * time.Second
	DefaultIdleTimeout   = 2 * time.Minute
	maxHeaderBytes       = 16 << 10
	releaseTimeout       = 10 * time.Second // for the releases of an ending session
)

// Option configures a Gateway.
type Option func(*config)

type config struct {
	serviceURL    string
	tokens        *Tokens
	openForce     bool
	maxSessions   int
	maxLocks      int
	maxWaiting    int
	maxWait       time.Duration
	minTTL        time.Duration
	maxTTL        time.Duration
	headerTimeout time.Duration
	logger        *slog.Logger
	meters        metric.MeterProvider
	metrics       http.Handler
	maxStreams    int
	heartbeat     time.Duration
}

// WithServiceURL names the lock service on the dashboard: the page shows
// rawURL as driver.Redact shows it (user information and password-like
// query parameters masked), so that the URL that opened the backend,
// password included, may be given; its scheme is the service's kind.
// Default: none, the page shows the kind alone, the name of the backend's
// package (such as redislock).
func WithServiceURL(rawURL string) Option { return func(c *config) { c.serviceURL = rawURL } }

// WithTokens makes the gateway require bearer tokens (see ParseTokens).
// Each token has its own share of the limits on sessions, waiting
// requests and event streams: the share its entry sets, or else an even
// part of what the other tokens leave (at least 1); New refuses shares
// set that add up to more than the limits. Default: none, every request
// is allowed, and all share the limits.
func WithTokens(t *Tokens) Option { return func(c *config) { c.tokens = t } }

// WithForceWithoutTokens lets every request force the release of any
// lock when the gateway has no tokens (WithTokens), where every caller
// is trusted alike. With tokens, only admin tokens may, and New refuses
// this option. Default: off, a gateway without tokens refuses forced
// releases, so that no program of the host, nor a page that slipped past
// the gateway's cross-origin checks, can take a lock from its holder.
func WithForceWithoutTokens() Option { return func(c *config) { c.openForce = true } }

// WithMaxSessions bounds the number of sessions (split among the tokens,
// see WithTokens); a session over it is refused with 429. Default:
// DefaultMaxSessions (10000).
func WithMaxSessions(n int) Option { return func(c *config) { c.maxSessions = n } }

// WithMaxLocks bounds the locks held or being acquired by one session,
// terms of elections and campaigns included: one more is refused with 429
// and ProblemSessionLimit. Default: DefaultMaxLocks (64).
func WithMaxLocks(n int) Option { return func(c *config) { c.maxLocks = n } }

// WithMaxWaiting bounds the requests waiting at once (acquires,
// campaigns, keepalives and blocking reads with a wait), over all sessions (split among the
// tokens, see WithTokens); one over it is refused with 429. Default:
// DefaultMaxWaiting (1024).
func WithMaxWaiting(n int) Option { return func(c *config) { c.maxWaiting = n } }

// WithMaxWait caps the ?wait= of acquires, keepalives, blocking reads
// and campaigns, and is a campaign's wait when it sends none. With 0 no
// request waits: an acquire and a campaign are each one try, and a
// keepalive or a blocking read answers at once. Default: DefaultMaxWait
// (1m).
func WithMaxWait(d time.Duration) Option { return func(c *config) { c.maxWait = d } }

// WithTTLRange bounds the TTL of sessions. The TTL only has to outlast
// the gap between a client's keepalives, and it is how long a vanished
// client's session keeps its locks and its place in its token's share.
// Default: DefaultMinTTL (100ms) to DefaultMaxTTL (10m).
func WithTTLRange(lo, hi time.Duration) Option {
	return func(c *config) { c.minTTL, c.maxTTL = lo, hi }
}

// WithHeaderTimeout bounds how long Serve waits for a request's headers.
// Default: DefaultHeaderTimeout (5s).
func WithHeaderTimeout(d time.Duration) Option { return func(c *config) { c.headerTimeout = d } }

// WithLogger sets where the gateway logs requests (at debug level) and
// failures. Default: nothing is logged. Bearer tokens and session ids are
// never logged.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithMeterProvider sets the OpenTelemetry meter provider of the
// gateway's instruments and of its Clients' (see distlock.WithMeterProvider).
// Default: the global provider.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.meters = mp } }

// WithMetricsHandler sets the handler of GET /metrics, typically a
// Prometheus exporter of the meter provider given to WithMeterProvider.
// It needs a token like the API when the gateway has tokens. Default:
// none, /metrics answers 501.
func WithMetricsHandler(h http.Handler) Option { return func(c *config) { c.metrics = h } }

// ErrInvalidOption is matched by the error of New for a bad option.
var ErrInvalidOption = fmt.Errorf("gateway: %w", distlock.ErrInvalidOption)

// A Gateway serves the locks, and the elections, of one driver.Backend
// over HTTP. It is an
// http.Handler; Serve runs it with the right server timeouts. It is safe
// for concurrent use.
type Gateway struct {
	b       driver.Backend
	lister  driver.Lister // nil when the backend cannot list holders
	cfg     config
	epoch   string // drawn at New: the prefix of this gateway's session ids
	mux     *http.ServeMux
	nameOps map[string]map[string]http.Handler // the routes of a lock or an election, by prefix and last segment
	reader  *distlock.Client                   // reads and watches the leaders of elections
	inst    *instruments
	anyone  *principal        // who every request is without tokens
	service dashboardService  // what the dashboard says of the lock service
	shares  map[string]*share // by token name ("" without tokens); their counts by mu

	// mu guards the fields below. It is taken before a session's mu
	// (see session), and never held while the backend or a Client is
	// called.
	mu       sync.Mutex
	closed   bool
	sessions map[string]*session
	holders  map[string]*held              // the lock names held through this gateway
	readers  map[string]map[*held]struct{} // the shared locks held through this gateway, by name
	waiting  int
	feed     feed
	cont     contention
	bg       sync.WaitGroup // the goroutines of the held locks and of expiries

	// observeOpening, set by tests before the gateway's first use, runs
	// as an observe stream opens the election's observation.
	observeOpening func()
	// dropped, set by tests before the gateway's first use, runs as a
	// release has taken a lock from its session, before the lock service
	// releases it.
	dropped func()
}

// New returns a Gateway over b. Close it to end its sessions, which
// releases their locks.
func New(b driver.Backend, opts ...Option) (*Gateway, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidOption)
	}
	cfg := config{
		maxSessions: DefaultMaxSessions, maxLocks: DefaultMaxLocks, maxWaiting: DefaultMaxWaiting,
		maxWait: DefaultMaxWait, minTTL: DefaultMinTTL, maxTTL: DefaultMaxTTL,
		headerTimeout: DefaultHeaderTimeout, logger: slog.New(slog.DiscardHandler),
		maxStreams: DefaultMaxStreams, heartbeat: DefaultHeartbeat,
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.maxSessions < 1 || cfg.maxLocks < 1 || cfg.maxWaiting < 1 || cfg.maxStreams < 1:
		return nil, fmt.Errorf("%w: limits must be at least 1", ErrInvalidOption)
	case cfg.maxWait < 0 || cfg.headerTimeout <= 0 || cfg.heartbeat <= 0:
		return nil, fmt.Errorf("%w: timeouts must be positive", ErrInvalidOption)
	case cfg.minTTL <= distlock.DefaultSafetyMargin || cfg.maxTTL < cfg.minTTL || cfg.maxTTL > distlock.MaxTTL:
		return nil, fmt.Errorf("%w: TTL range [%v, %v] not within (%v, %v]", ErrInvalidOption,
			cfg.minTTL, cfg.maxTTL, distlock.DefaultSafetyMargin, distlock.MaxTTL)
	case cfg.logger == nil:
		return nil, fmt.Errorf("%w: nil logger", ErrInvalidOption)
	case cfg.openForce && cfg.tokens != nil:
		return nil, fmt.Errorf("%w: WithForceWithoutTokens with tokens: give a token the admin scope instead", ErrInvalidOption)
	}
	var err error
	g := &Gateway{b: b, cfg: cfg, epoch: rand.Text()[:10], anyone: &principal{prefixes: []string{""}, admin: cfg.openForce},
		sessions: map[string]*session{}, holders: map[string]*held{}, readers: map[string]map[*held]struct{}{}, feed: feed{changed: make(chan struct{})}}
	if g.shares, err = newShares(cfg); err != nil {
		return nil, err
	}
	g.lister, _ = b.(driver.Lister)
	g.service = describeService(b, cfg.serviceURL)
	inst, err := newInstruments(cfg.meters, g)
	if err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	g.inst = inst
	ropts := []distlock.Option{distlock.WithLogger(cfg.logger)}
	if cfg.meters != nil {
		ropts = append(ropts, distlock.WithMeterProvider(cfg.meters))
	}
	if g.reader, err = distlock.New(b, ropts...); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.mux = g.routes()
	return g, nil
}

// crossOrigin refuses the state-changing requests of web pages of other
// origins.
var crossOrigin = http.NewCrossOriginProtection()

// ServeHTTP serves the gateway's API.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if pr := readBody(w, r, g.bodyTimeout()); pr != nil {
		writeProblem(w, pr)
		return
	}
	if g.cfg.tokens == nil && !loopbackHost(r.Host) {
		// Without tokens the gateway trusts whoever reaches it, which is
		// safe on the loopback interface only: a web page whose host name
		// was rebound to 127.0.0.1 still sends its own name as Host.
		writeProblem(w, newProblem(http.StatusForbidden, ProblemForbidden,
			"without tokens the gateway answers requests for localhost or a loopback address only"))
		return
	}
	if err := crossOrigin.Check(r); err != nil {
		// A browser says where a request comes from (Sec-Fetch-Site, or
		// Origin): a page of another origin, even one served on another
		// port of this host, may not change anything here. Programs send
		// neither header, and the dashboard is served from this origin.
		writeProblem(w, newProblem(http.StatusForbidden, ProblemForbidden,
			"a request of a web page of another origin is refused: the gateway's API is for programs and its own dashboard"))
		return
	}
	if rawDotSegment(r.URL.EscapedPath()) {
		writeProblem(w, newProblem(http.StatusBadRequest, ProblemBadName,
			`the path has a "." or ".." segment: percent-encode such a lock name (%2E)`))
		return
	}
	if h := g.nameRoute(r); h != nil {
		h.ServeHTTP(w, r)
		return
	}
	g.mux.ServeHTTP(w, r)
}

// Serve serves the gateway on ln until ctx ends, with timeouts against
// slow clients: a request's headers must arrive within WithHeaderTimeout,
// its body within 10s, and its answer is written within the longest wait
// plus 30s. When ctx ends it closes the gateway (ending its sessions,
// which releases their locks and ends the waits in progress) and shuts
// the server down; it returns nil then, or the server's error.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := g.server()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		g.Close(context.Background())
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), releaseTimeout+5*time.Second)
	defer cancel()
	cerr := g.Close(sctx)
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-done
	return cerr
}

// server is the HTTP server of Serve.
func (g *Gateway) server() *http.Server {
	return &http.Server{
		Handler:           g,
		ReadHeaderTimeout: g.cfg.headerTimeout,
		WriteTimeout:      g.cfg.maxWait + 30*time.Second,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.cfg.logger.Handler(), slog.LevelDebug),
	}
}

// Close ends every session (releasing its locks, and its terms) and the
// streams of elections' leaders, and waits for the gateway's goroutines,
// or for ctx. Requests that arrive later are
// answered 503. It returns the joined errors of the releases that failed.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	close(g.feed.changed) // the event streams end
	g.feed.changed = make(chan struct{})
	ss := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		ss = append(ss, s)
	}
	g.mu.Unlock()
	var errs []error
	for _, s := range ss {
		if err := g.endSession(ctx, s, endClosed); err != nil {
			errs = append(errs, err)
		}
	}
	// The elections' observers end with the reader's watches.
	if err := g.reader.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	done := make(chan struct{})
	go func() { g.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// goBackground runs f in a goroutine that Close waits for, unless the
// gateway is closed; it reports whether f runs.
func (g *Gateway) goBackground(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		f()
	}()
	return true
}

// startWait counts a waiting request of p, or refuses it past p's share
// of WithMaxWaiting. The returned func ends it.
func (g *Gateway) startWait(p *principal) (func(), *problem) {
	sh := g.share(p)
	g.mu.Lock()
	switch {
	case sh.waiting >= sh.maxWaiting:
		pr := sh.tooMany(sh.waiting, "requests waiting")
		g.mu.Unlock()
		return nil, pr
	case g.waiting >= g.cfg.maxWaiting:
		pr := tooMany(g.waiting, "requests waiting")
		g.mu.Unlock()
		return nil, pr
	}
	sh.waiting++
	g.waiting++
	g.mu.Unlock()
	// The gauge is told outside g.mu, so that no instrument runs under it.
	g.inst.waiting.Add(context.Background(), 1)
	return func() {
		g.inst.waiting.Add(context.Background(), -1)
		g.mu.Lock()
		sh.waiting--
		g.waiting--
		g.mu.Unlock()
	}, nil
}

// lookup finds the session id for p.
func (g *Gateway) lookup(id string, p *principal) (*session, *problem) {
	g.mu.Lock()
	s := g.sessions[id]
	closed := g.closed
	g.mu.Unlock()
	// An admin may use another token's session only if it may use every
	// name: the session's locks (which a keepalive shows and a deletion
	// releases) may lie outside a narrower admin's prefixes.
	if s != nil && (s.principal == p.name || (p.admin && p.mayAll())) {
		return s, nil
	}
	if closed {
		// Not "shutting down" (503, which a client takes for a busy
		// gateway and waits out, its locks held): the gateway released
		// the session's locks as it began to close.
		return nil, newProblem(http.StatusNotFound, ProblemSessionNotFound,
			"the gateway is shutting down: the session ended, and its locks were released")
	}
	epoch, _, ok := cutID(id)
	detail := "no such session: it ended (deleted, or expired for want of keepalives) or never existed"
	if ok && epoch != g.epoch {
		detail = "the session was created by another instance of the gateway (it restarted): its locks are gone; create a new session"
	}
	return nil, newProblem(http.StatusNotFound, ProblemSessionNotFound, detail)
}

func closingProblem() *problem {
	p := newProblem(http.StatusServiceUnavailable, ProblemUnavailable, "the gateway is shutting down")
	p.retryAfter = 1
	return p
}

// Stats are counts of what a gateway holds.
type Stats struct {
	Sessions int // open sessions
	Locks    int // locks held through the gateway, shared locks included (not permits)
	Waiting  int // requests waiting (long-polls)
}

// Stats returns the gateway's counts now.
func (g *Gateway) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	locks := len(g.holders)
	for _, rs := range g.readers {
		locks += len(rs)
	}
	return Stats{Sessions: len(g.sessions), Locks: locks, Waiting: g.waiting}
}

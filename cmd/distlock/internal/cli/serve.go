package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/pglock"
)

// DefaultListen is where `distlock serve` listens without --listen.
const DefaultListen = "127.0.0.1:7420"

type serveFlags struct {
	listen      string
	tokens      string
	tlsCert     string
	tlsKey      string
	tlsClientCA string
	maxSessions int
	maxLocks    int
	maxWait     time.Duration
	maxTTL      time.Duration
	openForce   bool
}

func (r *runner) serveCommand() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve fenced locks and leader elections over HTTP, for programs in any language",
		Long: `Serve runs a gateway that gives HTTP clients the locks of the lock service
(--backend): sessions kept alive by long-polling keepalives, blocking
acquires, fencing tokens, release fenced by the token, and the sequencer
check; and its leader elections (campaign, leader, observe, proclaim,
resign under /v1/elections/NAME/), whose terms the sessions hold as the
locks election/NAME. The API is described at /v1/openapi.json; /healthz answers whether
it serves and /metrics has Prometheus metrics. The page at / is a live
dashboard of the locks held through it, which names the lock service
without its password.

Without --tokens it listens on the loopback interface only, and every user
of this host may take any lock; none may force the release of another's,
unless --allow-force-release lets every one of them. Requests from web
pages of other origins, and request bodies not sent as application/json,
are refused, so that a page the user opens cannot use the gateway.

With --tokens FILE (JSON: {"tokens": [{"name", "token", "prefixes",
"admin"}]}; other users of the host may neither read nor write it, nor
its group write it: mode 0600 or 0640, owned by this user or root)
every request needs "Authorization: Bearer TOKEN", each token may use
the lock names starting with one of its prefixes (an election NAME is
the lock name election/NAME), and only admin tokens
may force a release.
Tokens are never logged. Each token has its own share of --max-sessions,
and of the waiting requests (1024) and event streams (256): the
"max_sessions", "max_waiting" and "max_streams" of its entry, or else an
even part of what the other tokens leave. With --tls-cert and --tls-key
it serves HTTPS, and with --tls-client-ca it asks every client for a
certificate signed by that CA.

A session's TTL is at most --max-ttl: it only has to outlast the gap
between a client's keepalives, and it is how long the locks of a client
that vanished stay held. A session holds or waits for at most --max-locks
locks (terms and permits included); one more is refused with 429, problem
type session-limit, until it releases one. A Go Client through the
gateway keeps one session per TTL and owner, so that this bounds the
locks it holds at once: a partition member holds every unit of its group
plus its membership when it is alone.

Several gateways over one network lock service exclude each other's
clients. It runs until interrupted (Ctrl-C or SIGTERM), then ends its
sessions, which releases their locks.`,
		Example: `  distlock serve
  distlock serve --backend etcd://127.0.0.1:2379 --listen :7420 --tokens /etc/distlock/tokens.json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("serve takes no arguments, got %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitWith(r.serve(cmd.Context(), f))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", DefaultListen, "address to listen on (without --tokens, a loopback address)")
	fl.StringVar(&f.tokens, "tokens", "", "JSON file of bearer tokens and their lock name prefixes")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (with --tls-key)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "the PEM key of --tls-cert")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", "", "require client certificates signed by this PEM CA bundle (mutual TLS)")
	fl.IntVar(&f.maxSessions, "max-sessions", gateway.DefaultMaxSessions, "most sessions open at once")
	fl.IntVar(&f.maxLocks, "max-locks", gateway.DefaultMaxLocks, "most locks one session holds or waits for at once")
	fl.DurationVar(&f.maxWait, "max-wait", gateway.DefaultMaxWait, "longest wait of one acquire or keepalive")
	fl.DurationVar(&f.maxTTL, "max-ttl", gateway.DefaultMaxTTL, "longest TTL of a session: how long a vanished client keeps its locks")
	fl.BoolVar(&f.openForce, "allow-force-release", false, "without --tokens, let every local user force the release of any lock")
	return cmd
}

// loopbackOnly refuses a listen address off the loopback interface.
func loopbackOnly(addr net.Addr) error {
	ta, ok := addr.(*net.TCPAddr)
	if ok && ta.IP.IsLoopback() {
		return nil
	}
	return usagef("without --tokens, serve listens on a loopback address only (such as %s), not %s: give --tokens FILE to serve other hosts", DefaultListen, addr)
}

func (r *runner) serve(ctx context.Context, f serveFlags) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	opts := []gateway.Option{gateway.WithLogger(r.log), gateway.WithMaxSessions(f.maxSessions), gateway.WithMaxLocks(f.maxLocks), gateway.WithMaxWait(f.maxWait),
		gateway.WithTTLRange(gateway.DefaultMinTTL, f.maxTTL)}
	switch {
	case f.maxLocks < 1:
		return usagef("--max-locks %d: want at least 1", f.maxLocks)
	case f.maxTTL < gateway.DefaultMinTTL || f.maxTTL > distlock.MaxTTL:
		return usagef("--max-ttl %v: want %v to %v", f.maxTTL, gateway.DefaultMinTTL, distlock.MaxTTL)
	case f.openForce && f.tokens != "":
		return usagef("--allow-force-release is for a gateway without --tokens: with them, give a token \"admin\": true")
	case f.openForce:
		opts = append(opts, gateway.WithForceWithoutTokens())
	}
	if f.tokens != "" {
		t, err := gateway.ReadTokens(f.tokens)
		if err != nil {
			return usagef("%v", err)
		}
		opts = append(opts, gateway.WithTokens(t))
	}
	tlsConfig, err := serverTLS(f)
	if err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return usagef("--listen %q: want HOST:PORT", f.listen)
	}
	if f.tokens == "" {
		if ip := net.ParseIP(host); host == "" || (ip != nil && !ip.IsLoopback()) {
			return usagef("without --tokens, serve listens on a loopback address only (such as %s), not %q: give --tokens FILE to serve other hosts", DefaultListen, f.listen)
		}
	}

	// The Prometheus exporter reads the instruments of the gateway and of
	// its Clients through a meter provider of its own.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return fmt.Errorf("%w: metrics: %w", errInternal, err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(context.Background())
	opts = append(opts, gateway.WithMeterProvider(mp),
		gateway.WithMetricsHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))

	b, closer, err := openBackend(ctx, r.backendURL, r.openers)
	if err != nil {
		return err
	}
	defer closer.Close()
	// The dashboard names the service as messages do: without secrets.
	opts = append(opts, gateway.WithServiceURL(describeBackend(b, r.backendURL)))
	g, err := gateway.New(b, opts...)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", f.listen)
	if err != nil {
		return usagef("listen: %v", err)
	}
	if f.tokens == "" {
		if err := loopbackOnly(ln.Addr()); err != nil {
			ln.Close()
			return err
		}
	}
	scheme := "http"
	if tlsConfig != nil {
		ln, scheme = tls.NewListener(ln, tlsConfig), "https"
	}
	shown := r.backendURL
	if shown == "" {
		shown = "file://" + defaultDirHelp()
	}
	auth := "bearer tokens from " + f.tokens
	switch {
	case f.tokens == "" && f.openForce:
		auth = "no --tokens: loopback only, every local user may take and force-release any lock"
	case f.tokens == "":
		auth = "no --tokens: loopback only, every local user may take any lock, none may force a release"
	}
	fmt.Fprintf(r.stderr, "distlock serve: locks of %s on %s://%s (%s)\n", redact(shown), scheme, ln.Addr(), auth)
	if u, ok := sessionLocksURL(r.backendURL); ok {
		if _, sized := u.Get("pool_max_conns"); !sized {
			if pb, ok := b.(*pglock.Backend); ok {
				fmt.Fprintf(r.stderr, "distlock serve: note: with postgres:// session locks each lock held or awaited keeps a connection of the pool, which has %d (pgx's default): beyond that, an acquire of any key waits for a release; give pool_max_conns in the URL (below the server's max_connections), or use mode=lease\n",
					pb.Pool().Config().MaxConns)
			}
		}
	}
	if err := g.Serve(ctx, ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serverTLS is the TLS configuration of the --tls flags, or nil.
func serverTLS(f serveFlags) (*tls.Config, error) {
	switch {
	case f.tlsCert == "" && f.tlsKey == "" && f.tlsClientCA == "":
		return nil, nil
	case f.tlsCert == "" || f.tlsKey == "":
		return nil, usagef("--tls-cert and --tls-key go together (and --tls-client-ca needs them)")
	}
	pair, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
	if err != nil {
		return nil, usagef("--tls-cert/--tls-key: %v", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if f.tlsClientCA != "" {
		pem, err := os.ReadFile(f.tlsClientCA)
		if err != nil {
			return nil, usagef("--tls-client-ca: %v", err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, usagef("--tls-client-ca %s holds no PEM certificate", f.tlsClientCA)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

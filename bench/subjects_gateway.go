package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/gatewaylock"
)

// SvcGateway is the service of the gateway rows: `distlock serve` over a
// lock directory, reached over loopback HTTP/1.1 with keep-alive.
const SvcGateway = "HTTP gateway (over filelock)"

// The rows of the gateway service, listed in Subjects. They share one
// gateway per Env, over a lock directory of their own.
var (
	// gatewayRTT is one loopback HTTP round trip on a kept-alive
	// connection: the unit of the gateway's overhead.
	gatewayRTT = Subject{
		ID: "gateway-healthz", Name: "gateway GET /healthz (one HTTP round trip)", Service: SvcGateway, Kind: KindRoundTrip,
		Settings: "net/http client, HTTP/1.1 keep-alive, loopback",
		Measures: Latency,
		Open: func(e *Env) (Locker, error) {
			url, err := gatewayURL(e)
			if err != nil {
				return nil, err
			}
			hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
			return funcLocker{lock: func(ctx context.Context, _ string) (Unlock, error) {
				req, err := http.NewRequestWithContext(ctx, "GET", url+"/healthz", nil)
				if err != nil {
					return nil, err
				}
				resp, err := hc.Do(req)
				if err != nil {
					return nil, err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return nil, fmt.Errorf("bench: gateway /healthz: %s", resp.Status)
				}
				return noUnlock, nil
			}, close: func() error { hc.CloseIdleConnections(); return nil }}, nil
		},
	}
	// gatewayDirect is the backend behind the gateway used directly: what
	// the gateway adds is the row below minus this one.
	gatewayDirect = Subject{
		ID: "gateway-direct", Name: "the same filelock directory, direct (Client.Acquire)", Service: SvcGateway, Kind: KindFloor,
		Settings: "the baseline of the gateway rows: distlock.Client defaults over the gateway's lock directory, in this process",
		Measures: Latency | Throughput | Contention,
		Open: func(e *Env) (Locker, error) {
			b, err := filelock.New(gatewayDir(e))
			if err != nil {
				return nil, err
			}
			return newDistlockLocker(b, false, func() error { return nil })
		},
	}
	// distlockGateway is a Client over gatewaylock: each instance its own
	// HTTP client and gateway session, as processes would have.
	distlockGateway = Subject{
		ID: "distlock-gateway", Name: "distlock via the gateway (gatewaylock, Client.Acquire)", Service: SvcGateway, Kind: KindDistlock,
		Settings: "gatewaylock defaults over HTTP/1.1 keep-alive: a session per Client, acquire as a long-poll (waiters wait in the gateway's Client), release fenced by the token; the gateway's defaults over filelock",
		Measures: Latency | Throughput | Contention | Semaphore,
		Open: func(e *Env) (Locker, error) {
			url, err := gatewayURL(e)
			if err != nil {
				return nil, err
			}
			b, err := gatewaylock.New(url)
			if err != nil {
				return nil, err
			}
			return newDistlockLocker(b, false, b.Close)
		},
	}
)

// gatewayServer is the gateway of one Env.
type gatewayServer struct {
	once sync.Once
	dir  string
	url  string
	err  error
}

var gatewayServers sync.Map // *Env -> *gatewayServer

func gatewayEnv(e *Env) *gatewayServer {
	v, _ := gatewayServers.LoadOrStore(e, &gatewayServer{})
	gs := v.(*gatewayServer)
	gs.once.Do(func() { gs.start(e) })
	return gs
}

func gatewayDir(e *Env) string { return gatewayEnv(e).dir }

func gatewayURL(e *Env) (string, error) {
	gs := gatewayEnv(e)
	if gs.err != nil || e.via == nil {
		return gs.url, gs.err
	}
	return routeURL(gs.url, e.via)
}

// start serves a gateway over a lock directory until the Env's test ends.
func (gs *gatewayServer) start(e *Env) {
	gs.dir = e.tb.TempDir()
	b, err := filelock.New(gs.dir)
	if err != nil {
		gs.err = fmt.Errorf("bench: gateway: %w", err)
		return
	}
	g, err := gateway.New(b, gateway.WithMaxSessions(4096))
	if err != nil {
		gs.err = fmt.Errorf("bench: gateway: %w", err)
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		gs.err = fmt.Errorf("bench: gateway: %w", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	gs.url = "http://" + ln.Addr().String()
	e.tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				e.tb.Errorf("bench: gateway: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.tb.Errorf("bench: gateway: Serve did not return")
		}
	})
}

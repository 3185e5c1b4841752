package torture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/gatewaylock"
)

// backendGateway is the kind of a Target reached through `distlock serve`:
// the workers open distlock+http:// URLs, and the gateway holds their locks
// on a file backend (a lock directory) in the harness process.
const backendGateway = "gateway"

// Gateway is a gateway served in the harness process over a file backend,
// on a loopback port that stays the same across restarts.
type Gateway struct {
	Addr string // host:port
	Dir  string // the file backend's lock directory

	mu   sync.Mutex
	g    *gateway.Gateway
	srv  *http.Server
	done chan error // the server's Serve result
}

// StartGateway serves a gateway over a file backend in a new temporary
// directory until t ends.
func StartGateway(t testing.TB) *Gateway {
	t.Helper()
	gw := &Gateway{Dir: t.TempDir()}
	if err := gw.start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gw.stop(true); err != nil {
			t.Error(err)
		}
	})
	return gw
}

// GatewayTarget is a Target of kind gateway served by gw.
func GatewayTarget(gw *Gateway) Target { return Target{Kind: backendGateway, Gateway: gw} }

func (gw *Gateway) start(addr string) error {
	b, err := filelock.New(gw.Dir)
	if err != nil {
		return err
	}
	g, err := gateway.New(b)
	if err != nil {
		return err
	}
	var ln net.Listener
	// The port of the previous life may linger a moment after its close.
	for i := 0; ; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil || i == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("torture: gateway listen: %w", err)
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	gw.mu.Lock()
	gw.Addr, gw.g, gw.srv, gw.done = ln.Addr().String(), g, srv, done
	gw.mu.Unlock()
	return nil
}

// stop ends the gateway. Gracefully, it closes the gateway first, which
// releases its locks, then shuts the server down. Otherwise it is the
// death of the process, as far as the clients and the file backend can
// tell: every connection is cut at once, mid-request, and then the locks
// are freed (as the kernel frees a dead process's flocks), with no
// release sent to anyone and no session ended through the API.
func (gw *Gateway) stop(graceful bool) error {
	gw.mu.Lock()
	g, srv, done := gw.g, gw.srv, gw.done
	gw.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if graceful {
		errs = append(errs, g.Close(ctx), srv.Shutdown(ctx))
	} else {
		errs = append(errs, srv.Close(), g.Close(ctx))
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Crash cuts every connection of the gateway and frees its locks (see
// stop), then starts a new gateway (a new epoch: the old sessions are
// unknown to it) on the same port and lock directory.
func (gw *Gateway) Crash() error {
	if err := gw.stop(false); err != nil {
		return fmt.Errorf("torture: gateway crash: %w", err)
	}
	return gw.start(gw.Addr)
}

// openGateway opens a worker's gatewaylock Backend.
func openGateway(ctx context.Context, r request) (distlock.Backend, io.Closer, error) {
	b, err := gatewaylock.OpenURL(ctx, r.URL)
	if err != nil {
		return nil, nil, err
	}
	return b, b, nil
}

// gatewayURL is the distlock+http:// URL of the gateway at addr.
func gatewayURL(addr string) string { return "distlock+http://" + addr }

// The gateway rows: client → gatewaylock → HTTP → gateway → file backend.
// The gateway's session is the lease of a grant: a stopped or cut-off
// client stops keeping it alive, and the gateway ends it and releases the
// lock, where the file backend alone would keep the lock for as long as
// the holder lives.
func init() {
	addRow("pause", backendGateway, ExpectBite, "the stopped client's session is not kept alive: the gateway ends it after its TTL and releases the flock, and the waiter is granted", nil)
	addRow("delay", backendGateway, ExpectBite, "", nil)
	addRow("partition", backendGateway, ExpectBite, "the proxy is between the client and the gateway; the gateway ends the cut-off session after its TTL", nil)
	addRow("holder-kill", backendGateway, ExpectHold, "the killed client's session ends after its TTL (nothing keeps it alive), which releases the flock", nil)
	notRow("server-kill/no-fsync", backendGateway, "see gateway-crash")
	notRow("server-kill/fsync", backendGateway, "see gateway-crash")
	notRow("leader-kill", backendGateway, "one gateway over a file backend: see gateway-crash")
	notRow("failover/missed-1", backendGateway, "one gateway over a file backend: no replica")
	notRow("failover/missed-2", backendGateway, "one gateway over a file backend: no replica")
	notRow("late-release/naive", backendGateway, "no naive gateway release built: the gateway's release is fenced by session and token")
	notRow("late-release/owner-checked", backendGateway, "not run through the gateway yet")
	notRow("lost-reply/naive", backendGateway, "no naive gateway lock built")
	notRow("lost-reply/distlock", backendGateway, "not run here: an acquire is idempotent per session and name in the gateway, and gatewaylock's own tests retry it")
	notRow("lost-reply/distlock-no-retry", backendGateway, "not run here: see lost-reply/distlock")
	Scenarios = append(Scenarios, Scenario{
		Name:   "gateway-crash",
		Title:  "the gateway dies while a lock is held through it (every connection cut mid-request, its flocks freed at once, no release sent) and a new gateway starts on the same port and lock directory; the waiter is granted by the new gateway and writes; the holder, whose next renewal is still ahead, checks its lock and writes with its old token",
		Expect: map[string]Expect{backendGateway: ExpectBite},
		Why: map[string]string{
			backendGateway: "the file backend frees a dead process's locks at once, and the holder learns of the loss only at its next renewal: until then its own check passes (on a lock service with TTLs the old grant would stay until it expires instead)",
			backendRedis:   "no gateway", backendEtcd: "no gateway", backendFile: "no gateway",
			backendZK: "no gateway", backendPG: "no gateway",
		},
		Run: gatewayCrashScenario,
	})
	findings["gateway-crash"] = "Over the file backend a dead gateway's locks are free at once, and the holder learns of the loss only from its next renewal (the new gateway answers 404 to a session of the previous epoch): until then its own check passes, so its write with the old token lands in the unfenced store and is refused by the fenced one. The loss is seen within one renewal interval (detection p50/p99), well before the TTL. The file backend keeps its token counter on disk, so the new gateway's grants continue above the old ones (no token regression)."
}

// Timing of the gateway-crash row: a renewal every gatewayCrashTTL/2, so
// that the holder's check passes in the moment between the new gateway's
// grant to the waiter and the holder's write, in all but a few rounds
// (those the harness repeats).
const gatewayCrashTTL = 4 * time.Second

// gatewayCrashScenario crashes and restarts the gateway while A holds the
// lock; B acquires through the new gateway and writes; then A, checking its
// lock before its read and its write, increments the resource with its old
// token. Afterwards A must see the loss (its lock's context ends) within a
// renewal interval, and B's token must be above A's.
func gatewayCrashScenario(f *Fixture) error {
	r := f.Run
	gw := f.Target.Gateway
	cfg := WorkerConfig{TTL: gatewayCrashTTL, RenewEvery: gatewayCrashTTL / 2}
	ws := f.Workers(map[string]WorkerConfig{"A": cfg, "B": cfg})
	a, b := ws["A"], ws["B"]
	for round := range f.rounds() {
		ta, err := f.warmThenHold(a, b)
		if err != nil {
			return err
		}
		if err := gw.Crash(); err != nil {
			return err
		}
		r.Fault("", "gateway crashed and restarted")
		r.MarkFault(a)
		bres, ok, err := waitGrant(b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: time.Minute}), time.Minute)
		if !ok {
			return fmt.Errorf("B not granted by the new gateway: %v", err)
		}
		// A, unaware, interleaves with B, checking its lock each time.
		out := kindNotLive
		v, err := a.Read(f.Res, false)
		switch {
		case err != nil && ErrKind(err) != kindNotLive:
			return err
		case err == nil:
			if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
			if out, err = a.Write(f.Res, v+1, false); err != nil {
				if ErrKind(err) != kindNotLive {
					return err
				}
				out = kindNotLive
			}
		}
		if out != kindNotLive {
			r.Injected()
		}
		if !r.waitEnded(a, time.Minute) {
			return fmt.Errorf("A's lock context never ended")
		}
		relErr := a.Release()
		r.Notef("round %d: gateway crashed while A held token %d; B granted token %d by the new gateway; A's checked write after it: %s; A's release: %s",
			round, ta, bres.Token, out, errKindOrOK(relErr))
		if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		if err := b.Release(); err != nil {
			return err
		}
	}
	return nil
}

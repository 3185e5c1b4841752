package torture

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/gatewaylock"
)

// backendGateway is the kind of a Target reached through a gateway: the
// workers open distlock+http:// URLs, and a gateway process holds their
// locks on a file backend (a lock directory).
const backendGateway = "gateway"

// GatewayEnv, set to "ADDR DIR" in the environment of this test binary,
// makes RunWorkerIfRequested serve a gateway on ADDR over the file backend
// in DIR instead of returning, as `distlock serve` does. The process prints
// the address it listens on as its first line, and ends its sessions
// (releasing their locks) on SIGTERM.
const GatewayEnv = "DISTLOCK_TORTURE_GATEWAY"

// runGatewayIfRequested serves a gateway and exits if GatewayEnv is set.
func runGatewayIfRequested() {
	v := os.Getenv(GatewayEnv)
	if v == "" {
		return
	}
	if err := runGateway(v); err != nil {
		fmt.Fprintln(os.Stderr, "torture gateway:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runGateway(v string) error {
	addr, dir, ok := strings.Cut(v, " ")
	if !ok {
		return fmt.Errorf("%s=%q: want \"ADDR DIR\"", GatewayEnv, v)
	}
	b, err := filelock.New(dir)
	if err != nil {
		return err
	}
	g, err := gateway.New(b)
	if err != nil {
		return err
	}
	var ln net.Listener
	// The port of the killed previous gateway may linger a moment.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return g.Serve(ctx, ln)
}

// Gateway is a gateway process (this test binary with GatewayEnv set) over
// a file backend, on a loopback port that stays the same across restarts.
type Gateway struct {
	Addr string // host:port
	Dir  string // the file backend's lock directory

	log    string // the processes' stderr
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartGateway starts a gateway process over a file backend in a new
// temporary directory, and stops it when t ends.
func StartGateway(t testing.TB) *Gateway {
	t.Helper()
	gw := &Gateway{Dir: t.TempDir(), Addr: "127.0.0.1:0"}
	gw.log = filepath.Join(t.TempDir(), "gateway.log")
	if err := gw.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gw.stop(); err != nil {
			t.Error(err)
		}
	})
	return gw
}

// GatewayTarget is a Target of kind gateway served by gw.
func GatewayTarget(gw *Gateway) Target { return Target{Kind: backendGateway, Gateway: gw} }

// start starts the gateway process on gw.Addr and sets gw.Addr to the
// address it listens on.
func (gw *Gateway) start() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("torture: %w", err)
	}
	logf, err := os.OpenFile(gw.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("torture: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), GatewayEnv+"="+gw.Addr+" "+gw.Dir,
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("torture: %w", err)
	}
	cmd.SysProcAttr = workerAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("torture: start gateway: %w", err)
	}
	exited := make(chan struct{})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(line)
		_ = cmd.Wait() // after the read: Wait closes the pipe
		close(exited)
	}()
	gw.cmd, gw.exited = cmd, exited
	select {
	case addr := <-lines:
		if addr == "" {
			<-exited
			return fmt.Errorf("torture: the gateway did not start: %s", gw.logTail())
		}
		gw.Addr = addr
		return nil
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("torture: the gateway did not listen within a minute: %s", gw.logTail())
	}
}

// stop ends the gateway with SIGTERM (it releases its locks), or SIGKILL
// if it has not exited within 30s.
func (gw *Gateway) stop() error {
	_ = gw.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-gw.exited:
	case <-time.After(30 * time.Second):
		_ = gw.cmd.Process.Kill()
		<-gw.exited
		return fmt.Errorf("torture: the gateway did not stop on SIGTERM: %s", gw.logTail())
	}
	if !gw.cmd.ProcessState.Success() {
		return fmt.Errorf("torture: the gateway exited with %v: %s", gw.cmd.ProcessState, gw.logTail())
	}
	return nil
}

// Kill kills the gateway with SIGKILL: the kernel cuts its connections
// and frees its flocks; nothing is released through the API.
func (gw *Gateway) Kill() {
	_ = gw.cmd.Process.Kill()
	<-gw.exited
}

// Restart starts a new gateway (a new epoch: the old sessions are unknown
// to it) on the same port and lock directory.
func (gw *Gateway) Restart() error { return gw.start() }

// logTail returns the end of the gateway processes' stderr.
func (gw *Gateway) logTail() string {
	b, _ := os.ReadFile(gw.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// openGateway opens a worker's gatewaylock Backend.
func openGateway(ctx context.Context, r request) (driver.Backend, io.Closer, error) {
	b, err := gatewaylock.OpenURL(ctx, r.URL)
	if err != nil {
		return nil, nil, err
	}
	return b, b, nil
}

// gatewayURL is the distlock+http:// URL of the gateway at addr.
func gatewayURL(addr string) string { return "distlock+http://" + addr }

// The gateway rows: client → gatewaylock → HTTP → gateway → file backend.
// The worker's gateway session (one per worker, holding its grant) is
// the lease: a stopped or cut-off client stops keeping it alive, and the
// gateway ends it and releases the lock, where the file backend alone
// would keep the lock for as long as the holder lives.
func init() {
	addRow("pause", backendGateway, ExpectBite, "the stopped client's session is not kept alive: the gateway ends it after its TTL and releases the flock, and the waiter is granted", nil)
	addRow("delay", backendGateway, ExpectBite, "", nil)
	addRow("partition", backendGateway, ExpectBite, "the proxy is between the client and the gateway; the gateway ends the cut-off session after its TTL", nil)
	addRow("holder-kill", backendGateway, ExpectHold, "the killed client's session ends after its TTL (nothing keeps it alive), which releases the flock", nil)
	notRow("server-kill/no-fsync", backendGateway, "see gateway-kill")
	notRow("server-kill/fsync", backendGateway, "see gateway-kill")
	notRow("leader-kill", backendGateway, "one gateway over a file backend: see gateway-kill")
	notRow("failover/missed-1", backendGateway, "one gateway over a file backend: no replica")
	notRow("failover/missed-2", backendGateway, "one gateway over a file backend: no replica")
	notRow("late-release/naive", backendGateway, "no naive gateway release built: the gateway's release is fenced by session and token")
	notRow("late-release/owner-checked", backendGateway, "not run through the gateway yet")
	notRow("lost-reply/naive", backendGateway, "no naive gateway lock built")
	notRow("lost-reply/distlock", backendGateway, "not run here: an acquire is idempotent per session and name in the gateway, and gatewaylock's own tests retry it")
	notRow("lost-reply/distlock-no-retry", backendGateway, "not run here: see lost-reply/distlock")
	Scenarios = append(Scenarios, Scenario{
		Name:   "gateway-kill",
		Title:  "the gateway process killed with SIGKILL while a lock is held through it (its connections cut, its flocks freed by the kernel at once, no release sent) and a new gateway starts on the same port and lock directory; the waiter is granted by the new gateway and writes; the holder, whose next renewal is still ahead, checks its lock and writes with its old token",
		Expect: map[string]Expect{backendGateway: ExpectHold},
		Why: map[string]string{
			backendGateway: "the holder's long-poll keepalive is cut when the gateway dies; the holder's Backend asks again at once on a new connection, is refused (or told by the new gateway that the session is unknown), and reports the loss through OnLost before the new gateway is up to grant the waiter: the holder's check fails and it does not write",
			backendRedis:   "no gateway", backendEtcd: "no gateway", backendFile: "no gateway",
			backendZK: "no gateway", backendPG: "no gateway",
		},
		Run: gatewayKillScenario,
	})
	findings["gateway-kill"] = "Over the file backend a dead gateway's locks are free at once, so the holder must learn of the loss before the new gateway can grant: gatewaylock holds a long-poll keepalive open, the kill cuts it, and the keepalive sent at once on a new connection is refused (or answered 404 by the new gateway), which ends the session and reports every lock in it lost, well before the next renewal. In every round the holder's checked write came after its lock had ended (not-live). What this relies on is that the kill cuts the connection: a holder cut off from the gateway by a partition at the same moment sees nothing until its keepalive times out, and over a backend that frees locks at once only the token then keeps it out. The file backend keeps its token counter in the lock file (with the wall clock in microseconds as a floor), so the new gateway's grants continue above the old ones (no token regression)."
}

// Timing of the gateway-kill row: a renewal every gatewayKillTTL/2, far
// longer than a restart, so that a holder that learned of the loss only
// from a renewal would still pass its check when the waiter is granted.
const gatewayKillTTL = 4 * time.Second

// gatewayKillScenario kills and restarts the gateway while A holds the
// lock; B acquires through the new gateway and writes; then A, checking its
// lock before its read and its write, increments the resource with its old
// token. Afterwards A must see the loss (its lock's context ends) within a
// renewal interval, and B's token must be above A's.
func gatewayKillScenario(f *Fixture) error {
	r := f.Run
	gw := f.Target.Gateway
	cfg := WorkerConfig{TTL: gatewayKillTTL, RenewEvery: gatewayKillTTL / 2}
	ws := f.Workers(map[string]WorkerConfig{"A": cfg, "B": cfg})
	a, b := ws["A"], ws["B"]
	for round := range f.rounds() {
		ta, err := f.warmThenHold(a, b)
		if err != nil {
			return err
		}
		// Detection counts from the kill: the holder may learn of the loss
		// before the new gateway is up.
		r.MarkFault(a)
		gw.Kill()
		r.Fault("", "gateway kill -9")
		if err := gw.Restart(); err != nil {
			return err
		}
		bres, ok, err := waitGrant(b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: time.Minute}), time.Minute)
		if !ok {
			return fmt.Errorf("B not granted by the new gateway: %v", err)
		}
		// The fault took effect: the lock A held is granted to B by the
		// new gateway; what A does next is the guard under test.
		r.Injected()
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
		if !r.waitEnded(a, time.Minute) {
			return fmt.Errorf("A's lock context never ended")
		}
		relErr := a.Release()
		r.Notef("round %d: gateway killed while A held token %d; B granted token %d by the new gateway; A's checked write after it: %s; A's release: %s",
			round, ta, bres.Token, out, errKindOrOK(relErr))
		if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		if err := f.release(b); err != nil {
			return err
		}
	}
	return nil
}

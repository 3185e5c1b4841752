package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/faultproxy"
)

// Run is one execution of a scenario: a Store in one Mode, worker
// processes, fault proxies, and the History they produce. Create it with
// NewRun; it is closed when the test ends (or by Close). Its methods are
// safe for concurrent use.
type Run struct {
	t     testing.TB
	Clock *Clock
	Hist  *History
	Store *Store

	ctx    context.Context // ends at Close: bounds every call to a worker
	cancel context.CancelFunc
	dir    string
	exe    string

	mu       sync.Mutex
	workers  []*Worker
	grants   []*grantRec
	failed   []failedAcq // acquires answered with an error
	proxies  []*faultproxy.Proxy
	samples  []time.Duration // loss-detection latencies
	notes    []string
	closed   bool
	endAt    int64
	injected int // rounds in which the fault took effect as designed
	// lockModelsOmit, when set before the workers start, is a key prefix
	// whose grants Check leaves out of the mutex and token models (see
	// RunNemesis); its overlap and token counts still cover them.
	lockModelsOmit string
}

// failedAcq is an acquire, or campaign, of key by worker that failed or
// was cancelled.
type failedAcq struct{ worker, key string }

// grantRec is the harness's view of one grant.
type grantRec struct {
	id        int
	worker    string
	key       string
	token     uint64
	acqCall   int64
	acqReturn int64
	live      int64 // the latest time the grant was proven live
	endAt     int64 // when its end was reported; 0 while live
	cause     string
	lost      bool
	shared    bool // a read lock: it may overlap other read locks
}

// String describes the grant for a note, times in ms of the run's clock.
func (g *grantRec) String() string {
	ms := func(t int64) string { return fmt.Sprintf("%.1f", float64(t)/1e6) }
	end := "none"
	if g.endAt > 0 {
		end = ms(g.endAt) + " (" + g.cause + ")"
	}
	kind := "grant"
	if g.shared {
		kind = "read grant"
	}
	return fmt.Sprintf("%s %d (%s, token %d: acquire %s-%s, proven live at %s, end %s)",
		kind, g.id, g.worker, g.token, ms(g.acqCall), ms(g.acqReturn), ms(g.live), end)
}

// NewRun starts a Store in mode and returns a Run that records into a new
// History. The test binary must call RunWorkerIfRequested in TestMain.
func NewRun(t testing.TB, mode Mode) *Run {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("torture: %v", err)
	}
	clock, hist := NewClock(), &History{}
	store, err := StartStore(mode, clock, hist)
	if err != nil {
		t.Fatal(err)
	}
	r := &Run{t: t, Clock: clock, Hist: hist, Store: store, dir: t.TempDir(), exe: exe}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	t.Cleanup(r.Close)
	return r
}

// Context returns a context that ends when the Run is closed.
func (r *Run) Context() context.Context { return r.ctx }

// Proxy starts a fault proxy to target, closed with the Run (after its
// workers exit).
func (r *Run) Proxy(target string) *faultproxy.Proxy {
	r.t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		r.t.Fatalf("torture: proxy: %v", err)
	}
	r.mu.Lock()
	r.proxies = append(r.proxies, p)
	r.mu.Unlock()
	return p
}

// Fault records a fault or a harness action at the current time, for the
// timeline. worker may be "" for faults of a server.
func (r *Run) Fault(worker, note string) int64 {
	now := r.Clock.Now()
	if worker == "" {
		worker = "harness"
	}
	r.Hist.Add(Op{Worker: worker, Kind: KindFault, Call: now, Return: now, Outcome: OutcomeOK, Note: note})
	return now
}

// MarkFault starts a loss-detection measurement on each worker: the next
// loss of its lock is measured from now.
func (r *Run) MarkFault(ws ...*Worker) {
	now := r.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range ws {
		w.faultAt = now
	}
}

// Notef adds a line to the Run's notes (shown in the report).
func (r *Run) Notef(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// Close asks every worker to exit (releasing what it holds), kills those
// that do not, closes the proxies and the Store, and ends the History.
// It is idempotent.
func (r *Run) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	workers := slices.Clone(r.workers)
	proxies := slices.Clone(r.proxies)
	r.mu.Unlock()
	for _, p := range proxies {
		p.Heal()
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(w.exit)
	}
	wg.Wait()
	r.cancel()
	for _, w := range workers {
		w.wait()
	}
	for _, p := range proxies {
		p.Close()
	}
	r.Store.Close()
	r.mu.Lock()
	r.endAt = r.Clock.Now()
	r.mu.Unlock()
}

// Worker is the harness's handle on a worker process. Its methods send one
// command and wait for the answer. They are safe for concurrent use, but
// the process executes one command at a time: concurrent calls queue.
type Worker struct {
	Name string
	Pid  int
	run  *Run
	log  string

	cmd    *exec.Cmd
	exited chan struct{}
	conn   net.Conn
	encM   sync.Mutex
	enc    *json.Encoder
	dead   chan struct{} // the control connection ended
	readWG sync.WaitGroup

	nextID   atomic.Int64
	mu       sync.Mutex
	waiting  map[int64]*call
	announce chan int64 // receipt times of announce events

	// Guarded by run.mu.
	grants  map[int]*grantRec // by the worker's own grant number
	ends    map[int]reply     // end events that came before their grant's reply
	endTime map[int]int64
	current *grantRec
	parts   map[string]*grantRec // the held lock set's grants, by key
	faultAt int64
	paused  bool
	leaders []observed // what Observe sent, for an observer
	// memberAt is when the worker was made a member (Member); memberErr
	// what its partition.Run returned, if it ended.
	memberAt  int64
	memberErr string
}

// observed is one leader an observer's Observe sent.
type observed struct {
	token  uint64 // 0: no leader
	value  string
	closed bool // Observe's channel closed
}

type call struct {
	req  request
	at   int64
	done chan stamped
}

type stamped struct {
	rep reply
	at  int64
}

var errWorkerGone = errors.New("torture: worker process is gone")

// Spawn starts a worker process named name (a re-execution of this binary)
// and waits for it to connect.
func (r *Run) Spawn(name string) *Worker {
	r.t.Helper()
	w, err := r.spawn(name)
	if err != nil {
		r.t.Fatal(err)
	}
	return w
}

// spawn is Spawn without the test: it may run in any goroutine.
func (r *Run) spawn(name string) (*Worker, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("torture: %w", err)
	}
	defer ln.Close()
	w := &Worker{Name: name, run: r, exited: make(chan struct{}), dead: make(chan struct{}),
		waiting: map[int64]*call{}, announce: make(chan int64, 1),
		grants: map[int]*grantRec{}, ends: map[int]reply{}, endTime: map[int]int64{}, faultAt: -1}
	w.log = filepath.Join(r.dir, "worker-"+name+".log")
	logf, err := os.Create(w.log)
	if err != nil {
		return nil, fmt.Errorf("torture: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	w.cmd = exec.Command(r.exe)
	w.cmd.Env = append(os.Environ(), WorkerEnv+"="+ln.Addr().String(), WorkerEnv+"_NAME="+name,
		// A race-enabled worker would sleep a second at exit.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	w.cmd.SysProcAttr = workerAttr()
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("torture: start worker %s: %w", name, err)
	}
	w.Pid = w.cmd.Process.Pid
	go func() {
		_ = w.cmd.Wait()
		close(w.exited)
	}()
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()

	// Accept the worker's connection, unless it dies first.
	stop := make(chan struct{})
	go func() {
		select {
		case <-w.exited:
			ln.Close()
		case <-stop:
		}
	}()
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(time.Minute))
	conn, dec, err := acceptHello(ln, w.Pid)
	close(stop)
	if err != nil {
		_ = w.cmd.Process.Kill()
		return nil, fmt.Errorf("torture: worker %s did not connect: %w\n%s", name, err, w.LogTail())
	}
	w.conn, w.enc = conn, json.NewEncoder(conn)
	w.readWG.Add(1)
	go w.read(dec)
	return w, nil
}

// acceptHello accepts connections on ln until one says hello from pid. The
// port is an ephemeral one on a machine where other tests run, and one of
// them may dial it (a test that expects a just-closed port to refuse, say):
// such a stranger is dropped, not taken for the worker.
func acceptHello(ln net.Listener, pid int) (net.Conn, *json.Decoder, error) {
	var strangers []string
	for {
		conn, err := ln.Accept()
		if err != nil {
			if len(strangers) > 0 {
				err = fmt.Errorf("%w (dropped: %s)", err, strings.Join(strangers, "; "))
			}
			return nil, nil, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		dec := json.NewDecoder(bufio.NewReader(conn))
		var hello reply
		err = dec.Decode(&hello)
		if err == nil && hello.Event == evHello && hello.Pid == pid {
			_ = conn.SetReadDeadline(time.Time{})
			return conn, dec, nil
		}
		strangers = append(strangers, fmt.Sprintf("%s: hello %+v, %v", conn.RemoteAddr(), hello, err))
		conn.Close()
	}
}

// LogTail returns the end of the worker's output.
func (w *Worker) LogTail() string {
	b, _ := os.ReadFile(w.log)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// read is the worker's reader goroutine: it stamps every message on
// arrival and does the bookkeeping before handing replies to callers.
func (w *Worker) read(dec *json.Decoder) {
	defer w.readWG.Done()
	defer close(w.dead)
	for {
		var rep reply
		if err := dec.Decode(&rep); err != nil {
			return
		}
		at := w.run.Clock.Now()
		switch rep.Event {
		case evAnnounce:
			select {
			case w.announce <- at:
			default:
			}
			continue
		case evEnd:
			w.run.ended(w, rep, at)
			continue
		case evUnit:
			w.run.unitGranted(w, rep, at)
			continue
		case evUnitWrite:
			w.run.unitWrote(w, rep)
			continue
		case evLeader:
			w.run.mu.Lock()
			w.leaders = append(w.leaders, observed{token: rep.Token, value: rep.Leader, closed: rep.Closed})
			w.run.mu.Unlock()
			continue
		}
		w.mu.Lock()
		c := w.waiting[rep.ID]
		delete(w.waiting, rep.ID)
		w.mu.Unlock()
		if c == nil {
			continue
		}
		w.run.answered(w, c, rep, at)
		c.done <- stamped{rep, at}
	}
}

// answered records what a reply tells: a grant, proof of liveness, an
// acknowledged write, a release.
func (r *Run) answered(w *Worker, c *call, rep reply, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch c.req.Cmd {
	case cmdAcquire:
		if rep.Err != "" {
			r.failed = append(r.failed, failedAcq{w.Name, c.req.Key})
			return
		}
		key := c.req.Key
		if c.req.Limit > 1 {
			// A slotted permit is a grant of its slot: one holder at a
			// time, its tokens increasing (semaphore.WithSlots).
			key = SlotKey(key, rep.Slot)
		}
		g := &grantRec{id: len(r.grants) + 1, worker: w.Name, key: key, token: rep.Token, acqCall: c.at, acqReturn: at, live: c.at, shared: c.req.Shared}
		r.grants = append(r.grants, g)
		w.grants[rep.Grant] = g
		w.current = g
		r.Hist.Add(Op{Worker: w.Name, Kind: KindAcquire, Key: g.key, Grant: g.id, Token: g.token, Call: c.at, Return: at, Outcome: OutcomeOK, Shared: g.shared})
		if e, ok := w.ends[rep.Grant]; ok {
			delete(w.ends, rep.Grant)
			r.endLocked(w, g, e, w.endTime[rep.Grant])
		}
	case cmdAcquireAll:
		if rep.Err != "" {
			for _, k := range c.req.Keys {
				r.failed = append(r.failed, failedAcq{w.Name, k})
			}
			return
		}
		w.parts = map[string]*grantRec{}
		for _, p := range rep.Parts {
			g := &grantRec{id: len(r.grants) + 1, worker: w.Name, key: p.Key, token: p.Token, acqCall: c.at, acqReturn: at, live: c.at}
			r.grants = append(r.grants, g)
			w.grants[p.Grant] = g
			w.parts[p.Key] = g
			r.Hist.Add(Op{Worker: w.Name, Kind: KindAcquire, Key: g.key, Grant: g.id, Token: g.token, Call: c.at, Return: at, Outcome: OutcomeOK,
				Note: fmt.Sprintf("%s of %d", setPartNote, len(rep.Parts))})
			if e, ok := w.ends[p.Grant]; ok {
				delete(w.ends, p.Grant)
				r.endLocked(w, g, e, w.endTime[p.Grant])
			}
		}
	case cmdRead, cmdWrite, cmdRMW, cmdSharedRead:
		seq := rep.ReadSeq
		if rep.WriteSeq >= 0 {
			seq = rep.WriteSeq
			if rep.Outcome == writeOK {
				r.Hist.Update(rep.WriteSeq, func(o *Op) { o.Acked = true })
			}
		}
		if c.req.NoCheck || c.req.Announce {
			r.Hist.Update(rep.WriteSeq, func(o *Op) { o.Naive = true })
		}
		if rep.LiveAfter && seq >= 0 {
			// A set is live only while every part is (LockSet.Err): a
			// part's write proves them all.
			live := r.Hist.Get(seq).Return
			if w.current != nil {
				w.current.live = max(w.current.live, live)
			}
			for _, g := range w.parts {
				g.live = max(g.live, live)
			}
		}
	case cmdRelease:
		if w.parts != nil {
			// A set's release: one per part, in key order.
			for _, p := range rep.Parts {
				g := w.parts[p.Key]
				if g == nil {
					continue
				}
				op := Op{Worker: w.Name, Kind: KindRelease, Key: g.key, Grant: g.id, Token: g.token, Call: c.at, Return: at, Outcome: OutcomeOK,
					Note: "release of its lock set"}
				switch {
				case p.Lost:
					op.Outcome = OutcomeLost
				case p.ErrKind != "":
					op.Outcome, op.Note = OutcomeError, p.Err
				}
				r.Hist.Add(op)
			}
			w.parts = nil
			return
		}
		op := Op{Worker: w.Name, Kind: KindRelease, Call: c.at, Return: at, Outcome: OutcomeOK}
		if g := w.current; g != nil {
			op.Key, op.Grant, op.Token = g.key, g.id, g.token
		}
		switch rep.ErrKind {
		case "":
		case kindLost:
			op.Outcome = OutcomeLost
		default:
			op.Outcome, op.Note = OutcomeError, rep.Err
		}
		r.Hist.Add(op)
		w.current = nil
	case cmdNaiveRelease:
		r.Hist.Add(Op{Worker: w.Name, Kind: KindFault, Key: c.req.Key, Call: c.at, Return: at, Outcome: OutcomeOK, Naive: true,
			Note: "naive release: unconditional delete of the lock"})
	}
}

// ended records the end of a grant's context.
func (r *Run) ended(w *Worker, e reply, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := w.grants[e.Grant]
	if g == nil {
		w.ends[e.Grant], w.endTime[e.Grant] = e, at
		return
	}
	r.endLocked(w, g, e, at)
}

func (r *Run) endLocked(w *Worker, g *grantRec, e reply, at int64) {
	g.endAt, g.cause, g.lost = at, e.Cause, e.Lost
	if e.Lost && w.faultAt >= 0 && at >= w.faultAt {
		r.samples = append(r.samples, time.Duration(at-w.faultAt))
		w.faultAt = -1
	}
}

// do sends req and waits for the answer. Errors reported by the worker are
// returned in the reply, not as err.
func (w *Worker) do(req request) (reply, error) {
	req.ID = w.nextID.Add(1)
	c := &call{req: req, done: make(chan stamped, 1)}
	w.mu.Lock()
	w.waiting[req.ID] = c
	w.mu.Unlock()
	c.at = w.run.Clock.Now()
	w.encM.Lock()
	err := w.enc.Encode(req)
	w.encM.Unlock()
	if err != nil {
		return reply{}, fmt.Errorf("%w: %v", errWorkerGone, err)
	}
	select {
	case s := <-c.done:
		return s.rep, nil
	case <-w.dead:
		return reply{}, fmt.Errorf("%w (%s)\n%s", errWorkerGone, w.Name, w.LogTail())
	case <-w.run.ctx.Done():
		return reply{}, w.run.ctx.Err()
	}
}

// WorkerError is an error a worker reported for a command.
type WorkerError struct {
	Worker string
	Cmd    string
	Kind   string // not-acquired, lost, unavailable, not-held, not-live, timeout, error
	Msg    string
}

// Error implements error.
func (e *WorkerError) Error() string {
	return fmt.Sprintf("worker %s: %s: %s", e.Worker, e.Cmd, e.Msg)
}

// ErrKind returns the kind of a *WorkerError in err's chain, or "".
func ErrKind(err error) string {
	var we *WorkerError
	if errors.As(err, &we) {
		return we.Kind
	}
	return ""
}

func (w *Worker) must(req request) (reply, error) {
	rep, err := w.do(req)
	if err != nil {
		return rep, err
	}
	if rep.Err != "" {
		return rep, &WorkerError{Worker: w.Name, Cmd: req.Cmd, Kind: rep.ErrKind, Msg: rep.Err}
	}
	return rep, nil
}

// OpenOptions configure a worker's backend and Client.
type OpenOptions struct {
	Backend    string        // "redis", "etcd", "file", "zookeeper", "postgres" or "gateway"
	URL        string        // opened with the backend package's OpenURL
	TTL        time.Duration // distlock.WithTTL
	Drift      float64       // distlock.WithDrift
	Margin     time.Duration // distlock.WithSafetyMargin
	RenewEvery time.Duration // distlock.WithRenewal; 0 for the default
	// Election makes the worker a candidate: Acquire campaigns in the
	// election named by the key (election.Campaign, the worker's name as
	// its value), Release resigns the term.
	Election bool
	// Permit makes the worker's grants permits: Acquire takes the permit
	// of the semaphore of limit 1 named by the key, Release gives it back.
	Permit bool
	// RW makes the worker's grants locks of the read/write lock named by
	// the key (package rwlock): its write lock, or a read lock when the
	// acquisition asks Shared.
	RW bool
}

// Open opens the worker's backend, its Client and its store connection
// (through storeAddr, which may be a proxy).
func (w *Worker) Open(o OpenOptions, storeAddr string) error {
	_, err := w.must(request{Cmd: cmdOpen, Backend: o.Backend, URL: o.URL, StoreAddr: storeAddr,
		TTL: o.TTL, Drift: o.Drift, Margin: o.Margin, RenewEvery: o.RenewEvery, Election: o.Election, Permit: o.Permit, RW: o.RW, Timeout: time.Minute})
	return err
}

// Acq are the options of one acquisition.
type Acq struct {
	Wait    bool          // block until granted (true) or try once
	NoRetry bool          // do not retry transient failures (distlock.NoRetry)
	Timeout time.Duration // bounds the acquisition; 0: a minute
	// Shared asks a read lock of a read/write worker (OpenOptions.RW).
	Shared bool
	// Limit asks a permit worker (OpenOptions.Permit) for a permit of a
	// semaphore of this limit with slots, when above 1; the grant is
	// recorded as one of its slot's key (SlotKey).
	Limit int
}

// Acquire acquires key; the worker then holds it.
func (w *Worker) Acquire(key string, a Acq) (uint64, error) {
	rep, err := w.acquire(key, a)
	return rep.Token, err
}

func (w *Worker) acquire(key string, a Acq) (reply, error) {
	if a.Timeout == 0 {
		a.Timeout = time.Minute
	}
	return w.must(request{Cmd: cmdAcquire, Key: key, Wait: a.Wait, NoRetry: a.NoRetry, Timeout: a.Timeout, Shared: a.Shared, Limit: a.Limit})
}

// setPartNote begins the note of a lock set's part's grant in a History.
const setPartNote = "part of a lock set"

// AcquireAll acquires keys as one lock set (Client.AcquireAll, waiting
// as a says, within its Timeout; a's other fields do not apply: the parts
// are plain locks, whatever the worker's OpenOptions); the worker then
// holds the set, each
// part a grant of its key, and the store requests that name a part's key
// (RMWOptions.Key) take that part's token. It returns the parts' tokens
// by key.
func (w *Worker) AcquireAll(keys []string, a Acq) (map[string]uint64, error) {
	if a.Timeout == 0 {
		a.Timeout = time.Minute
	}
	rep, err := w.must(request{Cmd: cmdAcquireAll, Keys: keys, Wait: a.Wait, Timeout: a.Timeout})
	if err != nil {
		return nil, err
	}
	tokens := map[string]uint64{}
	for _, p := range rep.Parts {
		tokens[p.Key] = p.Token
	}
	return tokens, nil
}

// AcquireResult is the outcome of AcquireAsync.
type AcquireResult struct {
	Token uint64
	Err   error
	At    int64 // when the answer came
	// Granted is when the acquire returned in the worker, on the
	// machine's wall clock: the grant is no later.
	Granted time.Time
}

// AcquireAsync starts Acquire and returns a channel that receives its
// outcome (it is buffered: nobody has to read it).
func (w *Worker) AcquireAsync(key string, a Acq) <-chan AcquireResult {
	ch := make(chan AcquireResult, 1)
	go func() {
		rep, err := w.acquire(key, a)
		ch <- AcquireResult{Token: rep.Token, Err: err, At: w.run.Clock.Now(), Granted: time.Unix(0, rep.Granted)}
	}()
	return ch
}

// Read reads resource with the lock's token. With noCheck the worker does
// not check first that its lock is live.
func (w *Worker) Read(resource string, noCheck bool) (int64, error) {
	rep, err := w.must(request{Cmd: cmdRead, Resource: resource, NoCheck: noCheck})
	return rep.Value, err
}

// Write writes value to resource with the lock's token and returns the
// outcome: "ok", "stale" (refused by the fence), "timeout", "error", or
// "skipped" (the lock was not live; nothing sent).
func (w *Worker) Write(resource string, value int64, noCheck bool) (string, error) {
	rep, err := w.must(request{Cmd: cmdWrite, Resource: resource, Value: value, NoCheck: noCheck})
	return rep.Outcome, err
}

// RMWOptions configure a read-modify-write.
type RMWOptions struct {
	// NoCheck skips the liveness checks (a holder that ignores its lock).
	NoCheck bool
	// Announce makes the worker report after its read and wait for Go;
	// the write then goes out without a second check.
	Announce bool
	// StoreTimeout bounds each store request (default 10s); a write that
	// times out is reported as "timeout" and may still land later.
	StoreTimeout time.Duration
	// Key, with a lock set held (AcquireAll), names the part whose token
	// the write carries; the set must be live (every part held) for a
	// checked write.
	Key string
}

// RMWResult is the outcome of an RMW.
type RMWResult struct {
	Read    int64
	Outcome string // of the write, as for Write
	Err     error
	// With Announce: the lock's (or term's) local deadline as it stood
	// when the worker was stopped (on the machine's wall clock; zero if it
	// had none), and whether its context had been cancelled when the
	// unchecked write went out (DoneBefore).
	Deadline   time.Time
	DoneBefore bool
}

// RMW reads resource and writes the value read plus one, as one command.
func (w *Worker) RMW(resource string, o RMWOptions) RMWResult {
	rep, err := w.must(request{Cmd: cmdRMW, Resource: resource, Key: o.Key, NoCheck: o.NoCheck, Announce: o.Announce, StoreTimeout: o.StoreTimeout})
	res := RMWResult{Read: rep.Value, Outcome: rep.Outcome, Err: err, DoneBefore: rep.DoneBefore}
	if rep.Deadline != 0 {
		res.Deadline = time.Unix(0, rep.Deadline)
	}
	return res
}

// RMWAsync starts RMW and returns a channel that receives its outcome.
func (w *Worker) RMWAsync(resource string, o RMWOptions) <-chan RMWResult {
	ch := make(chan RMWResult, 1)
	go func() { ch <- w.RMW(resource, o) }()
	return ch
}

// Announced waits for the announce of an RMW with Announce and returns
// when it arrived.
func (w *Worker) Announced(timeout time.Duration) (int64, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case at := <-w.announce:
		return at, nil
	case <-w.dead:
		return 0, errWorkerGone
	case <-t.C:
		return 0, fmt.Errorf("torture: worker %s did not announce within %v", w.Name, timeout)
	}
}

// SharedReadResult is the outcome of SharedRead.
type SharedReadResult struct {
	Value int64
	Seq   int // the read's sequence number in the History
	Err   error
	// Deadline is the lock's local deadline as it stood when the worker
	// was stopped (with Announce; see RMWResult.Deadline).
	Deadline time.Time
	// Highest and Discarded (with Validate): the highest token the store
	// had admitted after the read, and whether the reader discarded the
	// read for it.
	Highest   uint64
	Discarded bool
}

// SharedRead has a reader check its lock, then (with announce) report and
// wait for Go, then read resource with no second check; with validate it
// then asks the store for the resource's highest admitted token and
// discards the read if that is above its lock's token.
func (w *Worker) SharedRead(resource string, announce, validate bool) SharedReadResult {
	rep, err := w.must(request{Cmd: cmdSharedRead, Resource: resource, Announce: announce, Validate: validate})
	res := SharedReadResult{Value: rep.Value, Seq: rep.ReadSeq, Err: err, Highest: rep.Highest, Discarded: rep.Discarded}
	if rep.Deadline != 0 {
		res.Deadline = time.Unix(0, rep.Deadline)
	}
	return res
}

// SharedReadAsync starts SharedRead and returns a channel that receives
// its outcome.
func (w *Worker) SharedReadAsync(resource string, announce, validate bool) <-chan SharedReadResult {
	ch := make(chan SharedReadResult, 1)
	go func() { ch <- w.SharedRead(resource, announce, validate) }()
	return ch
}

// Go lets a worker continue after its announce.
func (w *Worker) Go() error {
	w.encM.Lock()
	defer w.encM.Unlock()
	return w.enc.Encode(request{Cmd: cmdGo})
}

// Observe has the worker follow the election named key with
// election.Observe until it exits, sending each leader to the harness.
func (w *Worker) Observe(key string) error {
	_, err := w.must(request{Cmd: cmdObserve, Key: key})
	return err
}

// Release releases the worker's lock. An error matching kind "lost" means
// the grant had lapsed (the owner check refused the release).
func (w *Worker) Release() error {
	_, err := w.must(request{Cmd: cmdRelease, Timeout: time.Minute})
	return err
}

// NaiveRelease deletes key's lock whoever holds it, as the guide's release
// without an owner check does.
func (w *Worker) NaiveRelease(key string) error {
	_, err := w.must(request{Cmd: cmdNaiveRelease, Key: key, Timeout: 30 * time.Second})
	return err
}

// NaiveAcquire tries Redis SET NX PX once, as the guide's first lock does,
// with nothing done if the reply is lost.
func (w *Worker) NaiveAcquire(key string, ttl time.Duration) error {
	_, err := w.must(request{Cmd: cmdNaiveAcquire, Key: key, TTL: ttl, Timeout: 30 * time.Second})
	return err
}

// Pause stops the worker process with SIGSTOP and waits until it is
// stopped.
func (w *Worker) Pause() error {
	if err := stopProcess(w.Pid); err != nil {
		return err
	}
	w.run.mu.Lock()
	w.paused = true
	w.run.mu.Unlock()
	w.run.Fault(w.Name, "SIGSTOP")
	return nil
}

// Resume continues a paused worker with SIGCONT.
func (w *Worker) Resume() error {
	w.run.mu.Lock()
	w.paused = false
	w.run.mu.Unlock()
	w.run.Fault(w.Name, "SIGCONT")
	return continueProcess(w.Pid)
}

// Kill kills the worker process with SIGKILL and waits for it to exit.
func (w *Worker) Kill() {
	_ = w.cmd.Process.Kill()
	<-w.exited
}

// holdingLive returns the token of w's current grant and whether its end
// has not been reported.
func (w *Worker) holdingLive() (uint64, bool) {
	w.run.mu.Lock()
	defer w.run.mu.Unlock()
	if w.current == nil {
		return 0, false
	}
	return w.current.token, w.current.endAt == 0
}

// Holding returns the token of the grant the harness believes the worker
// holds, 0 if none.
func (w *Worker) Holding() uint64 {
	w.run.mu.Lock()
	defer w.run.mu.Unlock()
	if w.current == nil {
		return 0
	}
	return w.current.token
}

// exit asks the worker to exit, and kills it if it does not within 15s.
func (w *Worker) exit() {
	w.run.mu.Lock()
	paused := w.paused
	w.run.mu.Unlock()
	if paused {
		_ = continueProcess(w.Pid)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = w.do(request{Cmd: cmdExit})
	}()
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case <-w.exited:
	case <-t.C:
	}
	_ = w.cmd.Process.Kill()
	<-w.exited
	w.conn.Close()
	<-done
}

func (w *Worker) wait() {
	<-w.exited
	w.readWG.Wait()
}

// logTail is used in failure messages.
func (w *Worker) String() string { return w.Name + " (pid " + fmt.Sprint(w.Pid) + ")" }

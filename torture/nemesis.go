package torture

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/distlock/distlock/faultproxy"
	pt "github.com/distlock/distlock/partition"
	"github.com/distlock/distlock/testserver"
)

// The nemesis mode: a random schedule of faults, overlapping in time,
// drawn from a seed, over a steady workload of lock cycles with fenced
// writes (see the package doc, "Nemesis").

// Nemesis fault kinds.
const (
	// NemesisHolderPause stops a worker process (SIGSTOP) for the fault's
	// span, then continues it (SIGCONT).
	NemesisHolderPause = "holder-pause"
	// NemesisLockCut blackholes a worker's links to the lock service.
	NemesisLockCut = "lock-cut"
	// NemesisLockDelay delays a worker's links to the lock service.
	NemesisLockDelay = "lock-delay"
	// NemesisLostReply loses the lock service's replies to a worker.
	NemesisLostReply = "lost-reply"
	// NemesisStoreDelay delays a worker's link to the store.
	NemesisStoreDelay = "store-delay"
	// NemesisServerPause stops a server (SIGSTOP) for the fault's span.
	NemesisServerPause = "server-pause"
	// NemesisServerKill kills a server (SIGKILL) and restarts it at the
	// end of the fault's span.
	NemesisServerKill = "server-kill"
	// NemesisServerClockJump moves a server's wall clock by the event's
	// Jump (forward, expiring leases early, or back) for the fault's
	// span, then moves it back: both moves are steps of the clock, and
	// the step forward (the jump of a forward fault, the return of a
	// backward one) shortens every lease the server times by its wall
	// clock. It applies where testserver's clock shim reaches the clock
	// the server expires leases by: Redis (NemesisTarget.Clocks) and
	// PostgreSQL in lease mode (now()); Redlock's nodes could take it,
	// but TestNemesis gives them no clocks (see the package doc). It does
	// not apply to etcd (a Go binary, which the preloaded shim does not
	// reach, and whose leases run on the leader's monotonic clock), to
	// ZooKeeper (sessions expire by the servers' monotonic clock), nor
	// to file (no server).
	NemesisServerClockJump = "server-clock-jump"
	// NemesisServerPeerCut cuts a server's links to and from the other
	// servers of its ensemble, through the proxies they reach each other
	// by (NemesisTarget.PeerCuts), for the fault's span, while the server
	// runs and its clients reach it. In a ZooKeeper ensemble that cuts
	// every quorum link of the server (a follower's connection to its
	// leader), so it stops serving, and the election links that go
	// through a proxy. Not all do: a server that receives an election
	// connection from a server of lower id drops it and connects back to
	// the address that server announces, its own, where no proxy sits;
	// such a link survives the cut, and the cut-off server may go on
	// voting. It is a partial partition: a cut-off server whose vote
	// ranks first (ZooKeeper ranks by epoch, last zxid, then id: often
	// the old leader's) can win each election it then cannot lead,
	// leaving the ensemble without a leader until the links heal. In an
	// etcd cluster each member advertises a proxy to its peers
	// (testserver.WithEtcdPeerAddress), which carries the links into it
	// from every other member; a cut blackholes the member's own proxy
	// and, in the others', the connections it dialed (told apart by the
	// process that holds their other end, testserver.DialedBy):
	// raft's streams and posts both ways, and the lease renewals a
	// follower forwards to its leader.
	NemesisServerPeerCut = "server-peer-cut"
	// NemesisServerLinkCut cuts the links between two servers of an
	// ensemble (the event's Target and Peer), both ways, for the fault's
	// span, while each keeps its links to the others and its clients
	// reach it: a bridge partition, where the third server of three
	// still hears both (NemesisTarget.LinkCuts). In an etcd cluster it
	// blackholes, in each one's proxy, the connections the other dialed;
	// in a ZooKeeper ensemble the proxies of the links between the two,
	// which misses the election links that pass no proxy (see
	// NemesisServerPeerCut). A link cut never overlaps a peer cut.
	NemesisServerLinkCut = "server-link-cut"
	// NemesisServerLeaderStall holds back what a follower's leader sends
	// it, on the follower's quorum link, while what the follower sends
	// flows (a one-way partition), for the fault's span: the follower is
	// the event's Target, or the next server when the Target leads as
	// the fault begins. ZooKeeper only (NemesisTarget.LeaderStalls), on
	// an ensemble whose syncLimit × tickTime, plus half a tick, is within
	// a quarter of the sessions' timeout: the deployment in which zklock
	// counts a confirmation through a follower valid in that case (see
	// its package documentation). A stall never overlaps a peer or link
	// cut.
	NemesisServerLeaderStall = "server-leader-stall"
)

// NemesisKinds are the fault kinds, in report order.
var NemesisKinds = []string{NemesisHolderPause, NemesisLockCut, NemesisLockDelay, NemesisLostReply,
	NemesisStoreDelay, NemesisServerPause, NemesisServerKill, NemesisServerClockJump, NemesisServerPeerCut, NemesisServerLinkCut,
	NemesisServerLeaderStall}

// NemesisEvent is one fault of a schedule: Kind on Target (a worker's
// index for the worker and link faults, a server's for the server faults)
// from At to At+For, both relative to the start of the schedule. Delay is
// the added latency of a delay fault, Jump the step of a server's wall
// clock (forward if positive) of a clock jump, undone at its end, Peer
// the other server of a link cut.
type NemesisEvent struct {
	At, For time.Duration
	Kind    string
	Target  int
	Delay   time.Duration
	Jump    time.Duration
	Peer    int
}

// String describes the event.
func (e NemesisEvent) String() string {
	s := fmt.Sprintf("%v+%v %s #%d", e.At.Round(time.Millisecond), e.For.Round(time.Millisecond), e.Kind, e.Target)
	if e.Delay > 0 {
		s += fmt.Sprintf(" (%v)", e.Delay.Round(time.Millisecond))
	}
	if e.Jump != 0 {
		s += fmt.Sprintf(" (clock %+v)", e.Jump.Round(time.Millisecond))
	}
	if e.Kind == NemesisServerLinkCut {
		s += fmt.Sprintf(" and #%d", e.Peer)
	}
	return s
}

// NemesisPlan is a fault schedule and what it was drawn from.
type NemesisPlan struct {
	Seed     uint64
	Duration time.Duration
	Events   []NemesisEvent // by start time
}

// NemesisShape is what a schedule is drawn for: the workers and servers
// there are, the fault kinds that apply, and the lock TTL the spans are
// scaled to.
type NemesisShape struct {
	Workers int
	Servers int
	Kinds   []string
	TTL     time.Duration
	// Extra are workers after Workers (the recipes' permit workers and
	// members, then the lock-set workers: targets Workers to
	// Workers+Extra-1), whose channels are
	// drawn after every other channel, the servers' included, so that a
	// seed draws the same faults for the other channels with or without
	// them.
	Extra int
}

// NewNemesisPlan draws a schedule of duration d from seed, a pure
// function of its arguments. Faults are drawn per channel (each worker's
// process, its lock links, its store link, and the servers' pauses and
// kills as one channel, one server at a time so that a quorum stays up): one
// after another within a channel, with random gaps and spans (up to 2.5
// TTLs, so that a lease may lapse; a holder's pause or cut-off always
// outlasts the TTL, up to 3 TTLs), independently across channels, so
// that faults of different channels overlap at random. The servers'
// clock jumps are a channel of their own (one server's clock moved at a
// time, by 1.2 to 3 TTLs, forward two times in three), drawn from a
// generator of their own: the other channels' faults are the same with
// and without them, so a seed replays the same schedule of the other
// kinds whether or not a target takes clock jumps. The cuts of a server
// from its peers are another such channel (nemesisPeerCuts), which may
// overlap a pause or kill of another server, and so are the cuts of a
// link between two servers (nemesisLinkCuts), each put off until no peer
// cut is on, and the stalls of a follower's link from its leader
// (nemesisLeaderStalls), put off until no peer or link cut is on (see
// putOff). The Extra workers' channels come last.
func NewNemesisPlan(seed uint64, d time.Duration, s NemesisShape) NemesisPlan {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	has := func(k string) bool { return slices.Contains(s.Kinds, k) }
	type channel struct {
		kinds  []string
		target func() int
	}
	var chans []channel
	workerChans := func(i int) {
		one := func() int { return i }
		if has(NemesisHolderPause) {
			chans = append(chans, channel{[]string{NemesisHolderPause}, one})
		}
		var lk []string
		for _, k := range []string{NemesisLockCut, NemesisLockDelay, NemesisLostReply} {
			if has(k) {
				lk = append(lk, k)
			}
		}
		if len(lk) > 0 {
			chans = append(chans, channel{lk, one})
		}
		if has(NemesisStoreDelay) {
			chans = append(chans, channel{[]string{NemesisStoreDelay}, one})
		}
	}
	for i := range s.Workers {
		workerChans(i)
	}
	var sk []string
	for _, k := range []string{NemesisServerPause, NemesisServerKill} {
		if has(k) && s.Servers > 0 {
			sk = append(sk, k)
		}
	}
	if len(sk) > 0 {
		chans = append(chans, channel{sk, func() int { return rng.IntN(s.Servers) }})
	}
	for i := range s.Extra {
		workerChans(s.Workers + i)
	}
	ttl := s.TTL
	span := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	p := NemesisPlan{Seed: seed, Duration: d}
	for _, c := range chans {
		at := span(0, 2*ttl)
		for {
			e := NemesisEvent{At: at, Kind: c.kinds[rng.IntN(len(c.kinds))], Target: c.target(), For: span(ttl/5, 5*ttl/2)}
			if e.Kind == NemesisHolderPause || e.Kind == NemesisLockCut {
				// Past the TTL: the holder's lease lapses, and another
				// may be granted and write before the holder's next write.
				e.For = span(ttl+ttl/5, 3*ttl)
			}
			if e.Kind == NemesisLockDelay || e.Kind == NemesisStoreDelay {
				e.Delay = span(ttl/10, ttl+ttl/2)
			}
			if e.At+e.For > d {
				break
			}
			p.Events = append(p.Events, e)
			at = e.At + e.For + span(ttl/2, 4*ttl)
		}
	}
	if has(NemesisServerClockJump) && s.Servers > 0 {
		p.Events = append(p.Events, nemesisClockJumps(seed, d, s)...)
	}
	var peerCuts []NemesisEvent
	if has(NemesisServerPeerCut) && s.Servers > 0 {
		peerCuts = nemesisPeerCuts(seed, d, s)
		p.Events = append(p.Events, peerCuts...)
	}
	var linkCuts []NemesisEvent
	if has(NemesisServerLinkCut) && s.Servers > 2 {
		linkCuts = putOff(nemesisLinkCuts(seed, d, s), peerCuts, d)
		p.Events = append(p.Events, linkCuts...)
	}
	if has(NemesisServerLeaderStall) && s.Servers > 1 {
		p.Events = append(p.Events, putOff(nemesisLeaderStalls(seed, d, s), append(slices.Clip(peerCuts), linkCuts...), d)...)
	}
	sort.SliceStable(p.Events, func(i, j int) bool { return p.Events[i].At < p.Events[j].At })
	return p
}

// nemesisClockJumps draws the clock jumps of a plan, from a generator
// seeded apart from the plan's other channels.
func nemesisClockJumps(seed uint64, d time.Duration, s NemesisShape) []NemesisEvent {
	rng := rand.New(rand.NewPCG(seed^0x636c6f636b6a6d70, seed+1))
	ttl := s.TTL
	span := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	var evs []NemesisEvent
	for at := span(0, 2*ttl); ; {
		e := NemesisEvent{At: at, Kind: NemesisServerClockJump, Target: rng.IntN(s.Servers),
			For: span(ttl/2, 5*ttl/2), Jump: span(ttl+ttl/5, 3*ttl)}
		if rng.IntN(3) == 0 {
			e.Jump = -e.Jump
		}
		if e.At+e.For > d {
			return evs
		}
		evs = append(evs, e)
		at = e.At + e.For + span(ttl/2, 4*ttl)
	}
}

// nemesisPeerCuts draws the cuts of servers from their peers, a channel
// of their own from a generator of their own, as the clock jumps are: the
// other channels' faults are the same with and without them. A cut may
// overlap another server's pause or kill, which leaves the ensemble
// without a quorum for a while: a loss of availability, never of safety
// (a server restarted meanwhile is not waited for until it serves: see
// nemesisApply).
func nemesisPeerCuts(seed uint64, d time.Duration, s NemesisShape) []NemesisEvent {
	rng := rand.New(rand.NewPCG(seed^0x69736f6c61746521, seed+2))
	return nemesisServerChannel(rng, d, s.TTL, NemesisServerPeerCut, func(e *NemesisEvent) { e.Target = rng.IntN(s.Servers) })
}

// nemesisLinkCuts draws the cuts of links between two servers, a
// channel of its own from a generator of its own, as the peer cuts are
// (NewNemesisPlan puts off those that would overlap a peer cut).
func nemesisLinkCuts(seed uint64, d time.Duration, s NemesisShape) []NemesisEvent {
	rng := rand.New(rand.NewPCG(seed^0x6c696e6b63757421, seed+3))
	return nemesisServerChannel(rng, d, s.TTL, NemesisServerLinkCut, func(e *NemesisEvent) {
		a := rng.IntN(s.Servers)
		b := (a + 1 + rng.IntN(s.Servers-1)) % s.Servers
		e.Target, e.Peer = min(a, b), max(a, b)
	})
}

// nemesisLeaderStalls draws the stalls of a follower's link from its
// leader, a channel of its own from a generator of its own, as the link
// cuts are (NewNemesisPlan puts off those that would overlap a peer or
// link cut).
func nemesisLeaderStalls(seed uint64, d time.Duration, s NemesisShape) []NemesisEvent {
	rng := rand.New(rand.NewPCG(seed^0x7374616c6c6c6472, seed+4))
	return nemesisServerChannel(rng, d, s.TTL, NemesisServerLeaderStall, func(e *NemesisEvent) { e.Target = rng.IntN(s.Servers) })
}

// nemesisServerChannel draws a channel of faults of kind from rng until
// d: the first 1 to 4 TTLs in, each on the servers servers draws, for
// half a TTL to 3 TTLs, the next 1 to 6 TTLs after the last ended.
func nemesisServerChannel(rng *rand.Rand, d, ttl time.Duration, kind string, servers func(e *NemesisEvent)) []NemesisEvent {
	span := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	var evs []NemesisEvent
	for at := span(ttl, 4*ttl); ; {
		e := NemesisEvent{At: at, Kind: kind}
		servers(&e)
		e.For = span(ttl/2, 3*ttl)
		if e.At+e.For > d {
			return evs
		}
		evs = append(evs, e)
		at = e.At + e.For + span(ttl, 6*ttl)
	}
}

// putOff returns evs, a channel's faults in order, each put off until
// no event of busy is on, and the rest of the channel with it (so the
// gaps between its faults stay as drawn); the faults that would then end
// after d are left out.
func putOff(evs, busy []NemesisEvent, d time.Duration) []NemesisEvent {
	var out []NemesisEvent
	shift := time.Duration(0)
	for _, e := range evs {
		e.At += shift
		for {
			i := slices.IndexFunc(busy, func(c NemesisEvent) bool { return c.At < e.At+e.For && e.At < c.At+c.For })
			if i < 0 {
				break
			}
			shift += busy[i].At + busy[i].For - e.At
			e.At = busy[i].At + busy[i].For
		}
		if e.At+e.For > d {
			break // and so would every later one: each starts after this one ends
		}
		out = append(out, e)
	}
	return out
}

// nemesisRecover bounds how long a nemesis run's workload runs on after
// the schedule's last action, past the schedule's end, until it has
// recovered (see nemesisRecovery.missing).
const nemesisRecover = 30 * time.Second

// NemesisTarget is a target of the nemesis mode and its servers, in the
// order a plan's server faults name them.
type NemesisTarget struct {
	Target
	Servers []*testserver.Process
	// Clocks are the wall clocks of Servers, in their order, where the
	// shim moves them (testserver's movable clocks); a target with a clock
	// for every server takes server-clock-jump faults.
	Clocks []*testserver.MovableClock
	// Deployment says what the target is ("Redis, appendfsync always").
	Deployment string
	// NoServerKill leaves server kills out of the schedule: the servers
	// are paused, never killed (a deployment that does not promise to
	// survive a server's death with its grants intact).
	NoServerKill bool
	// PeerCuts cut (true) and heal (false), for each server in the order
	// of Servers, every link between it and the other servers, both ways,
	// in the proxies they reach each other by; a target with one for
	// every server takes server-peer-cut faults. Cuts never overlap: a
	// schedule heals one before the next begins.
	PeerCuts []func(cut bool)
	// LinkCuts cuts (true) and heals (false) the links between servers a
	// and b (indexes of Servers), both ways, in the proxies they reach
	// each other by; a target with LinkCuts and three servers or more
	// takes server-link-cut faults.
	LinkCuts func(a, b int, cut bool)
	// LeaderStalls stalls (true) what the leader of server target (an
	// index of Servers), or of the next server when target leads, sends
	// it on its quorum link, or ends (false) the stall under way; it
	// returns the index of the follower stalled or freed (-1 when none:
	// no leader was found) and says what it did. A target with
	// LeaderStalls takes server-leader-stall faults.
	LeaderStalls func(target int, stall bool) (int, string)

	// cut are the servers a run (RunNemesisModes) has cut off from
	// their peers, or from one peer (a link cut: both ends). While any
	// is, a killed server restarts without waiting until it serves: cut
	// off, it cannot; beside a cut-off server whose vote ranks first,
	// the ensemble may elect that server again and again until its
	// links heal, the next event of the schedule, which a wait would
	// block; an end of a cut link may not hear its leader, the other
	// end, until the link heals.
	cut map[int]bool
}

// Shape is what a schedule for nt is drawn for: the workers of RunNemesis
// (the recipes' and the lock sets' as Extra), nt's servers, the fault kinds that apply to it
// (no link faults on file, where there is no network; no server faults
// without servers), and ttl.
func (nt NemesisTarget) Shape(ttl time.Duration) NemesisShape {
	return NemesisShape{Workers: nemesisWorkers + nemesisCandidates, Servers: len(nt.Servers), Kinds: nt.kinds(), TTL: ttl,
		Extra: nemesisRecipeWorkers(nt.Kind) + nemesisSetWorkers}
}

// kinds returns the fault kinds that apply to a target.
func (nt NemesisTarget) kinds() []string {
	k := []string{NemesisHolderPause, NemesisStoreDelay}
	if nt.Kind != backendFile {
		k = append(k, NemesisLockCut, NemesisLockDelay, NemesisLostReply)
	}
	if len(nt.Servers) > 0 {
		k = append(k, NemesisServerPause)
		if !nt.NoServerKill {
			k = append(k, NemesisServerKill)
		}
	}
	if len(nt.Servers) > 0 && len(nt.Clocks) == len(nt.Servers) && !slices.Contains(nt.Clocks, nil) {
		k = append(k, NemesisServerClockJump)
	}
	if len(nt.Servers) > 1 && len(nt.PeerCuts) == len(nt.Servers) && !slices.ContainsFunc(nt.PeerCuts, func(f func(bool)) bool { return f == nil }) {
		k = append(k, NemesisServerPeerCut)
	}
	if len(nt.Servers) > 2 && nt.LinkCuts != nil {
		k = append(k, NemesisServerLinkCut)
	}
	if len(nt.Servers) > 1 && nt.LeaderStalls != nil {
		k = append(k, NemesisServerLeaderStall)
	}
	return k
}

// NemesisResult is what one nemesis run found: the checkers' Result,
// the faults injected by kind, and the workload's counts.
type NemesisResult struct {
	*Result
	Seed       uint64
	Duration   time.Duration
	Deployment string
	Faults     map[string]int // injected, by kind
	// AcquireErrors counts acquisitions (and campaigns) that failed: the
	// service unreachable or the wait timed out, as a fault may cause.
	AcquireErrors int
	// ElectionGrants counts the terms among the grants.
	ElectionGrants int
	// SetGrants counts the lock sets' parts among the grants, and Sets
	// the sets granted.
	SetGrants, Sets int
	// Cutoffs are the grants that faults cut off, with the times from
	// the fault to the holder's report of the loss and to the next grant
	// to another worker (see DetectionTimes).
	Cutoffs []NemesisCutoff
	// ClockOverlaps counts the proven overlaps (of Overlaps) that a
	// forward step of a server's wall clock explains (ClockSteps): the
	// server expired the older grant's lease at once, so these are
	// reported, not judged (see Judge); the fence is what keeps them from
	// writing.
	ClockOverlaps int
	// MutexJudged is the run's mutex model verdict with the older grant
	// of each overlap a step explains proven live only up to the step
	// (see judgeClock): what Judge judges. Empty: Verdicts["mutex"].
	MutexJudged porcupine.CheckResult
	// Permits and Units are the recipes' verdicts (Ran false where the
	// target runs no such workload).
	Permits, Units RecipeVerdict
	// MemberErrors counts members whose partition.Run returned during
	// the run (it does on a lasting failure of the service).
	MemberErrors int
	// history is what WriteHistory saves.
	history *NemesisHistory
}

// nemesisWorkers and nemesisCandidates are the lock workers and the
// election candidates of a nemesis run.
const (
	nemesisWorkers    = 3
	nemesisCandidates = 2
)

// The lock-set workers of a nemesis run, which come after the recipes'
// workers, and the keys their sets are drawn from: the lock workers' key
// and nemesisSetKeys-1 more.
const (
	nemesisSetWorkers = 2
	nemesisSetKeys    = 3
)

// nemesisWorker is one worker of a nemesis run with its links.
type nemesisWorker struct {
	w     *Worker
	lock  []*faultproxy.Proxy // one per service address
	store *faultproxy.Proxy
	key   string
	res   string
	think time.Duration // the most a holder works between writes
	// limit, above 1, makes the worker's grants permits of a semaphore of
	// that limit with slots, each writing res+"-s"+SLOT.
	limit int
	// member: the worker is a member of a partition group (its workload
	// is nemesisMemberWork).
	member bool
	// setKeys, when set, make the worker's grants lock sets of some of
	// these keys (Client.AcquireAll), each part writing setRes[its key].
	setKeys []string
	setRes  map[string]string
}

// RunNemesis runs plan against nt with the store in mode: three workers
// cycle through the lock of one key (acquire, one to three paced
// read-modify-writes of one resource, in half the holds stubborn,
// ignoring the lock, release), two candidates do the same on an
// election, three workers do the same with permits of a semaphore of 2
// permits with slots (each permit writing its slot's resource), where the
// target grants permits with slots, and three members of a partition group of 6
// units write each unit they own with its token, in stubborn spells
// ignoring their units' contexts, and two workers hold lock sets of two
// or three of three keys (the lock workers' key and two more), writing
// each part's resource with its token, while the schedule's faults are
// injected; then everything is healed, the workload runs on to the
// schedule's end and until it has recovered (see nemesisRecovery.missing;
// nemesisRecover at most), stops, and the history is checked. It fails the test if the
// harness cannot carry the run out; the verdicts are the caller's to
// judge.
func RunNemesis(t testing.TB, nt NemesisTarget, mode Mode, plan NemesisPlan, ttl time.Duration) *NemesisResult {
	t.Helper()
	return RunNemesisModes(t, nt, []Mode{mode}, plan, ttl)[0]
}

// RunNemesisModes is RunNemesis in several store modes at once, on the
// same servers, under one schedule: each mode has its workload, workers,
// links and history of its own (keys and resources named by mode), and
// every fault of the plan reaches each mode alike: a server's fault once
// for all, a worker's fault to the worker of the same index in each mode
// (whose workload draws from the same seed). The modes' verdicts are then
// comparable fault for fault, and a target's full run takes the time of
// one mode. The results are in the order of modes.
func RunNemesisModes(t testing.TB, nt NemesisTarget, modes []Mode, plan NemesisPlan, ttl time.Duration) []*NemesisResult {
	t.Helper()
	if len(modes) == 0 {
		t.Fatal("torture: a nemesis run needs a store mode")
	}
	nt.cut = map[int]bool{}
	var ms []*nemesisMode
	for _, mode := range modes {
		ms = append(ms, newNemesisMode(t, nt, mode, plan, ttl))
	}
	// Registered after the Runs', so that it runs before they close.
	// A run stopped by a failure (a server that did not restart, a fault
	// the harness could not apply) may leave a server paused, killed or
	// with its clock moved: the next run on the same servers must find
	// them as the deployment is. No fault was applied before this point.
	t.Cleanup(func() {
		if !t.Failed() {
			return // a run that ends heals every fault itself
		}
		for _, c := range nt.Clocks {
			if c != nil {
				if off := c.Offset(); off != 0 {
					c.Jump(-off)
				}
			}
		}
		for _, heal := range nt.PeerCuts {
			if heal != nil {
				heal(false)
			}
		}
		for a := range nt.Servers {
			for b := a + 1; b < len(nt.Servers) && nt.LinkCuts != nil; b++ {
				nt.LinkCuts(a, b, false)
			}
		}
		if nt.LeaderStalls != nil {
			nt.LeaderStalls(0, false)
		}
		for _, p := range nt.Servers {
			if p.Running() {
				_ = p.Resume()
			} else {
				p.Restart(t)
			}
		}
	})
	// The members join once every mode's workers are up, so that the
	// modes' workloads start together.
	for _, m := range ms {
		m.join(t)
	}
	closeAll := func() {
		for _, m := range ms {
			m.r.Close()
		}
	}

	// The workload.
	stop := make(chan struct{})
	for _, m := range ms {
		m.work(plan.Seed, stop, ttl)
	}

	// The schedule, in the test's goroutine (a restart may fail the test).
	type action struct {
		at    time.Duration
		ev    NemesisEvent
		start bool
	}
	var acts []action
	for _, e := range plan.Events {
		acts = append(acts, action{e.At, e, true}, action{e.At + e.For, e, false})
	}
	sort.SliceStable(acts, func(i, j int) bool { return acts[i].at < acts[j].at })
	start := time.Now()
	var late time.Duration
	for _, a := range acts {
		if d := time.Until(start.Add(a.at)); d > 0 {
			select {
			case <-time.After(d):
			case <-ms[0].r.Context().Done():
			}
		} else {
			late = max(late, -d)
		}
		err := nemesisApplyModes(t, nt, ms, a.ev, a.start)
		switch {
		case errors.Is(err, errNoFault):
			continue // said in the history; neither a cut nor counted
		case err != nil:
			close(stop)
			closeAll()
			t.Fatalf("torture: nemesis seed %d: %s: %v", plan.Seed, a.ev, err)
		}
		// A cut is timed from when its fault is in place: a leader
		// stall first asks the members which leads, up to seconds.
		for _, m := range ms {
			if c, ok := nemesisCut(a.ev, a.start, m.ws, m.r.Clock.Now()); ok {
				m.cuts = append(m.cuts, c)
			}
		}
		if a.start {
			for _, m := range ms {
				m.nr.Faults[a.ev.Kind]++
			}
		}
	}
	// The schedule's tail: the workload runs on, unfaulted, to the
	// schedule's end, and on until it has recovered from the last faults
	// (see recoveredSince), for nemesisRecover at most: a schedule that
	// ran late (a server's restart blocks it), or whose last faults left
	// a cluster without a quorum, still ends with the workload granted
	// again, or says that it was not.
	healed := time.Now()
	rcs := make([]*nemesisRecovery, len(ms))
	for i, m := range ms {
		rcs[i] = &nemesisRecovery{since: m.r.Clock.Now()}
	}
	recovered := func() bool {
		all := true
		for i, m := range ms {
			all = m.recovered(rcs[i]) && all
		}
		return all
	}
	end := start.Add(plan.Duration)
	ok := true
	for time.Now().Before(end) || !recovered() {
		if time.Since(healed) > nemesisRecover && time.Now().After(end) {
			ok = false
			break
		}
		select {
		case <-time.After(50 * time.Millisecond):
			continue
		case <-ms[0].r.Context().Done():
		}
		ok = false
		break
	}
	for i, m := range ms {
		switch after := time.Since(healed).Round(time.Millisecond); {
		case !ok && len(rcs[i].missing(m)) > 0:
			m.r.Notef("the workload was not granted again within %v of the schedule's last action: no %s since", after, strings.Join(rcs[i].missing(m), ", no "))
		case time.Now().After(end.Add(time.Second)):
			m.r.Notef("the workload ran on %v after the schedule's last action, until it had recovered", after)
		}
	}
	close(stop)
	done := make(chan struct{})
	go func() {
		for _, m := range ms {
			m.wg.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		closeAll() // ends the workers' calls
		<-done
		t.Fatalf("torture: nemesis seed %d: the workload did not stop within 3m of the schedule's end", plan.Seed)
	}
	var werrs []error
	for _, m := range ms {
		werrs = append(werrs, m.werrs...)
	}
	if err := errors.Join(werrs...); err != nil {
		closeAll()
		t.Fatalf("torture: nemesis seed %d: %v", plan.Seed, err)
	}
	var out []*NemesisResult
	for _, m := range ms {
		m.r.Notef("%d faults in %v; the harness ran an action up to %v late (a server's restart blocks the schedule)", len(plan.Events), plan.Duration, late.Round(time.Millisecond))
		if len(ms) > 1 {
			m.r.Notef("ran at once with the store modes %v, under the same schedule", modes)
		}
		out = append(out, m.check(ttl))
	}
	return out
}

// nemesisRecovery is what a mode's workload was granted since the
// schedule's last action (since, a reading of its Run's clock), read from
// its history up to next.
type nemesisRecovery struct {
	since                   int64
	next                    int
	lock, set, permit, unit bool
	unitEver                bool // a unit granted at any time of the run
}

// recovered reports whether m's workload has recovered from the
// schedule's last faults (see nemesisRecovery.missing), reading the
// history recorded since rc's last look.
func (m *nemesisMode) recovered(rc *nemesisRecovery) bool {
	ops := m.r.Hist.From(rc.next)
	rc.next += len(ops)
	for _, op := range ops {
		if op.Kind != KindAcquire || op.Outcome != OutcomeOK {
			continue
		}
		after := op.Return >= rc.since
		switch {
		case strings.HasPrefix(op.Note, setPartNote):
			rc.set = rc.set || after
		case m.withPermits && strings.HasPrefix(op.Key, m.permitKey+"/slot/"):
			rc.permit = rc.permit || after
		case m.withUnits && m.r.lockModelsOmit != "" && strings.HasPrefix(op.Key, m.r.lockModelsOmit):
			rc.unit, rc.unitEver = rc.unit || after, true
		case !strings.HasSuffix(op.Key, "-election"):
			rc.lock = rc.lock || after
		}
	}
	return len(rc.missing(m)) == 0
}

// missing names what m's workload has not been granted since the
// schedule's last action: a lock, a lock set, and, where they run, a
// permit; and a unit, unless one was granted earlier in the run. Units
// stay with their owners while nothing fails (a healthy group grants
// none), so a unit granted before counts; an election's term does not
// count (a leader keeps its term).
func (rc *nemesisRecovery) missing(m *nemesisMode) []string {
	var no []string
	if !rc.lock {
		no = append(no, "lock")
	}
	if !rc.set {
		no = append(no, "lock set")
	}
	if m.withPermits && !rc.permit {
		no = append(no, "permit")
	}
	if m.withUnits && !rc.unit && !rc.unitEver {
		no = append(no, "unit")
	}
	return no
}

// nemesisMode is one store mode's part of a nemesis run: its Run (store,
// history, links), workers and result.
type nemesisMode struct {
	r                      *Run
	nr                     *NemesisResult
	ws                     []*nemesisWorker
	permitKey, permitRes   string
	group, unitRes         string
	withPermits, withUnits bool
	cuts                   []nemesisFault // the faults that may cut a holder off
	mu                     sync.Mutex
	// acqErrs counts the failed acquisitions by kind of error, with the
	// first message of each kind (for a note).
	acqErrs map[string]int
	acqErr1 map[string]string
	wg      sync.WaitGroup
	werrs   []error
}

// newNemesisMode starts mode's store and workers on nt (see RunNemesis);
// the members have not joined (join), the workload has not started.
func newNemesisMode(t testing.TB, nt NemesisTarget, mode Mode, plan NemesisPlan, ttl time.Duration) *nemesisMode {
	t.Helper()
	n := runs.Add(1)
	res := &Result{Backend: nt.Kind, Scenario: "nemesis", Variant: fmt.Sprint(plan.Seed), Mode: mode, Expect: ExpectHold, Rounds: 1}
	nr := &NemesisResult{Result: res, Seed: plan.Seed, Duration: plan.Duration, Deployment: nt.Deployment, Faults: map[string]int{}}
	r := NewRun(t, mode)
	if mode == PGFenced {
		if err := r.Store.usePostgres(nt.Data); err != nil {
			r.Close()
			t.Fatal(err)
		}
	}
	base := fmt.Sprintf("torture/nemesis/%d/%s/%d", plan.Seed, mode, n)
	resource := fmt.Sprintf("res-nemesis-%s-%d", mode, n)
	locks := &Fixture{T: t, Run: r, Target: nt.Target, P: Params{TTL: ttl}, Res0: res, Key: base, Res: resource}
	elect := &Fixture{T: t, Run: r, Target: nt.Target, P: Params{TTL: ttl}, Res0: res, Key: base + "-election", Res: resource + "-election", Election: true}
	permits := &Fixture{T: t, Run: r, Target: nt.Target, P: Params{TTL: ttl}, Res0: res, Key: base + nemesisPermitSuffix, Res: resource + nemesisPermitSuffix, Permit: true}
	members := &Fixture{T: t, Run: r, Target: nt.Target, P: Params{TTL: ttl}, Res0: res, Key: base + nemesisPartitionSuffix, Res: resource + nemesisPartitionSuffix}
	withPermits, withUnits := nemesisRecipes(nt.Kind)
	if withUnits {
		// A member reports its units' grants, each stamped from the
		// membership's start (see member.go): over a long run, a unit's
		// dozens of grants, all concurrent in the history, are more than
		// the token model's search can order within CheckTimeout (a
		// minute's run timed it out), and could prove no regression
		// anyway. The units are judged by CheckUnits (the proven overlaps
		// and the mutex model per unit, in the units' column), and
		// Check's counts still cover them (overlaps, a token handed out
		// twice); the mutex and token columns are the locks', terms' and
		// permits'.
		r.lockModelsOmit = pt.KeyPrefix + members.Key + "/units/"
		r.Notef("the mutex and token models leave the units' grants out (each stamped from its member's start: see RunNemesis); CheckUnits judges them")
	}
	type spec struct {
		f      *Fixture
		name   string
		limit  int
		member bool
		set    bool
	}
	var specs []spec
	for i := range nemesisWorkers {
		specs = append(specs, spec{f: locks, name: fmt.Sprintf("W%d", i)})
	}
	for i := range nemesisCandidates {
		specs = append(specs, spec{f: elect, name: fmt.Sprintf("C%d", i)})
	}
	// The recipes' workers come after the others, in the order of the
	// plan's Extra targets.
	if withPermits {
		for i := range nemesisPermitWorkers {
			specs = append(specs, spec{f: permits, name: fmt.Sprintf("P%d", i), limit: nemesisPermitLimit})
		}
	}
	if withUnits {
		for i := range nemesisMembers {
			specs = append(specs, spec{f: members, name: fmt.Sprintf("M%d", i), member: true})
		}
	}
	// The lock sets' workers come last: their sets share the lock
	// workers' key (and resource), with more keys of their own.
	setKeys, setRes := []string{locks.Key}, map[string]string{locks.Key: locks.Res}
	for i := 1; i < nemesisSetKeys; i++ {
		k := fmt.Sprintf("%s-set%d", locks.Key, i)
		setKeys, setRes[k] = append(setKeys, k), fmt.Sprintf("%s-set%d", locks.Res, i)
	}
	for i := range nemesisSetWorkers {
		specs = append(specs, spec{f: locks, name: fmt.Sprintf("S%d", i), set: true})
	}

	// Spawn the workers, each with its own proxies.
	var ws []*nemesisWorker
	type spawned struct {
		i   int
		w   *Worker
		err error
	}
	total := len(specs)
	ch := make(chan spawned, total)
	for i, sp := range specs {
		f, name := sp.f, sp.name
		nw := &nemesisWorker{key: f.Key, res: f.Res, store: r.Proxy(r.Store.Addr()), think: ttl / 4, limit: sp.limit, member: sp.member}
		if sp.set {
			nw.setKeys, nw.setRes = setKeys, setRes
		}
		cfg := WorkerConfig{StoreVia: nw.store, TTL: ttl}
		if nt.Kind != backendFile {
			var addrs []string
			for _, a := range nt.addrs() {
				p := r.Proxy(a)
				nw.lock = append(nw.lock, p)
				addrs = append(addrs, p.Addr())
			}
			cfg.URL = nt.URL(addrs...)
		}
		ws = append(ws, nw)
		go func() {
			w, err := f.open(name, cfg)
			ch <- spawned{i, w, err}
		}()
	}
	var errs []error
	for range total {
		s := <-ch
		ws[s.i].w = s.w
		errs = append(errs, s.err)
	}
	if err := errors.Join(errs...); err != nil {
		r.Close()
		t.Fatal(err)
	}

	m := &nemesisMode{r: r, nr: nr, ws: ws, permitKey: permits.Key, permitRes: permits.Res, group: members.Key, unitRes: members.Res,
		withPermits: withPermits, withUnits: withUnits}
	m.werrs = make([]error, len(ws))
	return m
}

// join makes m's members join their partition group.
func (m *nemesisMode) join(t testing.TB) {
	t.Helper()
	for _, nw := range m.ws {
		if nw.member {
			if err := nemesisJoin(nw.w, m.group, m.unitRes); err != nil {
				m.r.Close()
				t.Fatal(err)
			}
		}
	}
}

// work starts m's workload until stop: each worker's draws come from
// seed and its index, alike in every mode.
func (m *nemesisMode) work(seed uint64, stop <-chan struct{}, ttl time.Duration) {
	for i, nw := range m.ws {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
		if nw.member {
			m.wg.Go(func() { m.werrs[i] = nemesisMemberWork(nw, rng, stop, ttl) })
			continue
		}
		m.wg.Go(func() {
			m.werrs[i] = nemesisWork(nw, rng, stop, m.acquireFailed)
		})
	}
}

// acquireFailed counts a failed acquisition, in all and by the kind of
// its error.
func (m *nemesisMode) acquireFailed(err error) {
	k := ErrKind(err)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nr.AcquireErrors++
	if m.acqErrs == nil {
		m.acqErrs, m.acqErr1 = map[string]int{}, map[string]string{}
	}
	if m.acqErrs[k]++; m.acqErrs[k] == 1 {
		m.acqErr1[k] = err.Error()
	}
}

// acquireErrorsNote says how the acquisitions failed, by kind of error
// with the first message of each, or "" if none did.
func (m *nemesisMode) acquireErrorsNote() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m.acqErrs)) {
		parts = append(parts, fmt.Sprintf("%s %d (first: %s)", k, m.acqErrs[k], m.acqErr1[k]))
	}
	if len(parts) == 0 {
		return ""
	}
	return "failed acquisitions by kind: " + strings.Join(parts, "; ")
}

// check checks m's history once its workload stopped, and returns its
// result.
func (m *nemesisMode) check(ttl time.Duration) *NemesisResult {
	r, nr, res := m.r, m.nr, m.nr.Result
	if n := m.acquireErrorsNote(); n != "" {
		r.Notef("%s", n)
	}
	r.Check(res, "")
	// The units' grants are stamped from their member's start (see
	// lockModelsOmit): no fault time can be measured against them.
	cutOps := res.Ops
	if r.lockModelsOmit != "" {
		cutOps = slices.DeleteFunc(slices.Clone(res.Ops), func(op Op) bool { return strings.HasPrefix(op.Key, r.lockModelsOmit) })
	}
	nr.Cutoffs = nemesisCutoffs(cutOps, m.cuts)
	steps := ClockSteps{TTL: ttl}
	for _, c := range m.cuts {
		if c.kind == NemesisServerClockJump {
			steps.At = append(steps.At, c.at)
		}
	}
	nr.judgeClock(res.Ops, steps, r.lockModelsOmit)
	type set struct {
		worker string
		call   int64
	}
	sets := map[set]bool{} // the parts of a set share their acquire
	for _, op := range res.Ops {
		if op.Kind == KindAcquire && strings.HasSuffix(op.Key, "-election") {
			nr.ElectionGrants++
		}
		if op.Kind == KindAcquire && strings.HasPrefix(op.Note, setPartNote) {
			nr.SetGrants++
			sets[set{op.Worker, op.Call}] = true
		}
	}
	nr.Sets = len(sets)
	nr.checkRecipes(r, m.permitKey, m.permitRes, m.group, m.unitRes, m.withPermits, m.withUnits, steps)
	nr.history = &NemesisHistory{Backend: res.Backend, Deployment: nr.Deployment, Mode: res.Mode.String(), Seed: nr.Seed, Steps: steps,
		Omit: r.lockModelsOmit, PermitKey: m.permitKey, PermitRes: m.permitRes, Group: m.group, UnitRes: m.unitRes,
		Permits: m.withPermits, Units: m.withUnits, Ops: res.Ops}
	return nr
}

// nemesisWork is one worker's workload until stop: it passes each failed
// acquisition to failedWith, and returns an error only if the harness
// failed (a worker gone), never for what a fault makes the library
// report.
func nemesisWork(nw *nemesisWorker, rng *rand.Rand, stop <-chan struct{}, failedWith func(error)) error {
	w := nw.w
	tolerable := func(err error) bool { return err == nil || ErrKind(err) != "" }
	if len(nw.setKeys) > 0 {
		return nemesisSetWork(nw, rng, stop, failedWith)
	}
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		rep, err := w.acquire(nw.key, Acq{Wait: true, Timeout: 5 * time.Second, Limit: nw.limit})
		if err != nil {
			if !tolerable(err) {
				return err
			}
			failedWith(err)
			continue
		}
		resource := nw.res
		if nw.limit > 1 {
			resource = fmt.Sprintf("%s-s%d", nw.res, rep.Slot) // a fence per slot
		}
		// Half the holds are stubborn: their writes go out whether the
		// lock is live or not (a holder that ignores its lock's context),
		// which only the fence can refuse.
		stubborn := rng.IntN(2) == 0
		for range 1 + rng.IntN(3) {
			o := RMWOptions{NoCheck: stubborn, StoreTimeout: time.Second}
			if res := w.RMW(resource, o); !tolerable(res.Err) {
				return res.Err
			}
			// The holder works a while after each write (pacing, up to a
			// quarter of a TTL), so that a fault finds it holding more
			// often than waiting, and a newer holder writes as soon as it
			// is granted.
			time.Sleep(time.Duration(rng.Int64N(int64(nw.think) + 1)))
		}
		if err := w.Release(); !tolerable(err) {
			return err
		}
	}
}

// nemesisSetWork is a lock-set worker's workload until stop, as
// nemesisWork's: each hold is a set of two or more of nw.setKeys (drawn
// at random, asked in a random order: AcquireAll sorts them), and each
// round of writes writes every part's resource with the part's token,
// checked against the whole set's liveness or (stubborn) not at all.
func nemesisSetWork(nw *nemesisWorker, rng *rand.Rand, stop <-chan struct{}, failedWith func(error)) error {
	w := nw.w
	tolerable := func(err error) bool { return err == nil || ErrKind(err) != "" }
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		keys := slices.Clone(nw.setKeys)
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		keys = keys[:2+rng.IntN(len(keys)-1)]
		if _, err := w.AcquireAll(keys, Acq{Wait: true, Timeout: 5 * time.Second}); err != nil {
			if !tolerable(err) {
				return err
			}
			failedWith(err)
			continue
		}
		stubborn := rng.IntN(2) == 0
		for range 1 + rng.IntN(3) {
			for _, k := range keys {
				o := RMWOptions{NoCheck: stubborn, StoreTimeout: time.Second, Key: k}
				if res := w.RMW(nw.setRes[k], o); !tolerable(res.Err) {
					return res.Err
				}
			}
			time.Sleep(time.Duration(rng.Int64N(int64(nw.think) + 1)))
		}
		if err := w.Release(); !tolerable(err) {
			return err
		}
	}
}

// errNoFault is what nemesisApply returns for a fault that found nothing
// to act on as it began (a leader stall while the ensemble had no
// leader): the history says so, and the run neither counts it nor times
// a cut from it.
var errNoFault = errors.New("torture: no fault to inject")

// nemesisApplyModes starts (or ends) the fault of e in every mode of a
// run: a worker's fault on the worker of e's index in each mode, a
// server's fault once, recorded in every mode's history.
func nemesisApplyModes(t testing.TB, nt NemesisTarget, ms []*nemesisMode, e NemesisEvent, start bool) error {
	t.Helper()
	switch e.Kind {
	case NemesisServerPause, NemesisServerKill, NemesisServerClockJump, NemesisServerPeerCut, NemesisServerLinkCut, NemesisServerLeaderStall:
		var also []*Run
		for _, m := range ms[1:] {
			also = append(also, m.r)
		}
		return nemesisApply(t, ms[0].r, nt, ms[0].ws, e, start, also...)
	}
	for _, m := range ms {
		if err := nemesisApply(t, m.r, nt, m.ws, e, start); err != nil {
			return err
		}
	}
	return nil
}

// nemesisApply starts (or ends) the fault of e, recorded in r's history;
// a server's fault is recorded in also's too.
func nemesisApply(t testing.TB, r *Run, nt NemesisTarget, ws []*nemesisWorker, e NemesisEvent, start bool, also ...*Run) error {
	t.Helper()
	server := func(note string) {
		for _, r := range append([]*Run{r}, also...) {
			r.Fault("", note)
		}
	}
	on := func(ps []*faultproxy.Proxy, f func(*faultproxy.Proxy)) {
		for _, p := range ps {
			f(p)
		}
	}
	heal := (*faultproxy.Proxy).Heal
	switch e.Kind {
	case NemesisHolderPause:
		if start {
			return ws[e.Target].w.Pause()
		}
		return ws[e.Target].w.Resume()
	case NemesisLockCut, NemesisLockDelay, NemesisLostReply:
		nw := ws[e.Target]
		if !start {
			on(nw.lock, heal)
			r.Fault(nw.w.Name, "lock links healed")
			return nil
		}
		switch e.Kind {
		case NemesisLockCut:
			on(nw.lock, (*faultproxy.Proxy).Blackhole)
			r.Fault(nw.w.Name, "lock links blackholed")
		case NemesisLockDelay:
			on(nw.lock, func(p *faultproxy.Proxy) { p.Delay(e.Delay) })
			r.Fault(nw.w.Name, fmt.Sprintf("lock links delayed by %v", e.Delay.Round(time.Millisecond)))
		default:
			on(nw.lock, (*faultproxy.Proxy).DropReplies)
			r.Fault(nw.w.Name, "lock links lose replies")
		}
	case NemesisStoreDelay:
		nw := ws[e.Target]
		if start {
			nw.store.Delay(e.Delay)
			r.Fault(nw.w.Name, fmt.Sprintf("store link delayed by %v", e.Delay.Round(time.Millisecond)))
		} else {
			nw.store.Heal()
			r.Fault(nw.w.Name, "store link healed")
		}
	case NemesisServerPause:
		p := nt.Servers[e.Target]
		if start {
			server(fmt.Sprintf("server %d SIGSTOP", e.Target))
			return p.Pause()
		}
		server(fmt.Sprintf("server %d SIGCONT", e.Target))
		return p.Resume()
	case NemesisServerKill:
		p := nt.Servers[e.Target]
		if start {
			p.Kill()
			server(fmt.Sprintf("server %d kill -9", e.Target))
			return nil
		}
		if len(nt.cut) > 0 {
			p.RestartAlone(t)
			server(fmt.Sprintf("server %d restarted (not waited for until it serves: a server is cut off from its peers)", e.Target))
			return nil
		}
		p.Restart(t)
		server(fmt.Sprintf("server %d restarted", e.Target))
	case NemesisServerClockJump:
		if e.Target < 0 || e.Target >= len(nt.Clocks) || nt.Clocks[e.Target] == nil {
			return fmt.Errorf("server %d has no movable clock", e.Target)
		}
		if start {
			nt.Clocks[e.Target].Jump(e.Jump)
			server(fmt.Sprintf("server %d's wall clock jumped by %+v", e.Target, e.Jump.Round(time.Millisecond)))
		} else {
			nt.Clocks[e.Target].Jump(-e.Jump)
			server(fmt.Sprintf("server %d's wall clock returned (jumped by %+v)", e.Target, -e.Jump.Round(time.Millisecond)))
		}
	case NemesisServerPeerCut:
		if e.Target < 0 || e.Target >= len(nt.PeerCuts) || nt.PeerCuts[e.Target] == nil {
			return fmt.Errorf("server %d has no peer links", e.Target)
		}
		if nt.cut == nil {
			return fmt.Errorf("server %d: a peer cut outside a nemesis run", e.Target)
		}
		if start {
			nt.PeerCuts[e.Target](true)
			nt.cut[e.Target] = true
			server(fmt.Sprintf("server %d cut off from its peers", e.Target))
			return nil
		}
		nt.PeerCuts[e.Target](false)
		delete(nt.cut, e.Target)
		server(fmt.Sprintf("server %d's peer links healed", e.Target))
	case NemesisServerLinkCut:
		if nt.LinkCuts == nil || e.Target == e.Peer || min(e.Target, e.Peer) < 0 || max(e.Target, e.Peer) >= len(nt.Servers) {
			return fmt.Errorf("servers %d and %d: no link to cut", e.Target, e.Peer)
		}
		if nt.cut == nil {
			return fmt.Errorf("servers %d and %d: a link cut outside a nemesis run", e.Target, e.Peer)
		}
		// A server of the two that restarts meanwhile may not hear its
		// leader (the other one) until the link heals: see cut.
		if start {
			nt.LinkCuts(e.Target, e.Peer, true)
			nt.cut[e.Target], nt.cut[e.Peer] = true, true
			server(fmt.Sprintf("the links between servers %d and %d cut", e.Target, e.Peer))
			return nil
		}
		nt.LinkCuts(e.Target, e.Peer, false)
		delete(nt.cut, e.Target)
		delete(nt.cut, e.Peer)
		server(fmt.Sprintf("the links between servers %d and %d healed", e.Target, e.Peer))
	case NemesisServerLeaderStall:
		if nt.LeaderStalls == nil || e.Target < 0 || e.Target >= len(nt.Servers) {
			return fmt.Errorf("server %d: no leader link to stall", e.Target)
		}
		if nt.cut == nil {
			return fmt.Errorf("server %d: a leader stall outside a nemesis run", e.Target)
		}
		// The stalled follower, restarted meanwhile, may not hear its
		// leader until the stall ends: see cut.
		stalled, what := nt.LeaderStalls(e.Target, start)
		server(what)
		switch {
		case stalled < 0 && start:
			return errNoFault
		case stalled >= 0 && start:
			nt.cut[stalled] = true
		case stalled >= 0:
			delete(nt.cut, stalled)
		}
	default:
		return fmt.Errorf("unknown fault kind %q", e.Kind)
	}
	return nil
}

// Judge returns what the run got wrong: in every mode, a proven overlap
// of two grants of one key (the mutex model illegal, or a count) and a
// token not above the last (the token model illegal, or a count), since
// every target runs in the deployment its backend promises to survive;
// in a fenced mode, a stale write accepted or a register history that is
// not linearizable; and each recipe's invariant: more permits proven live
// at one instant than the semaphore's limit, or two owners of a unit
// proven live at one instant (see CheckPermits, CheckUnits). None of these depends on timing: each is proven from
// the history. Lost updates are reported, not judged (a fence refuses a
// stale write, not an increment computed from a read an older holder
// made before the newer one wrote). One exception: the overlaps that a
// forward step of a server's wall clock explains (ClockOverlaps) are
// reported, not judged, since the server expired the older grant's lease
// at the step; the mutex model is judged with each such older grant's
// life cut at the step (MutexJudged), so that a step excuses the
// overlaps it explains and nothing else. Units' token regressions are
// judged by CheckUnits.
func (nr *NemesisResult) Judge() []string {
	var bad []string
	mutex := nr.MutexJudged
	if mutex == "" {
		mutex = nr.Verdicts["mutex"]
	}
	if overlaps := nr.Overlaps - nr.ClockOverlaps; overlaps > 0 || mutex == porcupine.Illegal {
		bad = append(bad, fmt.Sprintf("mutual exclusion: %d proven overlaps (%d after a server's clock stepped forward), mutex model %s", nr.Overlaps, nr.ClockOverlaps, judgedName(nr.Verdicts["mutex"], nr.MutexJudged)))
	}
	if nr.TokenRegressions > 0 || nr.Verdicts["tokens"] == porcupine.Illegal {
		bad = append(bad, fmt.Sprintf("tokens: %d regressions, token model %s", nr.TokenRegressions, verdictName(nr.Verdicts["tokens"])))
	}
	if nr.Mode != Unfenced {
		if nr.StaleAccepted > 0 {
			bad = append(bad, fmt.Sprintf("fence: %d stale writes accepted", nr.StaleAccepted))
		}
		if nr.Verdicts["register"] == porcupine.Illegal {
			bad = append(bad, "fence: the register's history is not linearizable")
		}
	}
	if nr.Permits.Violated() {
		bad = append(bad, fmt.Sprintf("permits: at most %d holders: %d proven live at once (%d grants over the limit, %d pairs of holders of one slot), slots' mutex model %s",
			nr.Permits.Limit, nr.Permits.MaxHolders, nr.Permits.Over-nr.Permits.Pairs, nr.Permits.Pairs, judgedName(nr.Permits.Mutex, nr.Permits.MutexJudged)))
	}
	if nr.Units.Violated() {
		bad = append(bad, fmt.Sprintf("partitioning: one owner per unit: %d pairs of owners proven live at once, %d token regressions, units' mutex model %s",
			nr.Units.Over, nr.Units.TokenRegressions, judgedName(nr.Units.Mutex, nr.Units.MutexJudged)))
	}
	return bad
}

// judgedName renders a mutex model's verdict, and the verdict judged once
// the servers' clock steps are excused where that differs.
func judgedName(raw, judged porcupine.CheckResult) string {
	if judged == "" || judged == raw {
		return verdictName(raw)
	}
	return fmt.Sprintf("%s (%s once the clock steps are excused)", verdictName(raw), verdictName(judged))
}

func verdictName(v porcupine.CheckResult) string {
	switch v {
	case porcupine.Ok:
		return "ok"
	case porcupine.Illegal:
		return "ILLEGAL"
	case porcupine.Unknown:
		return "unknown (timed out)"
	}
	return "-"
}

// NemesisTable renders nemesis results as a Markdown table.
func NemesisTable(rs []*NemesisResult) string {
	var b strings.Builder
	b.WriteString("| backend (deployment) | store | seed | duration | faults injected | grants (terms, set parts) | acquire errors | writes | stale attempted/refused/accepted | lost updates | overlaps | token regressions | mutex | tokens | register | permit grants | permits (≤N) | permit stale attempted/refused/accepted | unit grants | units (one owner) | unit stale attempted/refused/accepted | verdict | loss reported p50 / max (n) | next grant p50 / max (n) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		var fs []string
		for _, k := range NemesisKinds {
			if n := r.Faults[k]; n > 0 {
				fs = append(fs, fmt.Sprintf("%s %d", k, n))
			}
		}
		verdict := "holds"
		if bad := r.Judge(); len(bad) > 0 {
			verdict = "VIOLATION: " + strings.Join(bad, "; ")
		} else if r.Mode == Unfenced && r.Bit() {
			verdict = "holds where judged; unfenced baseline shows: " + r.violationText()
		}
		if r.ClockOverlaps > 0 {
			verdict += fmt.Sprintf(" (%d of the overlaps after a server's clock stepped forward: not judged)", r.ClockOverlaps)
		}
		loss, grant := r.DetectionTimes()
		grants := func(v RecipeVerdict) string {
			if !v.Ran {
				return "-"
			}
			return fmt.Sprint(v.Grants)
		}
		unitGrants := grants(r.Units)
		if r.MemberErrors > 0 {
			unitGrants += fmt.Sprintf(" (%d members' partition.Run returned)", r.MemberErrors)
		}
		fmt.Fprintf(&b, "| %s (%s) | %s | %d | %v | %s | %d (%d, %d) | %d | %d | %d/%d/%d | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Backend, r.Deployment, r.Mode, r.Seed, r.Duration, strings.Join(fs, ", "), r.Grants, r.ElectionGrants, r.SetGrants, r.AcquireErrors,
			r.Writes, r.StaleAttempted, r.StaleRefused, r.StaleAccepted, r.LostUpdates, r.Overlaps, r.TokenRegressions,
			judgedName(r.Verdicts["mutex"], r.MutexJudged), verdictName(r.Verdicts["tokens"]), verdictName(r.Verdicts["register"]),
			grants(r.Permits), recipeCell(r.Permits, "pairs of holders of one slot"), staleCell(r.Permits),
			unitGrants, recipeCell(r.Units, "pairs of owners"), staleCell(r.Units), verdict,
			p50Max(loss), p50Max(grant))
	}
	return b.String()
}

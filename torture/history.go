package torture

import (
	"slices"
	"sync"
)

// Kind is the kind of a recorded operation.
type Kind string

// Kinds of operations.
const (
	// KindAcquire is a lock acquisition, from the harness's command to the
	// worker's reply.
	KindAcquire Kind = "acquire"
	// KindEnd is the end of a grant as its holder saw it: the lock's
	// context was cancelled (released or lost). Its call time is the last
	// moment at which the grant was proven live, its return the moment the
	// harness received the worker's report.
	KindEnd Kind = "end"
	// KindRelease is a Release call, from command to reply.
	KindRelease Kind = "release"
	// KindRead is a read at the store, stamped by the store.
	KindRead Kind = "read"
	// KindWrite is a write at the store, stamped by the store.
	KindWrite Kind = "write"
	// KindFault is an injected fault or a harness action, for the timeline.
	KindFault Kind = "fault"
)

// Outcome is how an operation ended.
type Outcome string

// Outcomes.
const (
	OutcomeOK          Outcome = "ok"
	OutcomeStale       Outcome = "stale-refused" // a write refused by the fence
	OutcomeNotAcquired Outcome = "not-acquired"
	OutcomeLost        Outcome = "lost" // a release or end that found the grant gone
	OutcomeError       Outcome = "error"
)

// Op is one recorded operation. Times are readings of the run's Clock; the
// interval [Call, Return] contains the moment the operation took effect.
type Op struct {
	Seq     int     `json:"seq"`    // order of recording
	Worker  string  `json:"worker"` // "A", "B", ... or "harness"
	Kind    Kind    `json:"kind"`
	Key     string  `json:"key,omitempty"` // lock key, or resource for reads and writes
	Grant   int     `json:"grant,omitempty"`
	Token   uint64  `json:"token,string,omitempty"`
	Value   int64   `json:"value,omitempty"`
	Call    int64   `json:"call"`
	Return  int64   `json:"return"`
	Outcome Outcome `json:"outcome"`
	// Stale marks a write whose token was below the highest token admitted
	// for its resource when it arrived, whether or not it was refused.
	Stale bool `json:"stale,omitempty"`
	// Shared marks the acquisition (and end) of a read lock, which may
	// overlap other read locks of its key.
	Shared bool `json:"shared,omitempty"`
	// Acked marks a write whose success reached its worker.
	Acked bool `json:"acked,omitempty"`
	// Naive marks an operation done the way the guide's naive sketches do
	// it (an unconditional delete as release, a write without re-checking).
	Naive bool   `json:"naive,omitempty"`
	Note  string `json:"note,omitempty"`
}

// History is the record of a run. It is safe for concurrent use.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Add records op and returns its sequence number.
func (h *History) Add(op Op) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.Seq = len(h.ops)
	h.ops = append(h.ops, op)
	return op.Seq
}

// Update changes the recorded op seq with f.
func (h *History) Update(seq int, f func(*Op)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq >= 0 && seq < len(h.ops) {
		f(&h.ops[seq])
	}
}

// Get returns the op recorded with seq.
func (h *History) Get(seq int) Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ops[seq]
}

// From returns a copy of the ops recorded from the seq-th on, in
// recording order.
func (h *History) From(seq int) []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq >= len(h.ops) {
		return nil
	}
	return slices.Clone(h.ops[seq:])
}

// Ops returns a copy of the recorded ops, in recording order.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

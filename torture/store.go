package torture

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/distlock/distlock/fence"
)

// Mode selects whether the Store checks fencing tokens.
type Mode int

// Modes of the Store.
const (
	// Unfenced accepts every write: the baseline, where a stale writer
	// overwrites newer data.
	Unfenced Mode = iota
	// Fenced refuses a write whose token is below the highest token
	// admitted for its resource (fence.Register).
	Fenced
	// PGFenced keeps the registers in PostgreSQL and makes each write a
	// transaction fenced by pglock.Fence (see pgStore).
	PGFenced
)

// String returns "unfenced", "fenced" or "pg-fenced".
func (m Mode) String() string {
	switch m {
	case Fenced:
		return "fenced"
	case PGFenced:
		return "pg-fenced"
	}
	return "unfenced"
}

// Store is the storage the workers protect with their locks: a register
// (an integer) per resource, served over TCP on loopback so that a fault
// proxy can sit between a worker and it. Every read and write is recorded
// in the run's History, stamped with the run's Clock when the request
// arrives and when the reply leaves.
//
// The protocol is one request per line:
//
//	HELLO worker              -> OK
//	R resource token          -> V seq value
//	W resource token value    -> OK seq | STALE seq highest
//	H resource                -> H highest
//
// where seq is the History sequence number of the recorded operation, and
// H asks the highest token admitted for resource (fence.Register.Highest,
// in every mode: the guard, or the unfenced store's shadow), as a reader
// validating its read does; it is not recorded. In
// Fenced mode a write is admitted by a fence.Register and applied in the
// same step; in Unfenced mode every write is applied, and a shadow register
// only classifies it (Op.Stale). A Store is safe for concurrent use.
type Store struct {
	mode  Mode
	clock *Clock
	hist  *History
	ln    net.Listener

	mu     sync.Mutex
	values map[string]int64
	fence  fence.Register // Fenced: the guard; Unfenced: the shadow
	conns  map[net.Conn]struct{}
	pg     *pgStore // PGFenced: where the registers are kept
	closed bool
	wg     sync.WaitGroup
}

// StartStore starts a Store on a free loopback port, recording into hist
// with clock.
func StartStore(mode Mode, clock *Clock, hist *History) (*Store, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("torture: store: %w", err)
	}
	s := &Store{mode: mode, clock: clock, hist: hist, ln: ln, values: map[string]int64{}, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address workers dial.
func (s *Store) Addr() string { return s.ln.Addr().String() }

// Mode returns the Store's mode.
func (s *Store) Mode() Mode { return s.mode }

// Value returns the current value of resource (0 if never written).
func (s *Store) Value(resource string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.values[resource]
}

// Highest returns the highest token admitted for resource.
func (s *Store) Highest(resource string) uint64 { return s.fence.Highest(resource) }

// Close stops the Store, closes its connections and waits for its
// goroutines.
func (s *Store) Close() {
	s.mu.Lock()
	s.closed = true
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	if s.pg != nil {
		s.pg.close()
	}
}

func (s *Store) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *Store) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	r := bufio.NewReader(c)
	worker := "?"
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		call := s.clock.Now()
		reply, err := s.handle(&worker, strings.Fields(line), call)
		if err != nil {
			reply = "ERR " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		if _, err := c.Write([]byte(reply + "\n")); err != nil {
			return
		}
	}
}

var errProtocol = errors.New("torture: store: bad request")

func (s *Store) handle(worker *string, f []string, call int64) (string, error) {
	if len(f) == 0 {
		return "", errProtocol
	}
	switch {
	case f[0] == "HELLO" && len(f) == 2:
		*worker = f[1]
		return "OK", nil
	case f[0] == "R" && len(f) == 3:
		token, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return "", errProtocol
		}
		s.mu.Lock()
		v := s.values[f[1]]
		if s.pg != nil {
			var err error
			if v, err = s.pg.read(f[1]); err != nil {
				s.mu.Unlock()
				return "", err
			}
		}
		seq := s.hist.Add(Op{Worker: *worker, Kind: KindRead, Key: f[1], Token: token, Value: v, Call: call, Return: s.clock.Now(), Outcome: OutcomeOK})
		s.mu.Unlock()
		return fmt.Sprintf("V %d %d", seq, v), nil
	case f[0] == "H" && len(f) == 2:
		s.mu.Lock()
		defer s.mu.Unlock()
		return fmt.Sprintf("H %d", s.fence.Highest(f[1])), nil
	case f[0] == "W" && len(f) == 4:
		token, err1 := strconv.ParseUint(f[2], 10, 64)
		v, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			return "", errProtocol
		}
		res := f[1]
		s.mu.Lock()
		defer s.mu.Unlock()
		op := Op{Worker: *worker, Kind: KindWrite, Key: res, Token: token, Value: v, Call: call, Outcome: OutcomeOK}
		var highest uint64
		if s.pg != nil {
			stale, h, err := s.pg.write(res, token, v)
			if err != nil {
				return "", err
			}
			if stale {
				op.Outcome, op.Stale, highest = OutcomeStale, true, h
			} else {
				s.values[res] = v
				_ = s.fence.Admit(res, token) // Highest, as in the other modes
			}
		} else if s.mode == Fenced {
			err := s.fence.Do(res, token, func() error { s.values[res] = v; return nil })
			var se *fence.StaleTokenError
			if errors.As(err, &se) {
				op.Outcome, op.Stale, highest = OutcomeStale, true, se.Highest
			} else if err != nil {
				return "", err
			}
		} else {
			if err := s.fence.Admit(res, token); err != nil {
				op.Stale = true
			}
			s.values[res] = v
		}
		op.Return = s.clock.Now()
		seq := s.hist.Add(op)
		if op.Outcome == OutcomeStale {
			return fmt.Sprintf("STALE %d %d", seq, highest), nil
		}
		return fmt.Sprintf("OK %d", seq), nil
	}
	return "", errProtocol
}

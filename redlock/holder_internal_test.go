package redlock

import "testing"

// A ready watcher of the holder is woken by a node that confirms the
// channel again (it reconnected), not by one heard for the first time
// after the watcher became ready: the nodes that made it ready announce
// every change already (need of them meet every majority). Woken for the
// late node, a Watch read the holder again while nothing changed.
func TestLateFirstConfirmationWakesNobody(t *testing.T) {
	s := &subscriber{need: 2, holders: map[string]*holderChannel{}, sending: map[string][]chan struct{}{}, closed: true}
	w := s.addWatch("h")
	s.confirmHolder("h", 0)
	select {
	case <-w.ready:
		t.Fatal("ready after one confirmation of the two needed")
	default:
	}
	s.confirmHolder("h", 1)
	select {
	case <-w.ready:
	default:
		t.Fatal("not ready after two confirmations")
	}
	s.confirmHolder("h", 2) // heard for the first time
	select {
	case <-w.wake:
		t.Fatal("woken by a node heard for the first time after the watcher was ready")
	default:
	}
	s.confirmHolder("h", 0) // reconnected
	select {
	case <-w.wake:
	default:
		t.Fatal("not woken by a node that confirmed the channel again")
	}
}

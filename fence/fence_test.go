package fence_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/distlock/distlock/fence"
)

func TestRegister(t *testing.T) {
	var r fence.Register
	steps := []struct {
		resource string
		token    uint64
		ok       bool
	}{
		{"a", 33, true},
		{"a", 33, true}, // the same holder writes twice: admitted (the guide's >= trap)
		{"a", 34, true},
		{"a", 33, false}, // the paused holder wakes: refused
		{"b", 1, true},   // resources are independent
		{"a", 0, false},  // no grant has token 0
		{"a", 35, true},
	}
	for i, s := range steps {
		err := r.Admit(s.resource, s.token)
		if (err == nil) != s.ok {
			t.Fatalf("step %d: Admit(%q, %d) = %v, want ok=%v", i, s.resource, s.token, err, s.ok)
		}
		if err != nil {
			var se *fence.StaleTokenError
			if !errors.Is(err, fence.ErrStaleToken) || !errors.As(err, &se) || se.Token != s.token {
				t.Fatalf("step %d: error %v is not a StaleTokenError for %d", i, err, s.token)
			}
		}
	}
	if h := r.Highest("a"); h != 35 {
		t.Errorf("Highest(a) = %d, want 35", h)
	}
}

// Do makes check-and-write one step: concurrent writers with random tokens
// never leave the stored value below the highest admitted token.
func TestDoIsAtomic(t *testing.T) {
	var r fence.Register
	var stored uint64
	var wg sync.WaitGroup
	for i := range 64 {
		token := uint64(i*7919%64 + 1)
		wg.Go(func() {
			err := r.Do("x", token, func() error { stored = token; return nil })
			if err != nil && !errors.Is(err, fence.ErrStaleToken) {
				t.Errorf("Do: %v", err)
			}
		})
	}
	wg.Wait()
	if stored != r.Highest("x") {
		t.Errorf("stored %d, highest admitted %d: a stale write landed after a newer one", stored, r.Highest("x"))
	}
}

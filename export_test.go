package distlock

// StaleKids counts the holds that l's lock would end with it although they
// have ended already: each one is a leak for as long as l is held.
func StaleKids(l *Lock) int { return l.h.staleKids() }

// SetStaleKids is StaleKids for a set's own hold.
func SetStaleKids(s *LockSet) int { return s.h.staleKids() }

func (h *hold) staleKids() int {
	h.kidsMu.Lock()
	defer h.kidsMu.Unlock()
	n := 0
	for k := range h.kids {
		if k.ctx.Err() != nil {
			n++
		}
	}
	return n
}

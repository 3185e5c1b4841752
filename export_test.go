package distlock

// StaleKids counts the scopes that l's context would end with it although
// they have ended already: each one is a leak for as long as l is held.
func StaleKids(l *Lock) int { return l.g.scope.staleKids() }

// SetStaleKids is StaleKids for a set's own scope.
func SetStaleKids(s *LockSet) int { return s.scope.staleKids() }

func (s *scope) staleKids() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k := range s.kids {
		if k.over.Load() != nil {
			n++
		}
	}
	return n
}

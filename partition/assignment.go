package partition

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

// Assignment is who owns what in a group, as the service has it when
// read: its live members and, for each unit, the member the assignment
// plans it to and the member holding it now. The two differ while the
// group settles after a change.
type Assignment struct {
	Group   string
	Members []Member    // sorted by ID
	Units   []UnitState // in the order of the Partition's units
}

// Member is one live member of a group.
type Member struct {
	ID      string
	Token   uint64    // the token of its member lock
	Since   time.Time // when it joined, if the backend knows
	Owned   int       // units it holds
	Planned int       // units the assignment plans to it
}

// UnitState is one unit of a group: who it is planned to, and who holds it.
type UnitState struct {
	Name    string
	Planned string // the member the assignment gives it to; "" without members
	Owner   string // the member holding its lock; "" when free, or when the backend stores no owner
	Held    bool   // its lock is held
	Token   uint64 // the token of its lock, when held
}

// Settled reports whether every unit is held by the member it is planned
// to.
func (a Assignment) Settled() bool {
	for _, u := range a.Units {
		if !u.Held || u.Owner != u.Planned {
			return false
		}
	}
	return true
}

// Assignment reads the group's members and the holders of its units, in
// two listings (distlock.Client.List): a backend that cannot list holders
// gives an error matching errors.ErrUnsupported. It is a snapshot: the
// group may have moved on when the caller reads it. A unit's Owner is the
// member id stored with its lock; on a backend that stores no owner it is
// "", and Settled is never true.
func (p *Partition) Assignment(ctx context.Context) (Assignment, error) {
	mhs, err := p.c.List(ctx, p.prefix+"members/")
	if err != nil {
		return Assignment{}, fmt.Errorf("partition: read the members of %q: %w", p.group, err)
	}
	uhs, err := p.c.List(ctx, p.prefix+"units/")
	if err != nil {
		return Assignment{}, fmt.Errorf("partition: read the units of %q: %w", p.group, err)
	}
	a := Assignment{Group: p.group}
	held := map[string]distlock.Holder{}
	for _, h := range uhs {
		unit := strings.TrimPrefix(h.Key, p.prefix+"units/")
		if !strings.Contains(unit, "/") && !h.Shared && !h.HasSlot {
			held[unit] = h
		}
	}
	ids := p.memberIDs(mhs)
	plan := Assign(p.group, ids, p.units)
	owned := map[string]int{}
	planned := map[string]int{}
	for _, u := range p.units {
		h, ok := held[u]
		s := UnitState{Name: u, Planned: plan[u], Held: ok}
		if ok {
			s.Owner, s.Token = h.Owner, h.Token
			owned[h.Owner]++
		}
		planned[plan[u]]++
		a.Units = append(a.Units, s)
	}
	for _, h := range mhs {
		id := strings.TrimPrefix(h.Key, p.prefix+"members/")
		if !slices.Contains(ids, id) {
			continue
		}
		a.Members = append(a.Members, Member{ID: id, Token: h.Token, Since: h.Since, Owned: owned[id], Planned: planned[id]})
	}
	return a, nil
}

package partition

import (
	"hash/fnv"
	"slices"
	"sort"
)

// Assign returns the assignment of units to members that every member of
// group computes from the same lists: a map from each unit to the member
// it is given to, empty when there are no members. It is deterministic and
// does not depend on the order of either list (duplicates count once).
//
// It is rendezvous (highest random weight) hashing with bounded loads:
// each member's share is len(units)/len(members) units, and one more for
// the first len(units)%len(members) members in a hashed order, so that
// shares differ by at most one. Units are placed in a hashed order, each
// on the member of highest weight for it whose share is not yet full.
// When a member joins or leaves, most units keep their member: about
// 1/N of them move, where N is the number of members.
func Assign(group string, members, units []string) map[string]string {
	ms := distinct(members)
	us := distinct(units)
	out := make(map[string]string, len(us))
	if len(ms) == 0 {
		return out
	}
	base, extra := len(us)/len(ms), len(us)%len(ms)
	order := slices.Clone(ms)
	sort.Slice(order, func(i, j int) bool {
		return less(weight(group, order[i], ""), order[i], weight(group, order[j], ""), order[j])
	})
	share := make(map[string]int, len(ms))
	for i, m := range order {
		share[m] = base
		if i < extra {
			share[m]++
		}
	}
	sort.Slice(us, func(i, j int) bool {
		return less(weight(group, "", us[i]), us[i], weight(group, "", us[j]), us[j])
	})
	type ranked struct {
		m string
		w uint64
	}
	rank := make([]ranked, len(ms))
	for _, u := range us {
		for i, m := range ms {
			rank[i] = ranked{m, weight(group, m, u)}
		}
		sort.Slice(rank, func(i, j int) bool { return less(rank[i].w, rank[i].m, rank[j].w, rank[j].m) })
		for _, r := range rank {
			if share[r.m] > 0 {
				share[r.m]--
				out[u] = r.m
				break
			}
		}
	}
	return out
}

// less orders by weight, highest first, and by name to break ties.
func less(wa uint64, a string, wb uint64, b string) bool {
	if wa != wb {
		return wa > wb
	}
	return a < b
}

// distinct returns the sorted distinct values of vs.
func distinct(vs []string) []string {
	out := slices.Clone(vs)
	slices.Sort(out)
	return slices.Compact(out)
}

// weight is the hashed weight of member for unit in group: 64-bit FNV-1a
// of the three, NUL-separated, through SplitMix64's finalizer so that
// names differing in their last byte spread over the whole range.
func weight(group, member, unit string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(group))
	h.Write([]byte{0})
	h.Write([]byte(member))
	h.Write([]byte{0})
	h.Write([]byte(unit))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

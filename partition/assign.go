package partition

import (
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
// When a member joins or leaves, most units keep their member: with many
// units per member, about 1/N of them move, where N is the number of
// members; with few, rounding shares to whole units moves a few more (64
// units going from 16 to 17 members move 9, where the joiner's share is
// 3). It costs O(units × members) hashes of short strings.
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
	share := make([]int, len(ms))
	for i, m := range order {
		j, _ := slices.BinarySearch(ms, m)
		share[j] = base
		if i < extra {
			share[j]++
		}
	}
	uw := make([]uint64, len(us))
	for i, u := range us {
		uw[i] = weight(group, "", u)
	}
	idx := make([]int, len(us))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		return less(uw[idx[a]], us[idx[a]], uw[idx[b]], us[idx[b]])
	})
	// Each member's hash state after "group\0member\0": a weight then
	// hashes only the unit's bytes.
	prefix := make([]uint64, len(ms))
	for i, m := range ms {
		prefix[i] = fnvString(fnvString(fnvString(fnvOffset, group), "\x00"+m), "\x00")
	}
	for _, i := range idx {
		u := us[i]
		best := -1
		var bw uint64
		for j := range ms {
			if share[j] == 0 {
				continue
			}
			w := mix(fnvString(prefix[j], u))
			if best < 0 || less(w, ms[j], bw, ms[best]) {
				best, bw = j, w
			}
		}
		share[best]--
		out[u] = ms[best]
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

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvString continues 64-bit FNV-1a hash state h over s.
func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// weight is the hashed weight of member for unit in group: 64-bit FNV-1a
// of the three, NUL-separated, through SplitMix64's finalizer so that
// names differing in their last byte spread over the whole range.
func weight(group, member, unit string) uint64 {
	return mix(fnvString(fnvString(fnvString(fnvOffset, group), "\x00"+member), "\x00"+unit))
}

// mix is SplitMix64's finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

package shard

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

// scoreBufSize is the size of the stack buffer Score assembles its input
// in; longer inputs are streamed through an xxhash.Digest instead.
const scoreBufSize = 128

// Score returns the rendezvous score of member for key: the xxhash64 of key,
// a zero byte, and member. The zero byte separates the two so that, for
// example, ("ab", "c") and ("a", "bc") score differently. Score does not
// allocate.
func Score(key, member string) uint64 {
	n := len(key) + 1 + len(member)
	if n > 0 && n <= scoreBufSize {
		var buf [scoreBufSize]byte
		b := append(buf[:0], key...)
		b = append(b, 0)
		b = append(b, member...)
		return xxhash.Sum64(b)
	}
	// Long inputs (or a length that overflowed): stream them.
	var d xxhash.Digest
	d.Reset()
	d.WriteString(key)
	d.Write([]byte{0})
	d.WriteString(member)
	return d.Sum64()
}

// Ring is a set of members that decides, by rendezvous (highest random
// weight) hashing, which member owns each key: the owner of a key is the
// member with the highest Score(key, member), ties going to the lexically
// smallest member.
//
// A Ring is an immutable value: no method modifies it, so it is safe for
// concurrent use and may be copied freely. The zero Ring has no members and
// owns nothing.
type Ring struct {
	// members is sorted, duplicate-free, free of empty names, and never
	// modified after NewRing returns.
	members []string
}

// NewRing returns the ring of the given members. Duplicate and empty names
// are dropped and the order of members does not matter. NewRing does not
// keep a reference to members.
func NewRing(members []string) Ring {
	ms := make([]string, 0, len(members))
	for _, m := range members {
		if m != "" {
			ms = append(ms, m)
		}
	}
	slices.Sort(ms)
	ms = slices.Compact(ms)
	if len(ms) == 0 {
		return Ring{}
	}
	return Ring{members: slices.Clip(ms)}
}

// Members returns the members of r in ascending order. The slice is a copy
// that the caller may modify.
func (r Ring) Members() []string {
	return slices.Clone(r.members)
}

// Len returns the number of members of r.
func (r Ring) Len() int {
	return len(r.members)
}

// Contains reports whether member is a member of r.
func (r Ring) Contains(member string) bool {
	_, found := slices.BinarySearch(r.members, member)
	return found
}

// Owner returns the member of r that owns key: the one with the highest
// Score(key, member), ties going to the lexically smallest member. ok is
// false, and owner empty, when r has no members.
func (r Ring) Owner(key string) (owner string, ok bool) {
	i := ownerIndex(r.members, key, Score)
	if i < 0 {
		return "", false
	}
	return r.members[i], true
}

// ownerIndex returns the index in the sorted slice members of the member
// with the highest score(key, member), or -1 if members is empty. On a tie
// the earlier, i.e. lexically smaller, member wins. It takes score as a
// parameter so that tests can force ties; Owner passes Score, and the call
// is small enough to be inlined so that the indirection costs nothing.
func ownerIndex(members []string, key string, score func(key, member string) uint64) int {
	best, bestScore := -1, uint64(0)
	for i, m := range members {
		if s := score(key, m); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// Assign returns the owner of every key in keys, as a map from key to
// owner. The map is empty (but not nil) when r has no members.
func (r Ring) Assign(keys []string) map[string]string {
	if len(r.members) == 0 {
		return map[string]string{}
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		if _, done := out[k]; done {
			continue
		}
		o, _ := r.Owner(k)
		out[k] = o
	}
	return out
}

// Owned returns the keys in keys that member owns in r, in their order in
// keys (duplicates included). It returns nil when member is not a member
// of r.
func (r Ring) Owned(member string, keys []string) []string {
	if !r.Contains(member) {
		return nil
	}
	var out []string
	for _, k := range keys {
		if o, _ := r.Owner(k); o == member {
			out = append(out, k)
		}
	}
	return out
}

// Moved returns the keys in keys whose owner in after differs from their
// owner in before, in their order in keys (duplicates included). A key that
// has an owner in only one of the two rings counts as moved.
func Moved(before, after Ring, keys []string) []string {
	var out []string
	for _, k := range keys {
		ob, okb := before.Owner(k)
		oa, oka := after.Owner(k)
		if ob != oa || okb != oka {
			out = append(out, k)
		}
	}
	return out
}

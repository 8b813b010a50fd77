package shard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/shardsched/shardsched/wire"
)

// refOwner is the brute-force reference for Ring.Owner: it drops empty and
// duplicate names, scores every remaining member with score, and returns
// the highest, ties going to the lexically smallest name.
func refOwner(members []string, key string, score func(key, member string) uint64) (string, bool) {
	seen := map[string]bool{}
	best, bestScore, found := "", uint64(0), false
	for _, m := range members {
		if m == "" || seen[m] {
			continue
		}
		seen[m] = true
		s := score(key, m)
		if !found || s > bestScore || (s == bestScore && m < best) {
			best, bestScore, found = m, s, true
		}
	}
	return best, found
}

// randName returns a random member or key name. Names are drawn from a
// few shapes so that duplicates, empty names, long names and arbitrary
// bytes all occur.
func randName(r *rand.Rand) string {
	switch r.IntN(6) {
	case 0:
		return "shard-" + strconv.Itoa(r.IntN(16)) // frequent duplicates
	case 1:
		return "" // ignored by NewRing
	case 2:
		b := make([]byte, r.IntN(8))
		for i := range b {
			b[i] = byte(r.UintN(256)) // arbitrary bytes, including 0
		}
		return string(b)
	case 3:
		return strings.Repeat("x", scoreBufSize-10+r.IntN(20)) + strconv.Itoa(r.IntN(4)) // around the buffer size
	default:
		return fmt.Sprintf("member-%x", r.Uint32())
	}
}

func randKey(r *rand.Rand) string {
	switch r.IntN(3) {
	case 0:
		return wire.PartitionKey(r.IntN(wire.DefaultPartitions))
	case 1:
		return wire.QueueKey(fmt.Sprintf("queue-%d", r.IntN(1000)))
	default:
		return randName(r)
	}
}

func randMembers(r *rand.Rand, max int) []string {
	ms := make([]string, r.IntN(max+1))
	for i := range ms {
		ms[i] = randName(r)
	}
	return ms
}

// names returns "prefix0".."prefix(n-1)".
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// testKeys returns n keys, half partition keys and half queue keys.
func testKeys(n int) []string {
	keys := make([]string, 0, n)
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			keys = append(keys, wire.PartitionKey(i/2))
		} else {
			keys = append(keys, wire.QueueKey("queue-"+strconv.Itoa(i/2)))
		}
	}
	return keys
}

func TestRingOwnerMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 3000; iter++ {
		raw := randMembers(r, 12)
		ring := NewRing(raw)
		for k := 0; k < 20; k++ {
			key := randKey(r)
			got, ok := ring.Owner(key)
			want, wantOK := refOwner(raw, key, Score)
			if got != want || ok != wantOK {
				t.Fatalf("members %q key %q: Owner = %q, %v; reference = %q, %v", raw, key, got, ok, want, wantOK)
			}
			if ok != (ring.Len() > 0) {
				t.Fatalf("members %q: Owner ok = %v with Len %d", raw, ok, ring.Len())
			}
		}
	}
}

func TestRingExactlyOneOwner(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 500; iter++ {
		ring := NewRing(randMembers(r, 10))
		keys := make([]string, 50)
		for i := range keys {
			keys[i] = randKey(r)
		}
		count := map[string]int{}
		for _, m := range ring.Members() {
			for _, k := range ring.Owned(m, keys) {
				count[k]++
			}
		}
		assign := ring.Assign(keys)
		for _, k := range keys {
			want := 1
			if ring.Len() == 0 {
				want = 0
			}
			// Owned keeps duplicate keys, so divide by the key's multiplicity.
			mult := 0
			for _, k2 := range keys {
				if k2 == k {
					mult++
				}
			}
			if count[k] != want*mult {
				t.Fatalf("ring %q key %q: owned by %d members (multiplicity %d), want %d", ring.Members(), k, count[k]/max(mult, 1), mult, want)
			}
			o, ok := ring.Owner(k)
			if a, in := assign[k]; in != ok || a != o {
				t.Fatalf("ring %q key %q: Assign = %q, %v; Owner = %q, %v", ring.Members(), k, a, in, o, ok)
			}
			if ok && !ring.Contains(o) {
				t.Fatalf("ring %q key %q: owner %q is not a member", ring.Members(), k, o)
			}
		}
		if ring.Len() == 0 && len(assign) != 0 {
			t.Fatalf("empty ring assigned %v", assign)
		}
	}
}

func TestRingOrderAndDuplicateIndependence(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 1000; iter++ {
		raw := randMembers(r, 10)
		// A shuffled copy with extra duplicates and empty names.
		other := slices.Clone(raw)
		for i := r.IntN(5); i > 0 && len(raw) > 0; i-- {
			other = append(other, raw[r.IntN(len(raw))])
		}
		other = append(other, "", "")
		r.Shuffle(len(other), func(i, j int) { other[i], other[j] = other[j], other[i] })

		a, b := NewRing(raw), NewRing(other)
		if !slices.Equal(a.Members(), b.Members()) {
			t.Fatalf("Members differ: %q vs %q", a.Members(), b.Members())
		}
		ms := a.Members()
		if !slices.IsSorted(ms) || len(slices.Compact(slices.Clone(ms))) != len(ms) || slices.Contains(ms, "") {
			t.Fatalf("Members not sorted, unique and non-empty: %q", ms)
		}
		for k := 0; k < 20; k++ {
			key := randKey(r)
			oa, oka := a.Owner(key)
			ob, okb := b.Owner(key)
			if oa != ob || oka != okb {
				t.Fatalf("key %q: owner %q/%v from %q but %q/%v from %q", key, oa, oka, raw, ob, okb, other)
			}
		}
		if m := Moved(a, b, []string{randKey(r), randKey(r)}); len(m) != 0 {
			t.Fatalf("Moved between equal rings: %q", m)
		}
	}
}

func TestRingTieBreak(t *testing.T) {
	members := []string{"a", "b", "c", "d"}
	constant := func(key, member string) uint64 { return 7 }
	if i := ownerIndex(members, "k", constant); i != 0 {
		t.Fatalf("all tied: owner index %d, want 0", i)
	}
	// b and d tie for the maximum: b, the smaller, wins.
	tieBD := func(key, member string) uint64 {
		switch member {
		case "b", "d":
			return math.MaxUint64
		case "c":
			return 5
		}
		return 0
	}
	if i := ownerIndex(members, "k", tieBD); members[i] != "b" {
		t.Fatalf("b/d tie: owner %q, want b", members[i])
	}
	if o, _ := refOwner([]string{"d", "c", "b", "a"}, "k", tieBD); o != "b" {
		t.Fatalf("reference b/d tie: owner %q, want b", o)
	}
	// Zero scores are still owned.
	zero := func(key, member string) uint64 { return 0 }
	if i := ownerIndex(members[2:], "k", zero); i != 0 {
		t.Fatalf("zero scores: owner index %d, want 0", i)
	}
	if i := ownerIndex(nil, "k", zero); i != -1 {
		t.Fatalf("no members: owner index %d, want -1", i)
	}
	// Property: with scores from a tiny range (many ties), ownerIndex over
	// the sorted members agrees with the reference.
	r := rand.New(rand.NewPCG(7, 8))
	for iter := 0; iter < 2000; iter++ {
		ring := NewRing(randMembers(r, 10))
		salt := r.Uint64()
		small := func(key, member string) uint64 { return (xxhash.Sum64String(member) ^ salt) % 3 }
		i := ownerIndex(ring.members, "k", small)
		want, ok := refOwner(ring.members, "k", small)
		if (i >= 0) != ok || (ok && ring.members[i] != want) {
			t.Fatalf("members %q: ownerIndex %d, reference %q/%v", ring.members, i, want, ok)
		}
	}
}

func TestRendezvousMinimalDisruption(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	keys := testKeys(400)
	for iter := 0; iter < 300; iter++ {
		before := NewRing(randMembers(r, 10))
		joiner := randName(r)
		if joiner == "" || before.Contains(joiner) {
			continue
		}
		after := NewRing(append(before.Members(), joiner))

		// Join: every moved key moved to the joiner, and every key the
		// joiner owns moved to it.
		moved := Moved(before, after, keys)
		for _, k := range moved {
			if o, _ := after.Owner(k); o != joiner {
				t.Fatalf("join %q to %q: key %q moved to %q", joiner, before.Members(), k, o)
			}
		}
		if won := after.Owned(joiner, keys); !slices.Equal(won, moved) {
			t.Fatalf("join %q to %q: moved %d keys but joiner owns %d", joiner, before.Members(), len(moved), len(won))
		}

		// Leave: removing any member moves exactly the keys it owned.
		if before.Len() == 0 {
			continue
		}
		ms := before.Members()
		leaver := ms[r.IntN(len(ms))]
		rest := NewRing(slices.DeleteFunc(slices.Clone(ms), func(m string) bool { return m == leaver }))
		moved = Moved(before, rest, keys)
		if owned := before.Owned(leaver, keys); !slices.Equal(owned, moved) {
			t.Fatalf("leave %q from %q: moved %d keys, leaver owned %d", leaver, ms, len(moved), len(owned))
		}
		for _, k := range moved {
			if o, ok := rest.Owner(k); ok && o == leaver {
				t.Fatalf("leave %q: key %q still owned by it", leaver, k)
			}
		}
	}
}

// TestRendezvousMovedFraction measures, over 10,000 keys, the fraction of
// keys that move when a member joins a ring (ending with N members) or
// leaves one (starting with N members), against the ideal 1/N.
func TestRendezvousMovedFraction(t *testing.T) {
	const total = 10000
	keys := testKeys(total)
	check := func(what string, n, moved int) float64 {
		t.Helper()
		frac := float64(moved) / total
		ratio := frac * float64(n)
		if ratio < 0.8 || ratio > 1.2 {
			t.Errorf("%s: moved %d/%d = %.4f, ideal 1/%d = %.4f, moved/ideal %.3f outside [0.8, 1.2]",
				what, moved, total, frac, n, 1/float64(n), ratio)
		}
		return ratio
	}
	for n := 2; n <= 8; n++ {
		all := names("shard-", n)

		// Join: shard-(n-1) joins shard-0..shard-(n-2).
		before, after := NewRing(all[:n-1]), NewRing(all)
		joinMoved := len(Moved(before, after, keys))
		joinRatio := check(fmt.Sprintf("join to %d", n), n, joinMoved)

		// Leave: each member in turn leaves shard-0..shard-(n-1).
		minR, maxR, sum := math.Inf(1), math.Inf(-1), 0.0
		minM, maxM := total, 0
		for i := range all {
			rest := NewRing(slices.Delete(slices.Clone(all), i, i+1))
			m := len(Moved(after, rest, keys))
			ratio := check(fmt.Sprintf("%s leaves %d", all[i], n), n, m)
			minR, maxR, sum = min(minR, ratio), max(maxR, ratio), sum+ratio
			minM, maxM = min(minM, m), max(maxM, m)
		}
		t.Logf("N=%d ideal 1/N=%.4f | join shard-%d: moved %d/%d=%.4f moved/ideal=%.3f | leave (each of %d members): moved %d..%d moved/ideal min %.3f max %.3f mean %.3f",
			n, 1/float64(n), n-1, joinMoved, total, float64(joinMoved)/total, joinRatio,
			n, minM, maxM, minR, maxR, sum/float64(n))
	}
}

// partitionCounts returns how many of the partitions 0..p-1 each member
// of ring owns.
func partitionCounts(ring Ring, p int) map[string]int {
	counts := map[string]int{}
	for _, m := range ring.Members() {
		counts[m] = 0
	}
	for i := 0; i < p; i++ {
		o, _ := ring.Owner(wire.PartitionKey(i))
		counts[o]++
	}
	return counts
}

func minMax(counts map[string]int) (lo, hi int) {
	lo, hi = math.MaxInt, 0
	for _, c := range counts {
		lo, hi = min(lo, c), max(hi, c)
	}
	return lo, hi
}

func TestPartitionBalanceDefault(t *testing.T) {
	ring := NewRing(names("shard-", 8))
	counts := partitionCounts(ring, wire.DefaultPartitions)
	ideal := float64(wire.DefaultPartitions) / 8
	lo, hi := minMax(counts)
	t.Logf("P=%d, 8 members: ideal %.0f, min %d (%+.1f%%), max %d (%+.1f%%)",
		wire.DefaultPartitions, ideal, lo, 100*(float64(lo)/ideal-1), hi, 100*(float64(hi)/ideal-1))
	for _, m := range ring.Members() {
		t.Logf("  %s: %d", m, counts[m])
		if c := float64(counts[m]); c < 0.9*ideal || c > 1.1*ideal {
			t.Errorf("%s owns %d partitions, outside ±10%% of %.0f", m, counts[m], ideal)
		}
	}
	// For reference: the spread at other powers of two.
	for p := 256; p <= 16384; p *= 2 {
		lo, hi := minMax(partitionCounts(ring, p))
		id := float64(p) / 8
		t.Logf("P=%5d: min %d (%+.1f%%) max %d (%+.1f%%)", p, lo, 100*(float64(lo)/id-1), hi, 100*(float64(hi)/id-1))
	}
}

func TestPartitionRangeAndStability(t *testing.T) {
	long := strings.Repeat("node-", 1<<18) // 1.25 MiB
	nodes := []string{"", "a", "node-1", "\x00", "ünïcödé", long}
	parts := []int{1, 2, 3, 7, wire.DefaultPartitions, 1 << 20, math.MaxInt32, math.MaxInt - 1, math.MaxInt}
	for _, n := range nodes {
		for _, p := range parts {
			got := wire.Partition(n, p)
			if got < 0 || got >= p {
				t.Fatalf("wire.Partition(%.20q, %d) = %d out of range", n, p, got)
			}
			if want := int(xxhash.Sum64String(n) % uint64(p)); got != want {
				t.Fatalf("wire.Partition(%.20q, %d) = %d, want xxhash mod P = %d", n, p, got, want)
			}
			if again := wire.Partition(n, p); again != got {
				t.Fatalf("wire.Partition(%.20q, %d) unstable: %d then %d", n, p, got, again)
			}
		}
		for _, p := range []int{0, -1, math.MinInt} {
			if got := wire.Partition(n, p); got != 0 {
				t.Fatalf("wire.Partition(%.20q, %d) = %d, want 0", n, p, got)
			}
		}
		if got := wire.Partition(n, 1); got != 0 {
			t.Fatalf("wire.Partition(%.20q, 1) = %d, want 0", n, got)
		}
	}
	r := rand.New(rand.NewPCG(11, 12))
	for i := 0; i < 10000; i++ {
		n := randName(r)
		p := 1 + r.IntN(100000)
		if got := wire.Partition(n, p); got < 0 || got >= p {
			t.Fatalf("wire.Partition(%q, %d) = %d out of range", n, p, got)
		}
	}
	// Golden values: these must never change, or shards running different
	// builds would disagree about which partition a node is in.
	golden := []struct {
		node string
		p    int
		want int
	}{
		{"", wire.DefaultPartitions, int(0xef46db3751d8e999 % wire.DefaultPartitions)},
		{"node-1", wire.DefaultPartitions, goldenNode1},
	}
	for _, g := range golden {
		if got := wire.Partition(g.node, g.p); got != g.want {
			t.Errorf("wire.Partition(%q, %d) = %d, want %d", g.node, g.p, got, g.want)
		}
	}
}

// goldenNode1 is wire.Partition("node-1", 4096), recorded when the hash was
// fixed.
const goldenNode1 = 1701

func TestPartitionScoreDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	check := func(key, member string) {
		t.Helper()
		want := xxhash.Sum64String(key + "\x00" + member)
		if got := Score(key, member); got != want {
			t.Fatalf("Score(%.20q, %.20q) = %x, want %x", key, member, got, want)
		}
	}
	for i := 0; i < 5000; i++ {
		check(randKey(r), randName(r))
	}
	check("", "")
	huge := strings.Repeat("k", 1<<20)
	check(huge, "m")
	check("k", huge)
	// Around the stack buffer boundary.
	for n := scoreBufSize - 3; n <= scoreBufSize+3; n++ {
		check(strings.Repeat("a", n/2), strings.Repeat("b", n-n/2))
	}
	if Score("ab", "c") == Score("a", "bc") {
		t.Fatal("Score does not separate key and member")
	}
	if got, want := Score("p/0", "shard-0"), uint64(goldenScore); got != want {
		t.Errorf(`Score("p/0", "shard-0") = %#x, want %#x`, got, want)
	}
}

const goldenScore = 0x9ad04884684739ec

func TestPartitionKeyRoundTrip(t *testing.T) {
	for _, i := range []int{0, 1, 9, 10, 4095, 1 << 40, math.MaxInt} {
		k := wire.PartitionKey(i)
		if k != "p/"+strconv.Itoa(i) {
			t.Fatalf("wire.PartitionKey(%d) = %q", i, k)
		}
		kind, name, ok := wire.ParseKey(k)
		if !ok || kind != wire.KindPartition || name != strconv.Itoa(i) {
			t.Fatalf("wire.ParseKey(%q) = %q, %q, %v", k, kind, name, ok)
		}
		if back, err := strconv.Atoi(name); err != nil || back != i {
			t.Fatalf("wire.ParseKey(%q) name %q does not round-trip to %d", k, name, i)
		}
	}
	for _, q := range []string{"default", "a", "team/x", "p/1", "q/", "ünï", "with space", "\x00"} {
		k := wire.QueueKey(q)
		if k != "q/"+q {
			t.Fatalf("wire.QueueKey(%q) = %q", q, k)
		}
		kind, name, ok := wire.ParseKey(k)
		if !ok || kind != wire.KindQueue || name != q {
			t.Fatalf("wire.ParseKey(%q) = %q, %q, %v", k, kind, name, ok)
		}
	}
	// Partition and queue keys never collide.
	if wire.PartitionKey(1) == wire.QueueKey("1") {
		t.Fatal("partition and queue keys collide")
	}
}

func TestPartitionParseKeyRejectsMalformed(t *testing.T) {
	bad := []string{
		"", "p", "q", "p/", "q/", "/", "//", "x/1", "P/1", "Q/a", "pq/1", "p1", "q1", "p//1",
		"p/-1", "p/+1", "p/01", "p/00", "p/1a", "p/a", "p/ 1", "p/1 ", "p/1.0", "p/0x10",
		"p/99999999999999999999999", wire.PartitionKey(-1), wire.PartitionKey(math.MinInt), wire.QueueKey(""),
		"\x00/1", "p\x001", "ü/1",
	}
	for _, k := range bad {
		if kind, name, ok := wire.ParseKey(k); ok || kind != 0 || name != "" {
			t.Errorf("wire.ParseKey(%q) = %q, %q, %v; want rejection", k, kind, name, ok)
		}
	}
	// No input panics, and any accepted key re-encodes to itself.
	r := rand.New(rand.NewPCG(15, 16))
	for i := 0; i < 20000; i++ {
		b := make([]byte, r.IntN(6))
		for j := range b {
			b[j] = "pq/0123456789-+ax\x00"[r.IntN(18)]
		}
		k := string(b)
		kind, name, ok := wire.ParseKey(k)
		if !ok {
			continue
		}
		switch kind {
		case wire.KindPartition:
			n, err := strconv.Atoi(name)
			if err != nil || wire.PartitionKey(n) != k {
				t.Fatalf("wire.ParseKey(%q) accepted partition %q that does not re-encode", k, name)
			}
		case wire.KindQueue:
			if wire.QueueKey(name) != k || name == "" {
				t.Fatalf("wire.ParseKey(%q) accepted queue %q that does not re-encode", k, name)
			}
		default:
			t.Fatalf("wire.ParseKey(%q) returned kind %q", k, kind)
		}
	}
}

func TestRingZeroAndEmpty(t *testing.T) {
	for _, ring := range []Ring{{}, NewRing(nil), NewRing([]string{}), NewRing([]string{"", ""})} {
		if ring.Len() != 0 || len(ring.Members()) != 0 || ring.Contains("") || ring.Contains("a") {
			t.Fatalf("empty ring not empty: %q", ring.Members())
		}
		if o, ok := ring.Owner("p/0"); ok || o != "" {
			t.Fatalf("empty ring Owner = %q, %v", o, ok)
		}
		if a := ring.Assign([]string{"p/0"}); a == nil || len(a) != 0 {
			t.Fatalf("empty ring Assign = %v", a)
		}
		if o := ring.Owned("", []string{"p/0"}); o != nil {
			t.Fatalf("empty ring Owned = %q", o)
		}
	}
	ring := NewRing([]string{"b", "a"})
	if a := ring.Assign(nil); a == nil || len(a) != 0 {
		t.Fatalf("Assign(nil) = %v", a)
	}
	if o := ring.Owned("a", nil); len(o) != 0 {
		t.Fatalf("Owned(nil) = %q", o)
	}
	if o := ring.Owned("c", []string{"p/0"}); o != nil {
		t.Fatalf("Owned by non-member = %q", o)
	}
	// Everything moves to or from an empty ring.
	keys := []string{"p/0", "q/x"}
	if m := Moved(Ring{}, ring, keys); !slices.Equal(m, keys) {
		t.Fatalf("Moved(empty, ring) = %q", m)
	}
	if m := Moved(ring, Ring{}, keys); !slices.Equal(m, keys) {
		t.Fatalf("Moved(ring, empty) = %q", m)
	}
	if m := Moved(Ring{}, Ring{}, keys); len(m) != 0 {
		t.Fatalf("Moved(empty, empty) = %q", m)
	}
}

func TestRingImmutable(t *testing.T) {
	in := []string{"c", "a", "b"}
	ring := NewRing(in)
	in[0] = "z"
	ms := ring.Members()
	ms[0] = "y"
	if got := ring.Members(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("ring changed through its input or Members: %q", got)
	}
	// Appending to Members must not write into the ring's backing array.
	_ = append(ring.Members(), "w")
	grown := append(ring.members, "w") // capacity is clipped, so this copies
	grown[0] = "v"
	if got := ring.Members(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("ring changed through append: %q", got)
	}
}

func TestRingConcurrentUse(t *testing.T) {
	ring := NewRing(names("shard-", 8))
	keys := testKeys(1000)
	want := ring.Assign(keys)
	done := make(chan map[string]string)
	for g := 0; g < 4; g++ {
		go func() { done <- ring.Assign(keys) }()
	}
	for g := 0; g < 4; g++ {
		if got := <-done; len(got) != len(want) {
			t.Fatal("concurrent Assign differs")
		} else {
			for k, o := range want {
				if got[k] != o {
					t.Fatalf("concurrent Assign: key %q owner %q vs %q", k, got[k], o)
				}
			}
		}
	}
}

func TestRingOwnerNoAllocs(t *testing.T) {
	ring := NewRing(names("shard-", 8))
	key := wire.PartitionKey(1234)
	if n := testing.AllocsPerRun(100, func() { ring.Owner(key) }); n != 0 {
		t.Errorf("Owner allocates %.1f times per call", n)
	}
	long := strings.Repeat("k", 4*scoreBufSize)
	if n := testing.AllocsPerRun(100, func() { Score(long, "shard-0") }); n != 0 {
		t.Errorf("Score on long input allocates %.1f times per call", n)
	}
}

func BenchmarkOwner(b *testing.B) {
	ring := NewRing(names("shard-", 8))
	keys := make([]string, wire.DefaultPartitions)
	for i := range keys {
		keys[i] = wire.PartitionKey(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ring.Owner(keys[i%len(keys)])
		i++
	}
}

func BenchmarkScore(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Score("p/1234", "shard-3")
	}
}

func BenchmarkPartition(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		wire.Partition("ip-10-0-12-34.ec2.internal", wire.DefaultPartitions)
	}
}

// An advertise address without an advertise port advertises the bind port
// (deploy/ sets --gossip-advertise-addr to the pod IP and no port).
func TestAdvertisePortDefaultsToBindPort(t *testing.T) {
	for _, tc := range []struct{ bind, adv, want int }{{7946, 0, 7946}, {7946, 8000, 8000}, {0, 0, 0}} {
		s := &Shard{cfg: Config{Name: "s", BindAddr: "127.0.0.1", BindPort: tc.bind, AdvertiseAddr: "10.0.0.7", AdvertisePort: tc.adv}}
		c, err := s.memberlistConfig()
		if err != nil {
			t.Fatal(err)
		}
		if c.AdvertiseAddr != "10.0.0.7" || c.AdvertisePort != tc.want {
			t.Errorf("bind %d advertise %d: memberlist advertises %s:%d, want port %d", tc.bind, tc.adv, c.AdvertiseAddr, c.AdvertisePort, tc.want)
		}
	}
}

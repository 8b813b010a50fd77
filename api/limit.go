package api

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/fxamacker/cbor/v2"
)

// Limit is a per-dimension upper bound, as a queue's capability is: a
// dimension that is not set is unlimited. A Limit is immutable.
type Limit struct {
	set map[string]int64
}

// Unlimited is the Limit with no dimension set.
func Unlimited() Limit { return Limit{} }

// NewLimit builds a Limit from dimension → amount (cpu in milli-CPU, memory in
// bytes). A negative amount is an error naming the dimension.
func NewLimit(dims map[string]int64) (Limit, error) {
	l := Limit{set: make(map[string]int64, len(dims))}
	for d, v := range dims {
		if d == "" {
			return Limit{}, fmt.Errorf("limit: empty resource name")
		}
		if v < 0 {
			return Limit{}, fmt.Errorf("%w: limit %s is %s", ErrNegative, d, FormatQuantity(d, v))
		}
		l.set[d] = v
	}
	return l, nil
}

// LimitOf returns a Limit that sets cpu, memory and every scalar present in r.
func LimitOf(r Resource) Limit {
	l := Limit{set: map[string]int64{CPU: r.MilliCPU, Memory: r.Memory}}
	for k, v := range r.Scalars {
		l.set[k] = v
	}
	return l
}

// Get returns the bound of one dimension and whether it is set.
func (l Limit) Get(dim string) (int64, bool) {
	v, ok := l.set[dim]
	return v, ok
}

// Dims returns the set dimensions, sorted.
func (l Limit) Dims() []string {
	out := make([]string, 0, len(l.set))
	for k := range l.set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// IsUnlimited reports whether no dimension is set.
func (l Limit) IsUnlimited() bool { return len(l.set) == 0 }

// Map returns a copy of the set dimensions.
func (l Limit) Map() map[string]int64 {
	out := make(map[string]int64, len(l.set))
	for k, v := range l.set {
		out[k] = v
	}
	return out
}

// Excess returns the first set dimension (in sorted order) where usage is
// above the limit, and by how much; ok is false when usage is within the limit.
func (l Limit) Excess(usage Resource) (dim string, over int64, ok bool) {
	for _, d := range l.Dims() {
		if u := usage.Get(d); u > l.set[d] {
			return d, u - l.set[d], true
		}
	}
	return "", 0, false
}

// String renders the set dimensions, or "unlimited".
func (l Limit) String() string {
	if l.IsUnlimited() {
		return "unlimited"
	}
	parts := make([]string, 0, len(l.set))
	for _, d := range l.Dims() {
		parts = append(parts, d+"="+FormatQuantity(d, l.set[d]))
	}
	return strings.Join(parts, ",")
}

// MarshalJSON encodes the set dimensions as an object; unlimited is {}.
func (l Limit) MarshalJSON() ([]byte, error) {
	m := l.set
	if m == nil {
		m = map[string]int64{}
	}
	return json.Marshal(m)
}

// MarshalCBOR encodes the set dimensions as a map, as MarshalJSON does (the
// coordinator's batches travel as CBOR between participants that read it).
func (l Limit) MarshalCBOR() ([]byte, error) {
	m := l.set
	if m == nil {
		m = map[string]int64{}
	}
	return cbor.Marshal(m)
}

// UnmarshalCBOR decodes a map of dimension → amount, rejecting negatives.
func (l *Limit) UnmarshalCBOR(b []byte) error {
	var m map[string]int64
	if err := cbor.Unmarshal(b, &m); err != nil {
		return err
	}
	return l.setFrom(m)
}

// UnmarshalJSON decodes an object of dimension → amount, rejecting negatives.
func (l *Limit) UnmarshalJSON(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	return l.setFrom(m)
}

// setFrom makes l the limit of m's dimensions (unlimited when m is empty),
// rejecting negatives.
func (l *Limit) setFrom(m map[string]int64) error {
	nl, err := NewLimit(m)
	if err != nil {
		return err
	}
	if len(nl.set) == 0 {
		nl.set = nil
	}
	*l = nl
	return nil
}

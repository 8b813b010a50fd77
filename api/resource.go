package api

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Dimension names. CPU is counted in milli-CPU, memory in bytes; every other
// dimension (nvidia.com/gpu, pods, ...) is a named scalar counted in units.
const (
	CPU    = "cpu"
	Memory = "memory"
	Pods   = "pods"
)

// ErrUnderflow is wrapped by every error that reports a subtraction going
// below zero; ErrOverflow by every error that reports int64 overflow.
var (
	ErrUnderflow = errors.New("resource underflow")
	ErrOverflow  = errors.New("resource overflow")
	ErrNegative  = errors.New("negative resource quantity")
)

// Resource is an amount of compute: milli-CPU, memory bytes and named scalars.
//
// A Resource is a value: no method mutates its receiver or its argument, and
// the Scalars map of a result is never shared with an operand. A scalar that
// is absent and a scalar that is zero mean the same thing; results never keep
// zero scalars. Arithmetic is checked: it reports overflow and underflow as
// errors and never panics.
type Resource struct {
	MilliCPU int64
	Memory   int64
	Scalars  map[string]int64
}

// NewResource returns a Resource with the given amounts. The scalars map is
// copied; zero entries are dropped.
func NewResource(milliCPU, memory int64, scalars map[string]int64) Resource {
	r := Resource{MilliCPU: milliCPU, Memory: memory}
	for k, v := range scalars {
		if v != 0 {
			if r.Scalars == nil {
				r.Scalars = make(map[string]int64, len(scalars))
			}
			r.Scalars[k] = v
		}
	}
	return r
}

// Get returns the amount of one dimension (0 when absent).
func (r Resource) Get(dim string) int64 {
	switch dim {
	case CPU:
		return r.MilliCPU
	case Memory:
		return r.Memory
	default:
		return r.Scalars[dim]
	}
}

// With returns a copy of r with one dimension set.
func (r Resource) With(dim string, v int64) Resource {
	out := r.Clone()
	switch dim {
	case CPU:
		out.MilliCPU = v
	case Memory:
		out.Memory = v
	default:
		if v == 0 {
			delete(out.Scalars, dim)
			if len(out.Scalars) == 0 {
				out.Scalars = nil
			}
			return out
		}
		if out.Scalars == nil {
			out.Scalars = map[string]int64{}
		}
		out.Scalars[dim] = v
	}
	return out
}

// Dims returns the dimensions of r that are non-zero, sorted, cpu and memory first.
func (r Resource) Dims() []string {
	var out []string
	if r.MilliCPU != 0 {
		out = append(out, CPU)
	}
	if r.Memory != 0 {
		out = append(out, Memory)
	}
	return append(out, sortedKeys(r.Scalars)...)
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// unionDims returns every dimension that is non-zero in a or b, cpu and memory always included.
func unionDims(a, b Resource) []string {
	seen := map[string]bool{}
	out := []string{CPU, Memory}
	for _, m := range []map[string]int64{a.Scalars, b.Scalars} {
		for _, k := range sortedKeys(m) {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out[2:])
	return out
}

// Clone returns a deep copy.
func (r Resource) Clone() Resource {
	return NewResource(r.MilliCPU, r.Memory, r.Scalars)
}

// IsZero reports whether every dimension is zero.
func (r Resource) IsZero() bool {
	if r.MilliCPU != 0 || r.Memory != 0 {
		return false
	}
	for _, v := range r.Scalars {
		if v != 0 {
			return false
		}
	}
	return true
}

// Validate reports the first negative dimension, if any.
func (r Resource) Validate() error {
	for _, d := range unionDims(r, Resource{}) {
		if v := r.Get(d); v < 0 {
			return fmt.Errorf("%w: %s is %s", ErrNegative, d, FormatQuantity(d, v))
		}
	}
	return nil
}

// Add returns r + o, or an error naming the dimension that overflows int64.
func (r Resource) Add(o Resource) (Resource, error) {
	cpu, ok1 := addExact(r.MilliCPU, o.MilliCPU)
	mem, ok2 := addExact(r.Memory, o.Memory)
	out := Resource{MilliCPU: cpu, Memory: mem}
	ok := ok1 && ok2
	if ok && len(r.Scalars)+len(o.Scalars) > 0 {
		out.Scalars, ok = combineScalars(r.Scalars, o.Scalars, addExact)
	}
	if !ok {
		return r.addByDim(o) // the error, named as the first dimension in order
	}
	return out, nil
}

// addByDim is Add dimension by dimension in Dims order (cpu, memory, then
// scalars sorted): the error names the first that overflows.
func (r Resource) addByDim(o Resource) (Resource, error) {
	out := Resource{}
	for _, d := range unionDims(r, o) {
		a, b := r.Get(d), o.Get(d)
		s, ok := addExact(a, b)
		if !ok {
			return Resource{}, fmt.Errorf("%w: %s %d + %d", ErrOverflow, d, a, b)
		}
		out = out.With(d, s)
	}
	return out, nil
}

// addExact is a + b and whether it did not overflow.
func addExact(a, b int64) (int64, bool) {
	s := a + b
	return s, !((b > 0 && s < a) || (b < 0 && s > a))
}

// subExact is a - b and whether it neither overflowed nor went below zero.
func subExact(a, b int64) (int64, bool) {
	s := a - b
	return s, !((b > 0 && s > a) || (b < 0 && s < a)) && s >= 0
}

// combineScalars applies op to every scalar of a and b (absent = 0) into a
// new map without zero entries (nil if none), and whether op held for all.
func combineScalars(a, b map[string]int64, op func(x, y int64) (int64, bool)) (map[string]int64, bool) {
	out := make(map[string]int64, max(len(a), len(b)))
	for k, v := range a {
		s, ok := op(v, b[k])
		if !ok {
			return nil, false
		}
		if s != 0 {
			out[k] = s
		}
	}
	for k, v := range b {
		if _, done := a[k]; done {
			continue
		}
		s, ok := op(0, v)
		if !ok {
			return nil, false
		}
		if s != 0 {
			out[k] = s
		}
	}
	if len(out) == 0 {
		return nil, true
	}
	return out, true
}

// Sub returns r - o. If any dimension would go below zero it returns an error
// wrapping ErrUnderflow that names every such dimension and by how much, and
// the returned Resource holds the unclamped difference (negative where short)
// so callers can report or rebuild; it never panics.
func (r Resource) Sub(o Resource) (Resource, error) {
	cpu, ok1 := subExact(r.MilliCPU, o.MilliCPU)
	mem, ok2 := subExact(r.Memory, o.Memory)
	out := Resource{MilliCPU: cpu, Memory: mem}
	ok := ok1 && ok2
	if ok && len(r.Scalars)+len(o.Scalars) > 0 {
		out.Scalars, ok = combineScalars(r.Scalars, o.Scalars, subExact)
	}
	if !ok {
		return r.subByDim(o) // short or overflowing: the full report
	}
	return out, nil
}

// subByDim is Sub dimension by dimension in Dims order, naming every
// dimension that goes below zero.
func (r Resource) subByDim(o Resource) (Resource, error) {
	out := Resource{}
	var short []string
	for _, d := range unionDims(r, o) {
		a, b := r.Get(d), o.Get(d)
		s := a - b
		if (b > 0 && s > a) || (b < 0 && s < a) {
			return Resource{}, fmt.Errorf("%w: %s %d - %d", ErrOverflow, d, a, b)
		}
		if s < 0 {
			short = append(short, fmt.Sprintf("%s short by %s", d, FormatQuantity(d, -s)))
		}
		out = out.With(d, s)
	}
	if len(short) > 0 {
		return out, fmt.Errorf("%w: %s", ErrUnderflow, strings.Join(short, ", "))
	}
	return out, nil
}

// LessEqual reports whether every dimension of r is ≤ the same dimension of o.
// A scalar absent from o counts as zero in o, so r with 1 GPU is not
// LessEqual to o with no GPU entry.
func (r Resource) LessEqual(o Resource) bool {
	if r.MilliCPU > o.MilliCPU || r.Memory > o.Memory {
		return false
	}
	for k, v := range r.Scalars {
		if v > o.Scalars[k] {
			return false
		}
	}
	for k, v := range o.Scalars {
		if _, seen := r.Scalars[k]; !seen && v < 0 {
			return false
		}
	}
	return true
}

// Fits reports whether r fits into free: the same as r.LessEqual(free). A
// scalar r does not ask for always fits; a scalar r asks for and free lacks
// never fits.
func (r Resource) Fits(free Resource) bool { return r.LessEqual(free) }

// Equal reports whether r and o are equal in every dimension.
func (r Resource) Equal(o Resource) bool {
	if r.MilliCPU != o.MilliCPU || r.Memory != o.Memory {
		return false
	}
	for k, v := range r.Scalars {
		if v != o.Scalars[k] {
			return false
		}
	}
	for k, v := range o.Scalars {
		if v != r.Scalars[k] {
			return false
		}
	}
	return true
}

// Max returns the dimension-wise maximum.
func (r Resource) Max(o Resource) Resource {
	out := Resource{}
	for _, d := range unionDims(r, o) {
		out = out.With(d, max(r.Get(d), o.Get(d)))
	}
	return out
}

// ScaleChecked returns r multiplied by n, or an overflow error.
func (r Resource) ScaleChecked(n int64) (Resource, error) {
	out := Resource{}
	for _, d := range unionDims(r, Resource{}) {
		v := r.Get(d)
		if v != 0 && n != 0 && (v > math.MaxInt64/abs(n) || v < -math.MaxInt64/abs(n)) {
			return Resource{}, fmt.Errorf("%w: %s %d × %d", ErrOverflow, d, v, n)
		}
		out = out.With(d, v*n)
	}
	return out, nil
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// String renders r as "cpu=1500m,memory=4Gi,nvidia.com/gpu=1".
func (r Resource) String() string {
	dims := r.Dims()
	if len(dims) == 0 {
		return "{}"
	}
	parts := make([]string, 0, len(dims))
	for _, d := range dims {
		parts = append(parts, d+"="+FormatQuantity(d, r.Get(d)))
	}
	return strings.Join(parts, ",")
}

// FormatQuantity renders one dimension's amount for humans: CPU in cores or
// milli-cores, memory with a binary suffix where exact, scalars as integers.
func FormatQuantity(dim string, v int64) string {
	switch dim {
	case CPU:
		if v%1000 == 0 {
			return fmt.Sprintf("%d", v/1000)
		}
		return fmt.Sprintf("%dm", v)
	case Memory:
		for _, u := range []struct {
			s string
			n int64
		}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
			if v != 0 && v%u.n == 0 {
				return fmt.Sprintf("%d%s", v/u.n, u.s)
			}
		}
		return fmt.Sprintf("%d", v)
	default:
		return fmt.Sprintf("%d", v)
	}
}

package cache

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/shardsched/shardsched/api"
)

// Book arithmetic. The books' Used and Releasing are kept in place (their
// scalar maps belong to the cache alone and are copied into snapshots), with
// saturating int64 arithmetic that reports, instead of panicking, when a
// dimension leaves the range it should stay in. Books whose arithmetic was
// not exact are recomputed from their tasks.

// sanitize returns what the books count for a request: its positive
// dimensions. A negative quantity is malformed input; booking it would make
// Used shrink, so it counts as zero. When r is already sane the result is
// r itself, sharing its scalars map: callers never mutate either.
func sanitize(r api.Resource) api.Resource {
	if sane(r) {
		// A copy of the scalars map per task was a tenth of the heap of
		// a simulated 100k-core run.
		return r
	}
	out := api.Resource{MilliCPU: max(r.MilliCPU, 0), Memory: max(r.Memory, 0)}
	for k, v := range r.Scalars {
		if v > 0 {
			if out.Scalars == nil {
				out.Scalars = make(map[string]int64, len(r.Scalars))
			}
			out.Scalars[k] = v
		}
	}
	return out
}

// sane reports whether sanitize would leave r as it is.
func sane(r api.Resource) bool {
	if r.MilliCPU < 0 || r.Memory < 0 {
		return false
	}
	for _, v := range r.Scalars {
		if v <= 0 {
			return false
		}
	}
	return true
}

// satAdd returns a+b clamped to the int64 range, and whether it was exact.
func satAdd(a, b int64) (int64, bool) {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64, false
	case b < 0 && s > a:
		return math.MinInt64, false
	}
	return s, true
}

// addInto adds r (sign > 0) or subtracts it (sign < 0) from *dst in place.
// r must be sanitized (no negative dimension) and dst's scalars map must
// belong to the caller alone. It reports false when a dimension saturated or
// would have gone below zero (it is then clamped to zero): the books are no
// longer exact and must be recomputed.
func addInto(dst *api.Resource, r api.Resource, sign int) bool {
	ok := true
	add := func(cur, v int64) int64 {
		if sign < 0 {
			v = -v // v ≥ 0, so −v never overflows
		}
		s, exact := satAdd(cur, v)
		if !exact {
			ok = false
		}
		if s < 0 {
			ok = false
			s = 0
		}
		return s
	}
	dst.MilliCPU = add(dst.MilliCPU, r.MilliCPU)
	dst.Memory = add(dst.Memory, r.Memory)
	for k, v := range r.Scalars {
		s := add(dst.Scalars[k], v)
		if s == 0 {
			delete(dst.Scalars, k)
			continue
		}
		if dst.Scalars == nil {
			dst.Scalars = make(map[string]int64, len(r.Scalars))
		}
		dst.Scalars[k] = s
	}
	if len(dst.Scalars) == 0 {
		dst.Scalars = nil
	}
	return ok
}

// exceeds reports whether used (with this many tasks) does not fit alloc in
// some dimension. A scalar absent from alloc counts as zero there, as in
// api.Resource.Fits. The pod count is checked against the "pods" scalar even
// when the tasks' requests do not carry "pods".
func exceeds(used, alloc api.Resource, tasks int) bool {
	if used.MilliCPU > alloc.MilliCPU || used.Memory > alloc.Memory {
		return true
	}
	for k, v := range used.Scalars {
		if v > alloc.Scalars[k] {
			return true
		}
	}
	for k, v := range alloc.Scalars {
		if used.Scalars[k] > v {
			return true
		}
	}
	if ap := alloc.Get(api.Pods); ap > 0 && int64(tasks) > ap {
		return true
	}
	return false
}

// overflowReason names every dimension in which used exceeds alloc, with the
// amounts, or returns "" when used fits.
func overflowReason(used, alloc api.Resource, tasks int) string {
	if !exceeds(used, alloc, tasks) {
		return ""
	}
	dims := []string{api.CPU, api.Memory}
	var scalars []string
	for k := range used.Scalars {
		scalars = append(scalars, k)
	}
	for k := range alloc.Scalars {
		if _, dup := used.Scalars[k]; !dup {
			scalars = append(scalars, k)
		}
	}
	sort.Strings(scalars)
	dims = append(dims, scalars...)
	var parts []string
	for _, d := range dims {
		if u, a := used.Get(d), alloc.Get(d); u > a {
			parts = append(parts, fmt.Sprintf("%s: used %s > allocatable %s",
				d, api.FormatQuantity(d, u), api.FormatQuantity(d, a)))
		}
	}
	if ap := alloc.Get(api.Pods); ap > 0 && int64(tasks) > ap && used.Get(api.Pods) <= ap {
		parts = append(parts, fmt.Sprintf("%s: %d tasks > allocatable %d", api.Pods, tasks, ap))
	}
	return strings.Join(parts, "; ")
}

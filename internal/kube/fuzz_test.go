package kube

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/shardsched/shardsched/api"
)

var fuzzResourceNames = []string{"cpu", "memory", gpu, "pods"}

// FuzzParseQuantity checks that ParseQuantity never panics, never returns a
// negative amount, classifies its errors, and rounds up consistently with
// Kubernetes' own Quantity.ScaledValue wherever that is exact.
func FuzzParseQuantity(f *testing.F) {
	for i, s := range []string{"1", "500m", "0.0001", "1Gi", "1E30", "-1", "9223372036854775807", "0", "1.5", "1e-400", "100n", "8Ei", ""} {
		f.Add(uint8(i), s)
	}
	f.Fuzz(func(t *testing.T, which uint8, s string) {
		name := fuzzResourceNames[int(which)%len(fuzzResourceNames)]
		if hugeNonZeroExponent(s) {
			// Upstream, not ours: resource.ParseQuantity itself computes
			// 10^|exponent| for such input ("1e-999999999" runs for minutes
			// and exhausts memory inside inf.Dec.Round), see
			// kubernetes/kubernetes#141306. Zero mantissas are still fuzzed.
			t.Skip("huge exponent on a non-zero mantissa hangs k8s ParseQuantity")
		}
		v, err := ParseQuantity(name, s)
		q, qerr := resource.ParseQuantity(s)
		if qerr != nil {
			if err == nil {
				t.Fatalf("ParseQuantity(%q, %q) = %d, but Kubernetes rejects it: %v", name, s, v, qerr)
			}
			return
		}
		if err != nil {
			switch {
			case q.Sign() < 0:
				if !errors.Is(err, api.ErrNegative) {
					t.Fatalf("ParseQuantity(%q, %q): negative quantity error %v does not wrap ErrNegative", name, s, err)
				}
			case errors.Is(err, api.ErrOverflow):
				// Must really be beyond int64 (in milli for cpu).
				approx := q.AsApproximateFloat64()
				if name == "cpu" {
					approx *= 1000
				}
				if approx < 9e18 {
					t.Fatalf("ParseQuantity(%q, %q) reports overflow for %g", name, s, approx)
				}
			default:
				t.Fatalf("ParseQuantity(%q, %q): unexpected error %v", name, s, err)
			}
			return
		}
		if v < 0 {
			t.Fatalf("ParseQuantity(%q, %q) = %d < 0", name, s, v)
		}
		if q.Sign() < 0 {
			t.Fatalf("ParseQuantity(%q, %q) = %d for a negative quantity", name, s, v)
		}
		scale := resource.Scale(0)
		if name == "cpu" {
			scale = resource.Milli
		}
		// ScaledValue rounds up too; trust it only well inside int64.
		if v < math.MaxInt64/1024 {
			if want := q.ScaledValue(scale); want != v {
				t.Fatalf("ParseQuantity(%q, %q) = %d, Quantity.ScaledValue = %d", name, s, v, want)
			}
		}
		if name == "cpu" {
			// Whole units and milli-units of the same quantity must agree:
			// ceil(x) - 1 < ceil(1000x)/1000 ≤ ceil(x).
			units, err := ParseQuantity("pods", s)
			if err != nil {
				t.Fatalf("%q parses as %d milli-CPU but not as a count: %v", s, v, err)
			}
			if units < math.MaxInt64/1000 && (v > units*1000 || v <= (units-1)*1000) {
				t.Fatalf("%q: %d milli-CPU inconsistent with %d units", s, v, units)
			}
		}
	})
}

// hugeNonZeroExponent reports whether s looks like a non-zero mantissa with a
// decimal exponent beyond ±10000.
func hugeNonZeroExponent(s string) bool {
	i := strings.LastIndexAny(s, "eE")
	if i < 0 {
		return false
	}
	exp, err := strconv.ParseInt(s[i+1:], 10, 64)
	if err != nil || (exp >= -10000 && exp <= 10000) {
		return false
	}
	return strings.ContainsAny(s[:i], "123456789")
}

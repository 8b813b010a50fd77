package api

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

func mustLimit(t testing.TB, dims map[string]int64) Limit {
	t.Helper()
	l, err := NewLimit(dims)
	if err != nil {
		t.Fatalf("NewLimit(%v): %v", dims, err)
	}
	return l
}

func TestNewLimit(t *testing.T) {
	tests := []struct {
		name        string
		dims        map[string]int64
		wantErr     bool
		wantNeg     bool
		contains    []string
		wantDims    []string
		unlimited   bool
		wantStrings string
	}{
		{name: "nil is unlimited", dims: nil, unlimited: true, wantDims: []string{}, wantStrings: "unlimited"},
		{name: "empty is unlimited", dims: map[string]int64{}, unlimited: true, wantDims: []string{}, wantStrings: "unlimited"},
		{name: "zero is a bound", dims: map[string]int64{gpu: 0}, wantDims: []string{gpu}, wantStrings: "nvidia.com/gpu=0"},
		{
			name: "several", dims: map[string]int64{gpu: 2, CPU: 4000, Memory: 8 << 30},
			wantDims: []string{CPU, Memory, gpu}, wantStrings: "cpu=4,memory=8Gi,nvidia.com/gpu=2",
		},
		{name: "negative cpu", dims: map[string]int64{CPU: -1}, wantErr: true, wantNeg: true, contains: []string{"cpu"}},
		{name: "negative scalar", dims: map[string]int64{CPU: 1, gpu: -2}, wantErr: true, wantNeg: true, contains: []string{gpu}},
		{name: "empty name", dims: map[string]int64{"": 1}, wantErr: true, contains: []string{"empty"}},
		{name: "empty name with zero", dims: map[string]int64{CPU: 1, "": 0}, wantErr: true, contains: []string{"empty"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLimit(tc.dims)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("NewLimit(%v) = %v, want error", tc.dims, l)
				}
				if tc.wantNeg != errors.Is(err, ErrNegative) {
					t.Errorf("errors.Is(%v, ErrNegative) = %v, want %v", err, !tc.wantNeg, tc.wantNeg)
				}
				for _, s := range tc.contains {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("NewLimit(%v): %v", tc.dims, err)
			}
			if l.IsUnlimited() != tc.unlimited {
				t.Errorf("IsUnlimited() = %v, want %v", l.IsUnlimited(), tc.unlimited)
			}
			if got := l.Dims(); !reflect.DeepEqual(got, tc.wantDims) {
				t.Errorf("Dims() = %#v, want %#v", got, tc.wantDims)
			}
			for d, v := range tc.dims {
				if got, ok := l.Get(d); !ok || got != v {
					t.Errorf("Get(%q) = %d, %v; want %d, true", d, got, ok, v)
				}
			}
			if got := l.String(); got != tc.wantStrings {
				t.Errorf("String() = %q, want %q", got, tc.wantStrings)
			}
		})
	}
}

func TestLimitIsImmutable(t *testing.T) {
	in := map[string]int64{CPU: 1000}
	l := mustLimit(t, in)
	in[CPU] = 5
	in[gpu] = 1
	if v, ok := l.Get(CPU); !ok || v != 1000 {
		t.Errorf("NewLimit shares the caller's map: cpu = %d, %v", v, ok)
	}
	if _, ok := l.Get(gpu); ok {
		t.Error("NewLimit shares the caller's map: gpu became set")
	}
	m := l.Map()
	m[CPU] = 1
	m[Memory] = 1
	if v, _ := l.Get(CPU); v != 1000 {
		t.Errorf("Map() returned the internal map: cpu = %d", v)
	}
	if _, ok := l.Get(Memory); ok {
		t.Error("Map() returned the internal map: memory became set")
	}
}

func TestLimitGetUnset(t *testing.T) {
	for _, l := range []Limit{{}, Unlimited(), mustLimit(t, map[string]int64{CPU: 1})} {
		if v, ok := l.Get(gpu); ok || v != 0 {
			t.Errorf("%v.Get(gpu) = %d, %v; want 0, false", l, v, ok)
		}
	}
}

func TestLimitExcess(t *testing.T) {
	full := map[string]int64{CPU: 4000, Memory: 8 << 30, gpu: 2}
	tests := []struct {
		name     string
		limit    map[string]int64
		usage    Resource
		wantDim  string
		wantOver int64
	}{
		{name: "unlimited never exceeded", limit: nil, usage: res(1<<40, 1<<60, gpu, 1000)},
		{name: "within", limit: full, usage: res(4000, 8<<30, gpu, 2)},
		{name: "zero usage", limit: full, usage: Resource{}},
		{name: "cpu over", limit: full, usage: res(4500, 0), wantDim: CPU, wantOver: 500},
		{name: "memory over", limit: full, usage: res(1000, 9<<30), wantDim: Memory, wantOver: 1 << 30},
		{name: "scalar over", limit: full, usage: res(0, 0, gpu, 3), wantDim: gpu, wantOver: 1},
		{name: "first in sorted order: cpu before gpu", limit: full, usage: res(5000, 0, gpu, 9), wantDim: CPU, wantOver: 1000},
		{name: "first in sorted order: memory before gpu", limit: full, usage: res(0, 10<<30, gpu, 9), wantDim: Memory, wantOver: 2 << 30},
		{
			name:  "sorted by name, not cpu first",
			limit: map[string]int64{CPU: 1000, "a.io/x": 1, "z.io/y": 1},
			usage: res(2000, 0, "a.io/x", 5, "z.io/y", 5), wantDim: "a.io/x", wantOver: 4,
		},
		{name: "unset dimension unlimited", limit: map[string]int64{CPU: 1000}, usage: res(1000, 1<<50, gpu, 64)},
		{name: "unset scalar while set one is over", limit: map[string]int64{foo: 1}, usage: res(1<<20, 1<<50, gpu, 64, foo, 2), wantDim: foo, wantOver: 1},
		{name: "zero bound", limit: map[string]int64{gpu: 0}, usage: res(0, 0, gpu, 1), wantDim: gpu, wantOver: 1},
		{name: "zero bound, none used", limit: map[string]int64{gpu: 0}, usage: res(1000, 1<<30)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := mustLimit(t, tc.limit)
			dim, over, ok := l.Excess(tc.usage)
			if wantOK := tc.wantDim != ""; ok != wantOK || dim != tc.wantDim || over != tc.wantOver {
				t.Errorf("%v.Excess(%v) = %q, %d, %v; want %q, %d, %v", l, tc.usage, dim, over, ok, tc.wantDim, tc.wantOver, wantOK)
			}
		})
	}
}

func TestLimitOf(t *testing.T) {
	l := LimitOf(res(2000, 0, gpu, 1))
	for d, want := range map[string]int64{CPU: 2000, Memory: 0, gpu: 1} {
		if v, ok := l.Get(d); !ok || v != want {
			t.Errorf("LimitOf: Get(%q) = %d, %v; want %d, true", d, v, ok, want)
		}
	}
	if _, ok := l.Get(foo); ok {
		t.Errorf("LimitOf set %q, absent from the resource", foo)
	}
	if dim, _, ok := l.Excess(res(0, 1)); !ok || dim != Memory {
		t.Errorf("LimitOf bounds memory at zero; Excess(1 byte) = %q, %v", dim, ok)
	}
}

// A limit crosses CBOR as it crosses JSON: its set dimensions, unlimited
// as unlimited, and a negative amount refused with the dimension named.
func TestLimitCBOR(t *testing.T) {
	for _, l := range []Limit{Unlimited(), mustLimit(t, map[string]int64{CPU: 4000, Memory: 1 << 30, "nvidia.com/gpu": 2})} {
		b, err := cbor.Marshal(struct{ L Limit }{l})
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ L Limit }
		if err := cbor.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.L.Map(), l.Map()) || got.L.IsUnlimited() != l.IsUnlimited() {
			t.Errorf("%s came back as %s", l, got.L)
		}
	}
	b, err := cbor.Marshal(map[string]int64{CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	var l Limit
	if err := cbor.Unmarshal(b, &l); err == nil || !strings.Contains(err.Error(), CPU) {
		t.Errorf("a negative cpu: err = %v, want one naming %s", err, CPU)
	}
}

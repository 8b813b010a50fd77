package api

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

const (
	gpu = "nvidia.com/gpu"
	foo = "example.com/foo"
)

// res is a short constructor for test tables.
func res(milliCPU, memory int64, scalars ...any) Resource {
	if len(scalars)%2 != 0 {
		panic("res: scalars must be name, value pairs")
	}
	m := map[string]int64{}
	for i := 0; i < len(scalars); i += 2 {
		m[scalars[i].(string)] = int64(scalars[i+1].(int))
	}
	return NewResource(milliCPU, memory, m)
}

// deepCopy snapshots r, keeping zero scalars and the nil-ness of the map, so
// that a later reflect.DeepEqual detects any mutation at all.
func deepCopy(r Resource) Resource {
	out := Resource{MilliCPU: r.MilliCPU, Memory: r.Memory}
	if r.Scalars != nil {
		out.Scalars = make(map[string]int64, len(r.Scalars))
		for k, v := range r.Scalars {
			out.Scalars[k] = v
		}
	}
	return out
}

func assertNoZeroScalars(t *testing.T, r Resource) {
	t.Helper()
	for k, v := range r.Scalars {
		if v == 0 {
			t.Errorf("result keeps zero scalar %q: %#v", k, r.Scalars)
		}
	}
}

func assertErr(t *testing.T, err, want error, contains ...string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want one wrapping %v", err, want)
	}
	for _, s := range contains {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

func TestResourceAdd(t *testing.T) {
	tests := []struct {
		name     string
		a, b     Resource
		want     Resource
		wantErr  error
		contains []string
	}{
		{name: "zero plus zero", a: Resource{}, b: Resource{}, want: Resource{}},
		{name: "cpu and memory", a: res(1500, 1<<30), b: res(500, 1<<30), want: res(2000, 2<<30)},
		{name: "scalar only on left", a: res(0, 0, gpu, 2), b: res(100, 0), want: res(100, 0, gpu, 2)},
		{name: "scalar only on right", a: res(100, 0), b: res(0, 0, gpu, 3), want: res(100, 0, gpu, 3)},
		{name: "scalars on both sides", a: res(0, 0, gpu, 2, foo, 1), b: res(0, 0, gpu, 3), want: res(0, 0, gpu, 5, foo, 1)},
		{name: "scalar cancelling to zero is dropped", a: res(0, 0, gpu, 2), b: res(0, 0, gpu, -2), want: Resource{}},
		{name: "explicit zero scalar is ignored", a: Resource{Scalars: map[string]int64{gpu: 0}}, b: res(1, 0), want: res(1, 0)},
		{name: "max int64 exactly", a: res(math.MaxInt64-1, 0), b: res(1, 0), want: res(math.MaxInt64, 0)},
		{name: "cpu overflow", a: res(math.MaxInt64, 0), b: res(1, 0), wantErr: ErrOverflow, contains: []string{"cpu"}},
		{name: "memory overflow", a: res(0, math.MaxInt64/2+1), b: res(0, math.MaxInt64/2+1), wantErr: ErrOverflow, contains: []string{"memory"}},
		{name: "scalar overflow", a: res(0, 0, gpu, 1), b: Resource{Scalars: map[string]int64{gpu: math.MaxInt64}}, wantErr: ErrOverflow, contains: []string{gpu}},
		{name: "negative overflow", a: res(math.MinInt64, 0), b: res(-1, 0), wantErr: ErrOverflow, contains: []string{"cpu"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.a.Add(tc.b)
			assertErr(t, err, tc.wantErr, tc.contains...)
			if err != nil {
				return
			}
			if !got.Equal(tc.want) {
				t.Errorf("%v + %v = %v, want %v", tc.a, tc.b, got, tc.want)
			}
			assertNoZeroScalars(t, got)
			// Addition is commutative.
			rev, err := tc.b.Add(tc.a)
			if err != nil || !rev.Equal(got) {
				t.Errorf("b + a = %v, %v; want %v", rev, err, got)
			}
		})
	}
}

func TestResourceSub(t *testing.T) {
	tests := []struct {
		name     string
		a, b     Resource
		want     Resource // also checked on underflow: the unclamped difference
		wantErr  error
		contains []string
		absent   []string // dimensions the error must not name
	}{
		{name: "zero minus zero", a: Resource{}, b: Resource{}, want: Resource{}},
		{name: "plain", a: res(2000, 4<<30, gpu, 4), b: res(500, 1<<30, gpu, 1), want: res(1500, 3<<30, gpu, 3)},
		{name: "to exactly zero drops scalar", a: res(1000, 0, gpu, 2), b: res(1000, 0, gpu, 2), want: Resource{}},
		{name: "scalar absent on right", a: res(0, 0, gpu, 2), b: res(0, 0), want: res(0, 0, gpu, 2)},
		{
			name: "cpu underflow", a: res(500, 1<<30), b: res(1500, 0),
			want: res(-1000, 1<<30), wantErr: ErrUnderflow,
			contains: []string{"cpu short by 1"}, absent: []string{"memory"},
		},
		{
			name: "scalar absent on left underflows", a: res(1000, 0), b: res(0, 0, gpu, 1),
			want: res(1000, 0, gpu, -1), wantErr: ErrUnderflow,
			contains: []string{gpu + " short by 1"}, absent: []string{"cpu"},
		},
		{
			name: "memory underflow formatted", a: res(0, 1<<30), b: res(0, 3<<30),
			want: res(0, -2<<30), wantErr: ErrUnderflow,
			contains: []string{"memory short by 2Gi"},
		},
		{
			name: "every short dimension is named", a: res(100, 0, foo, 5), b: res(200, 0, gpu, 2, foo, 1),
			want: res(-100, 0, gpu, -2, foo, 4), wantErr: ErrUnderflow,
			contains: []string{"cpu short by 100m", gpu + " short by 2"}, absent: []string{foo},
		},
		{name: "overflow subtracting min int64", a: res(0, 0), b: res(math.MinInt64, 0), wantErr: ErrOverflow, contains: []string{"cpu"}},
		{name: "overflow going below min int64", a: Resource{Scalars: map[string]int64{gpu: math.MinInt64}}, b: res(0, 0, gpu, 1), wantErr: ErrOverflow, contains: []string{gpu}},
		{name: "overflow above max int64", a: res(0, math.MaxInt64), b: res(0, -1), wantErr: ErrOverflow, contains: []string{"memory"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.a.Sub(tc.b)
			assertErr(t, err, tc.wantErr, tc.contains...)
			for _, s := range tc.absent {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q names %q, which is not short", err, s)
				}
			}
			if errors.Is(err, ErrOverflow) {
				if errors.Is(err, ErrUnderflow) {
					t.Errorf("overflow error also wraps ErrUnderflow: %v", err)
				}
				return
			}
			if !got.Equal(tc.want) {
				t.Errorf("%v - %v = %v, want %v", tc.a, tc.b, got, tc.want)
			}
			assertNoZeroScalars(t, got)
		})
	}
}

// TestResourceOperationsDoNotMutate runs every operation that returns a new
// Resource and checks that neither operand changed and that the result's
// Scalars map is not shared with an operand (writing into it leaves the
// operands alone).
func TestResourceOperationsDoNotMutate(t *testing.T) {
	ops := []struct {
		name string
		fn   func(a, b Resource) Resource
	}{
		{"Add", func(a, b Resource) Resource { r, _ := a.Add(b); return r }},
		{"Sub", func(a, b Resource) Resource { r, _ := a.Sub(b); return r }},
		{"SubUnderflow", func(a, b Resource) Resource { r, _ := b.Sub(a); return r }},
		{"Max", func(a, b Resource) Resource { return a.Max(b) }},
		{"ScaleChecked", func(a, _ Resource) Resource { r, _ := a.ScaleChecked(3); return r }},
		{"ScaleCheckedOne", func(a, _ Resource) Resource { r, _ := a.ScaleChecked(1); return r }},
		{"Clone", func(a, _ Resource) Resource { return a.Clone() }},
		{"WithCPU", func(a, _ Resource) Resource { return a.With(CPU, 7) }},
		{"WithScalar", func(a, _ Resource) Resource { return a.With(gpu, 9) }},
		{"WithNewScalar", func(a, _ Resource) Resource { return a.With("example.com/new", 1) }},
		{"WithZeroScalar", func(a, _ Resource) Resource { return a.With(foo, 0) }},
		{"NewResourceFromScalars", func(a, _ Resource) Resource { return NewResource(a.MilliCPU, a.Memory, a.Scalars) }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			a := Resource{MilliCPU: 3000, Memory: 8 << 30, Scalars: map[string]int64{gpu: 4, foo: 2, "example.com/zero": 0}}
			b := Resource{MilliCPU: 1000, Memory: 1 << 30, Scalars: map[string]int64{gpu: 1}}
			a0, b0 := deepCopy(a), deepCopy(b)

			got := op.fn(a, b)
			if !reflect.DeepEqual(a, a0) {
				t.Fatalf("receiver mutated: %#v, was %#v", a, a0)
			}
			if !reflect.DeepEqual(b, b0) {
				t.Fatalf("argument mutated: %#v, was %#v", b, b0)
			}
			if got.Scalars == nil {
				t.Fatalf("test expects a result with scalars, got %#v", got)
			}
			got.Scalars[gpu] = -12345
			got.Scalars["example.com/probe"] = 1
			if !reflect.DeepEqual(a, a0) {
				t.Errorf("result's Scalars map is aliased with the receiver's: %#v", a.Scalars)
			}
			if !reflect.DeepEqual(b, b0) {
				t.Errorf("result's Scalars map is aliased with the argument's: %#v", b.Scalars)
			}
		})
	}
	t.Run("NewResourceCopiesInput", func(t *testing.T) {
		in := map[string]int64{gpu: 1}
		r := NewResource(0, 0, in)
		in[gpu] = 5
		in[foo] = 1
		if got := r.Get(gpu); got != 1 {
			t.Errorf("NewResource shares the input map: gpu = %d after caller changed it", got)
		}
		if got := r.Get(foo); got != 0 {
			t.Errorf("NewResource shares the input map: %s = %d", foo, got)
		}
	})
	t.Run("ReadOnlyMethods", func(t *testing.T) {
		a := Resource{MilliCPU: -1, Memory: 2, Scalars: map[string]int64{gpu: 1, foo: 0}}
		b := Resource{MilliCPU: 1, Scalars: map[string]int64{gpu: 2}}
		a0, b0 := deepCopy(a), deepCopy(b)
		_ = a.LessEqual(b)
		_ = a.Fits(b)
		_ = a.Equal(b)
		_ = a.Validate()
		_ = a.String()
		_ = a.Dims()
		_ = a.IsZero()
		_ = a.Get(gpu)
		if !reflect.DeepEqual(a, a0) || !reflect.DeepEqual(b, b0) {
			t.Errorf("read-only method mutated an operand: %#v %#v", a, b)
		}
	})
}

func TestResourceLessEqualAndFits(t *testing.T) {
	tests := []struct {
		name string
		r, o Resource
		want bool
	}{
		{"zero vs zero", Resource{}, Resource{}, true},
		{"equal", res(1000, 1<<30, gpu, 1), res(1000, 1<<30, gpu, 1), true},
		{"smaller everywhere", res(500, 1<<20), res(1000, 1<<30), true},
		{"cpu above", res(1001, 0), res(1000, 1<<30), false},
		{"memory above", res(0, 2<<30), res(1000, 1<<30), false},
		{"scalar above", res(0, 0, gpu, 2), res(0, 0, gpu, 1), false},
		{"scalar missing from other counts as zero", res(0, 0, gpu, 1), res(64000, 1<<40), false},
		{"scalar not asked for always fits", res(1000, 0), res(1000, 0, gpu, 8), true},
		{"zero scalar asked for fits anywhere", Resource{MilliCPU: 1, Scalars: map[string]int64{gpu: 0}}, res(1, 0), true},
		{"other holds explicit zero scalar", res(0, 0, gpu, 1), Resource{Scalars: map[string]int64{gpu: 0}}, false},
		{"negative scalar missing from other", res(0, 0, foo, -1), Resource{}, true},
		{"one dimension of many above", res(100, 100, gpu, 1, foo, 3), res(100, 100, gpu, 1, foo, 2), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.LessEqual(tc.o); got != tc.want {
				t.Errorf("%v.LessEqual(%v) = %v, want %v", tc.r, tc.o, got, tc.want)
			}
			if got := tc.r.Fits(tc.o); got != tc.want {
				t.Errorf("%v.Fits(%v) = %v, want %v", tc.r, tc.o, got, tc.want)
			}
		})
	}
}

func TestResourceEqual(t *testing.T) {
	tests := []struct {
		name string
		a, b Resource
		want bool
	}{
		{"zero values", Resource{}, Resource{}, true},
		{"nil vs empty map", Resource{}, Resource{Scalars: map[string]int64{}}, true},
		{"zero scalar vs absent", Resource{MilliCPU: 5, Scalars: map[string]int64{gpu: 0}}, Resource{MilliCPU: 5}, true},
		{"different zero scalars", Resource{Scalars: map[string]int64{gpu: 0}}, Resource{Scalars: map[string]int64{foo: 0}}, true},
		{"same scalars", res(1, 2, gpu, 3), res(1, 2, gpu, 3), true},
		{"scalar differs", res(1, 2, gpu, 3), res(1, 2, gpu, 4), false},
		{"scalar only on one side", res(1, 2, gpu, 3), res(1, 2), false},
		{"cpu differs", res(1, 2), res(2, 2), false},
		{"memory differs", res(1, 2), res(1, 3), false},
		{"different scalar names", res(0, 0, gpu, 1), res(0, 0, foo, 1), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.Equal(tc.b); got != tc.want {
				t.Errorf("%v.Equal(%v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
			if got := tc.b.Equal(tc.a); got != tc.want {
				t.Errorf("%v.Equal(%v) = %v, want %v (not symmetric)", tc.b, tc.a, got, tc.want)
			}
		})
	}
}

func TestResourceValidate(t *testing.T) {
	tests := []struct {
		name     string
		r        Resource
		wantErr  bool
		contains []string
		absent   []string
	}{
		{name: "zero", r: Resource{}},
		{name: "positive", r: res(1000, 1<<30, gpu, 2)},
		{name: "zero scalar", r: Resource{Scalars: map[string]int64{gpu: 0}}},
		{name: "negative cpu", r: res(-500, 0), wantErr: true, contains: []string{"cpu", "-500m"}},
		{name: "negative memory", r: res(0, -1<<30), wantErr: true, contains: []string{"memory"}},
		{name: "negative scalar", r: res(1, 1, gpu, -1), wantErr: true, contains: []string{gpu}},
		{name: "first negative reported", r: res(-1, -1), wantErr: true, contains: []string{"cpu"}, absent: []string{"memory"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("Validate(%v) = %v, want nil", tc.r, err)
				}
				return
			}
			assertErr(t, err, ErrNegative, tc.contains...)
			for _, s := range tc.absent {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q mentions %q", err, s)
				}
			}
		})
	}
}

func TestResourceString(t *testing.T) {
	tests := []struct {
		r    Resource
		want string
	}{
		{Resource{}, "{}"},
		{Resource{Scalars: map[string]int64{gpu: 0}}, "{}"},
		{res(1500, 4<<30, gpu, 1), "cpu=1500m,memory=4Gi,nvidia.com/gpu=1"},
		{res(2000, 0), "cpu=2"},
		{res(0, 1536), "memory=1536"},
		{res(0, 0, gpu, 2, foo, 1, "a.io/x", 3), "a.io/x=3,example.com/foo=1,nvidia.com/gpu=2"},
		{Resource{MilliCPU: 250, Scalars: map[string]int64{gpu: 0, foo: 4}}, "cpu=250m,example.com/foo=4"},
	}
	for _, tc := range tests {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("String(%#v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestFormatQuantity(t *testing.T) {
	tests := []struct {
		dim  string
		v    int64
		want string
	}{
		{CPU, 0, "0"},
		{CPU, 1000, "1"},
		{CPU, 64000, "64"},
		{CPU, 1500, "1500m"},
		{CPU, 1, "1m"},
		{CPU, -500, "-500m"},
		{Memory, 0, "0"},
		{Memory, 1, "1"},
		{Memory, 1000, "1000"},
		{Memory, 1 << 10, "1Ki"},
		{Memory, 1536, "1536"},
		{Memory, 3 << 10, "3Ki"},
		{Memory, 1<<20 + 1<<10, "1025Ki"},
		{Memory, 512 << 20, "512Mi"},
		{Memory, 1 << 30, "1Gi"},
		{Memory, 1536 << 20, "1536Mi"},
		{Memory, 1 << 40, "1Ti"},
		{Memory, 2048 << 40, "2048Ti"},
		{Memory, -(2 << 30), "-2Gi"},
		{gpu, 7, "7"},
		{gpu, 1000, "1000"},
		{gpu, 1024, "1024"},
		{Pods, 110, "110"},
	}
	for _, tc := range tests {
		if got := FormatQuantity(tc.dim, tc.v); got != tc.want {
			t.Errorf("FormatQuantity(%q, %d) = %q, want %q", tc.dim, tc.v, got, tc.want)
		}
	}
}

func TestResourceScaleChecked(t *testing.T) {
	tests := []struct {
		name     string
		r        Resource
		n        int64
		want     Resource
		wantErr  bool
		contains []string
	}{
		{name: "by three", r: res(1500, 1<<30, gpu, 2), n: 3, want: res(4500, 3<<30, gpu, 6)},
		{name: "by one", r: res(1500, 1<<30, gpu, 2), n: 1, want: res(1500, 1<<30, gpu, 2)},
		{name: "by zero", r: res(1500, 1<<30, gpu, 2), n: 0, want: Resource{}},
		{name: "by minus one", r: res(1500, 0, gpu, 2), n: -1, want: res(-1500, 0, gpu, -2)},
		{name: "zero by anything", r: Resource{}, n: math.MaxInt64, want: Resource{}},
		{name: "largest without overflow", r: res(math.MaxInt64/2, 0), n: 2, want: res(math.MaxInt64-1, 0)},
		{name: "max by one", r: res(0, math.MaxInt64), n: 1, want: res(0, math.MaxInt64)},
		{name: "cpu overflow", r: res(math.MaxInt64/2+1, 0), n: 2, wantErr: true, contains: []string{"cpu"}},
		{name: "memory overflow", r: res(1, 1<<40), n: 1 << 30, wantErr: true, contains: []string{"memory"}},
		{name: "scalar overflow", r: res(0, 0, gpu, 1<<32), n: 1 << 32, wantErr: true, contains: []string{gpu}},
		{name: "negative overflow", r: res(-(math.MaxInt64/3 + 1), 0), n: 3, wantErr: true, contains: []string{"cpu"}},
		{name: "negating min int64", r: res(math.MinInt64, 0), n: -1, wantErr: true, contains: []string{"cpu"}},
		{name: "by min int64", r: res(2, 0), n: math.MinInt64, wantErr: true, contains: []string{"cpu"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.r.ScaleChecked(tc.n)
			if tc.wantErr {
				assertErr(t, err, ErrOverflow, tc.contains...)
				return
			}
			if err != nil {
				t.Fatalf("ScaleChecked(%d) of %v: %v", tc.n, tc.r, err)
			}
			if !got.Equal(tc.want) {
				t.Errorf("%v × %d = %v, want %v", tc.r, tc.n, got, tc.want)
			}
			assertNoZeroScalars(t, got)
		})
	}
}

func TestResourceAccessors(t *testing.T) {
	r := res(1500, 2<<30, gpu, 2)
	if r.Get(CPU) != 1500 || r.Get(Memory) != 2<<30 || r.Get(gpu) != 2 || r.Get(foo) != 0 {
		t.Errorf("Get on %#v returned wrong values", r)
	}
	if got := r.With(gpu, 0); got.Get(gpu) != 0 || len(got.Scalars) != 0 {
		t.Errorf("With(gpu, 0) = %#v, want the scalar removed", got)
	}
	if got := r.With(Memory, 5); got.Memory != 5 || got.MilliCPU != 1500 || got.Get(gpu) != 2 {
		t.Errorf("With(memory, 5) = %#v", got)
	}
	if got, want := r.Dims(), []string{CPU, Memory, gpu}; !reflect.DeepEqual(got, want) {
		t.Errorf("Dims() = %v, want %v", got, want)
	}
	if got := (Resource{Scalars: map[string]int64{gpu: 0}}).Dims(); len(got) != 0 {
		t.Errorf("Dims() of zero-scalar resource = %v, want none", got)
	}
	if !(Resource{Scalars: map[string]int64{gpu: 0}}).IsZero() {
		t.Error("resource holding only a zero scalar is not IsZero")
	}
	if res(0, 0, gpu, 1).IsZero() || res(1, 0).IsZero() || res(0, -1).IsZero() {
		t.Error("non-zero resource reported IsZero")
	}
	if got := NewResource(1, 2, map[string]int64{gpu: 0, foo: 1}); len(got.Scalars) != 1 || got.Scalars[foo] != 1 {
		t.Errorf("NewResource kept zero scalars: %#v", got.Scalars)
	}
	if got := NewResource(1, 2, map[string]int64{gpu: 0}); got.Scalars != nil {
		t.Errorf("NewResource with only zero scalars = %#v, want nil map", got.Scalars)
	}
}

func TestResourceMax(t *testing.T) {
	a := res(1000, 4<<30, gpu, 1)
	b := res(2000, 1<<30, foo, 3)
	want := res(2000, 4<<30, gpu, 1, foo, 3)
	if got := a.Max(b); !got.Equal(want) {
		t.Errorf("Max = %v, want %v", got, want)
	}
	if got := b.Max(a); !got.Equal(want) {
		t.Errorf("Max (reversed) = %v, want %v", got, want)
	}
}

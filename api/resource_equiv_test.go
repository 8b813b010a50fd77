package api

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// The arithmetic works on fields and maps directly; the dimension-by-
// dimension forms (addByDim, subByDim, and LessEqual/Equal over unionDims)
// define it. On random amounts, near the int64 limits and with absent, zero
// and negative scalars, both must give the same results and the same
// errors.
func TestResourceArithmeticMatchesDimByDim(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	values := []int64{0, 1, -1, 2, 1000, math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, math.MinInt64 + 1, 1 << 40}
	val := func() int64 {
		if rng.IntN(3) == 0 {
			return rng.Int64N(5000)
		}
		return values[rng.IntN(len(values))]
	}
	res := func() Resource {
		r := Resource{MilliCPU: val(), Memory: val()}
		for _, k := range []string{Pods, "nvidia.com/gpu", "x"} {
			switch rng.IntN(3) {
			case 0:
			case 1:
				if r.Scalars == nil {
					r.Scalars = map[string]int64{}
				}
				r.Scalars[k] = val()
			case 2:
				if r.Scalars == nil {
					r.Scalars = map[string]int64{}
				}
				r.Scalars[k] = 0 // present but zero: the same as absent
			}
		}
		return r
	}
	lessEqual := func(a, b Resource) bool {
		for _, d := range unionDims(a, b) {
			if a.Get(d) > b.Get(d) {
				return false
			}
		}
		return true
	}
	equal := func(a, b Resource) bool {
		for _, d := range unionDims(a, b) {
			if a.Get(d) != b.Get(d) {
				return false
			}
		}
		return true
	}
	same := func(what string, a, b Resource, got, want Resource, gotErr, wantErr error) {
		t.Helper()
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s of %+v and %+v: got %+v, %v; dimension by dimension %+v, %v", what, a, b, got, gotErr, want, wantErr)
		}
	}
	for i := 0; i < 200000; i++ {
		a, b := res(), res()
		got, err := a.Add(b)
		want, werr := a.addByDim(b)
		same("Add", a, b, got, want, err, werr)
		got, err = a.Sub(b)
		want, werr = a.subByDim(b)
		same("Sub", a, b, got, want, err, werr)
		if a.LessEqual(b) != lessEqual(a, b) {
			t.Fatalf("LessEqual(%+v, %+v) = %v", a, b, a.LessEqual(b))
		}
		if a.Equal(b) != equal(a, b) {
			t.Fatalf("Equal(%+v, %+v) = %v", a, b, a.Equal(b))
		}
	}
}

func BenchmarkResourceAdd(b *testing.B) {
	x := NewResource(1500, 4<<30, map[string]int64{Pods: 1})
	y := NewResource(2500, 8<<30, map[string]int64{Pods: 3, "nvidia.com/gpu": 1})
	for b.Loop() {
		_, _ = x.Add(y)
	}
}

// QuotaSum is folding Add over Task.Quota, in one pass: on random tasks
// (requests with and without "pods", other scalars, zero entries) both
// give the same amount, and QuotaSum reports overflow where the fold does.
func TestQuotaSumMatchesFoldedAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	small := func() int64 { return rng.Int64N(5000) }
	for i := range 3000 {
		use := NewResource(small(), small(), map[string]int64{Pods: rng.Int64N(4), "nvidia.com/gpu": rng.Int64N(2)})
		n := rng.IntN(6)
		tasks := make([]*Task, n)
		for k := range tasks {
			req := Resource{MilliCPU: small(), Memory: small()}
			if rng.IntN(2) == 0 {
				req = req.With(Pods, 1)
			}
			if rng.IntN(3) == 0 {
				req = req.With("nvidia.com/gpu", rng.Int64N(3))
			}
			if i%500 == 0 && k == 0 {
				req.MilliCPU = math.MaxInt64 // overflow now and then
			}
			tasks[k] = &Task{Request: req}
		}
		want, wantOK := use, true
		for _, tk := range tasks {
			next, err := want.Add(tk.Quota())
			if err != nil {
				wantOK = false
				break
			}
			want = next
		}
		got, ok := QuotaSum(use, tasks)
		if ok != wantOK {
			t.Fatalf("case %d: ok %v, the fold's %v (use %v, %d tasks)", i, ok, wantOK, use, n)
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: QuotaSum = %#v, folded Add = %#v", i, got, want)
		}
	}
}

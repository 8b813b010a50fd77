package report

import (
	"math"
	"slices"
	"testing"
)

func TestPercentile(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	tests := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"empty", nil, 50, 0},
		{"single p0", []float64{5}, 0, 5},
		{"single p50", []float64{5}, 50, 5},
		{"single p100", []float64{5}, 100, 5},
		{"p0 is the minimum", ten, 0, 1},
		{"p10", ten, 10, 1},
		{"just above p10", ten, 10.5, 2},
		{"p50", ten, 50, 5},
		{"p90", ten, 90, 9},
		{"p99 rounds up", ten, 99, 10},
		{"p100 is the maximum", ten, 100, 10},
		{"below 0 clamps", ten, -5, 1},
		{"above 100 clamps", ten, 150, 10},
		{"NaN", ten, math.NaN(), 0},
		{"p99 of 100 is exact", hundred, 99, 99},
		{"p1 of 100 is exact", hundred, 1, 1},
	}
	for _, tt := range tests {
		if got := Percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("%s: Percentile(p=%v) = %v, want %v", tt.name, tt.p, got, tt.want)
		}
	}
}

func TestCDFSample(t *testing.T) {
	in := make([]float64, 100)
	for i := range in {
		in[i] = float64(i)
	}
	if got := CDFSample(nil, 10); got != nil {
		t.Errorf("empty input: got %v, want nil", got)
	}
	if got := CDFSample(in, 0); got != nil {
		t.Errorf("n=0: got %v, want nil", got)
	}
	if got := CDFSample([]float64{7}, 5); !slices.Equal(got, []float64{7}) {
		t.Errorf("single element: got %v", got)
	}
	if got := CDFSample(in, 1); !slices.Equal(got, []float64{99}) {
		t.Errorf("n=1: got %v, want the maximum", got)
	}
	if got := CDFSample(in, 2); !slices.Equal(got, []float64{0, 99}) {
		t.Errorf("n=2: got %v, want first and last", got)
	}

	all := CDFSample(in, 1000)
	if !slices.Equal(all, in) {
		t.Fatalf("n larger than input: got %d values, want the whole input", len(all))
	}
	all[0] = -1
	if in[0] != 0 {
		t.Error("CDFSample aliases its input")
	}

	got := CDFSample(in, 10)
	want := []float64{0, 11, 22, 33, 44, 55, 66, 77, 88, 99}
	if !slices.Equal(got, want) {
		t.Errorf("n=10 over 100: got %v, want %v", got, want)
	}

	// Uneven step: still n values, strictly increasing, ends included.
	got = CDFSample(in, 7)
	if len(got) != 7 || got[0] != 0 || got[6] != 99 {
		t.Errorf("n=7 over 100: got %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Errorf("n=7 over 100: not strictly increasing: %v", got)
		}
	}
}

func TestRecorder(t *testing.T) {
	r := NewRate(0.5)
	if got := r.Points(); got != nil {
		t.Errorf("nothing added: Points() = %v, want nil", got)
	}
	r.Add(0.1, 1)
	r.Add(0.4, 1)
	r.Add(-0.2, 2) // just before the start: first bucket
	r.Add(1.6, 3)
	r.Add(1.0, -4) // ignored
	want := []Point{{0, 8}, {0.5, 0}, {1, 0}, {1.5, 6}}
	if got := r.Points(); !slices.Equal(got, want) {
		t.Errorf("Points() = %v, want %v", got, want)
	}

	r.Add(2.7, 0) // extends the series through the idle end
	want = append(want, Point{2, 0}, Point{2.5, 0})
	if got := r.Points(); !slices.Equal(got, want) {
		t.Errorf("after Add(2.7, 0): Points() = %v, want %v", got, want)
	}

	r.Add(math.NaN(), 2)
	r.Add(math.Inf(1), 3)
	r.Add(1e300, 4)
	if got := r.Dropped(); got != 9 {
		t.Errorf("Dropped() = %d, want 9", got)
	}
	if got := r.Points(); !slices.Equal(got, want) {
		t.Errorf("dropped events changed the series: %v", got)
	}

	single := NewRate(2)
	single.Add(0, 4)
	if got := single.Points(); !slices.Equal(got, []Point{{0, 2}}) {
		t.Errorf("single event: Points() = %v", got)
	}

	for _, w := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if got := NewRate(w).Width(); got != 1 {
			t.Errorf("NewRate(%v).Width() = %v, want 1", w, got)
		}
	}
}

package kube

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/api"
)

const gpu = "nvidia.com/gpu"

func TestParseQuantity(t *testing.T) {
	tests := []struct {
		name, s  string
		want     int64
		wantErr  error // sentinel; nil with fail=true means any error
		fail     bool
		contains []string
	}{
		{name: "cpu", s: "1", want: 1000},
		{name: "cpu", s: "500m", want: 500},
		{name: "cpu", s: "2.5", want: 2500},
		{name: "cpu", s: "0", want: 0},
		{name: "cpu", s: "0.0001", want: 1},
		{name: "cpu", s: "1n", want: 1},
		{name: "cpu", s: "1001u", want: 2},
		{name: "cpu", s: "9223372036854775.807", want: 9223372036854775807},
		{name: "cpu", s: "9223372036854775.808", wantErr: api.ErrOverflow, contains: []string{"cpu"}},
		{name: "cpu", s: "9223372036854775807", wantErr: api.ErrOverflow, contains: []string{"cpu"}},
		{name: "cpu", s: "1E30", wantErr: api.ErrOverflow, contains: []string{"cpu"}},
		{name: "cpu", s: "-1", wantErr: api.ErrNegative, contains: []string{"cpu"}},
		// Zero with a huge exponent used to make quantityInt compute 10^exp
		// (found by FuzzParseQuantity; it ran out of memory).
		{name: "cpu", s: "0e999999999", want: 0},
		{name: "memory", s: "0E2000000000", want: 0},
		{name: gpu, s: "0.000e1666666600", want: 0},
		{name: "memory", s: "1e999999999", wantErr: api.ErrOverflow, contains: []string{"memory"}},
		{name: "memory", s: "1Gi", want: 1 << 30},
		{name: "memory", s: "1k", want: 1000},
		{name: "memory", s: "1.5", want: 2},
		{name: "memory", s: "100m", want: 1},
		{name: "memory", s: "9223372036854775807", want: 9223372036854775807},
		{name: "memory", s: "9223372036854775808", wantErr: api.ErrOverflow, contains: []string{"memory"}},
		{name: "memory", s: "1E30", wantErr: api.ErrOverflow, contains: []string{"memory"}},
		{name: "memory", s: "-1Gi", wantErr: api.ErrNegative, contains: []string{"memory"}},
		{name: gpu, s: "2", want: 2},
		{name: gpu, s: "0.5", want: 1},
		{name: gpu, s: "1000m", want: 1},
		{name: gpu, s: "1E30", wantErr: api.ErrOverflow, contains: []string{gpu}},
		{name: "cpu", s: "", fail: true, contains: []string{"cpu"}},
		{name: "memory", s: "lots", fail: true, contains: []string{"memory"}},
		{name: gpu, s: "1Q", fail: true, contains: []string{gpu}},
	}
	for _, tc := range tests {
		t.Run(tc.name+"="+tc.s, func(t *testing.T) {
			got, err := ParseQuantity(tc.name, tc.s)
			if tc.wantErr == nil && !tc.fail {
				if err != nil {
					t.Fatalf("ParseQuantity(%q, %q): %v", tc.name, tc.s, err)
				}
				if got != tc.want {
					t.Fatalf("ParseQuantity(%q, %q) = %d, want %d", tc.name, tc.s, got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseQuantity(%q, %q) = %d, want error", tc.name, tc.s, got)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v does not wrap %v", err, tc.wantErr)
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func TestResourceFromList(t *testing.T) {
	tests := []struct {
		name     string
		in       corev1.ResourceList
		want     api.Resource
		wantErr  error
		contains []string
	}{
		{name: "nil", in: nil, want: api.Resource{}},
		{
			name: "cpu memory gpu", in: list("cpu", "1500m", "memory", "4Gi", gpu, "2"),
			want: api.NewResource(1500, 4<<30, map[string]int64{gpu: 2}),
		},
		{name: "whole cores", in: list("cpu", "2"), want: api.NewResource(2000, 0, nil)},
		{name: "fractional cpu rounds up", in: list("cpu", "0.0001"), want: api.NewResource(1, 0, nil)},
		{name: "fractional memory rounds up", in: list("memory", "1500m"), want: api.NewResource(0, 2, nil)},
		{name: "fractional gpu rounds up", in: list(gpu, "0.5"), want: api.NewResource(0, 0, map[string]int64{gpu: 1})},
		{name: "pods is a scalar", in: list("pods", "110"), want: api.NewResource(0, 0, map[string]int64{api.Pods: 110})},
		{name: "zero gpu dropped", in: list("cpu", "1", gpu, "0"), want: api.NewResource(1000, 0, nil)},
		{name: "negative memory", in: list("cpu", "1", "memory", "-1Gi"), wantErr: api.ErrNegative, contains: []string{"memory"}},
		{name: "negative gpu", in: list(gpu, "-1"), wantErr: api.ErrNegative, contains: []string{gpu}},
		{name: "negative cpu", in: list("cpu", "-100m"), wantErr: api.ErrNegative, contains: []string{"cpu"}},
		{name: "huge cpu", in: list("cpu", "1E30"), wantErr: api.ErrOverflow, contains: []string{"cpu"}},
		{name: "huge memory", in: list("memory", "1E30"), wantErr: api.ErrOverflow, contains: []string{"memory"}},
		{name: "huge gpu", in: list(gpu, "1E30"), wantErr: api.ErrOverflow, contains: []string{gpu}},
		{name: "cpu overflowing only once in milli", in: list("cpu", "9300000000000000"), wantErr: api.ErrOverflow, contains: []string{"cpu"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResourceFromList(tc.in)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ResourceFromList(%v) = %v, %v; want error wrapping %v", tc.in, got, err, tc.wantErr)
				}
				for _, s := range tc.contains {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ResourceFromList(%v): %v", tc.in, err)
			}
			if !got.Equal(tc.want) {
				t.Errorf("ResourceFromList(%v) = %v, want %v", tc.in, got, tc.want)
			}
			for k, v := range got.Scalars {
				if v == 0 {
					t.Errorf("result keeps zero scalar %q", k)
				}
			}
		})
	}
}

func TestResourceFromListDoesNotMutateInput(t *testing.T) {
	in := list("cpu", "0.0001", "memory", "1Gi")
	before := in.DeepCopy()
	if _, err := ResourceFromList(in); err != nil {
		t.Fatal(err)
	}
	for name, q := range before {
		if got := in[name]; got.Cmp(q) != 0 || got.String() != q.String() {
			t.Errorf("input %s changed from %s to %s", name, q.String(), got.String())
		}
	}
}

func TestLimitFromList(t *testing.T) {
	l, err := LimitFromList(list("cpu", "4", gpu, "0"))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := l.Get(api.CPU); !ok || v != 4000 {
		t.Errorf("cpu bound = %d, %v; want 4000, true", v, ok)
	}
	if v, ok := l.Get(gpu); !ok || v != 0 {
		t.Errorf("listed zero gpu bound = %d, %v; want 0, true", v, ok)
	}
	if _, ok := l.Get(api.Memory); ok {
		t.Error("memory not listed but bounded")
	}
	if l, err := LimitFromList(nil); err != nil || !l.IsUnlimited() {
		t.Errorf("LimitFromList(nil) = %v, %v; want unlimited", l, err)
	}
	if _, err := LimitFromList(list("memory", "-1")); !errors.Is(err, api.ErrNegative) || !strings.Contains(err.Error(), "memory") {
		t.Errorf("negative capability error = %v, want ErrNegative naming memory", err)
	}
	if _, err := LimitFromList(list("memory", "1E30")); !errors.Is(err, api.ErrOverflow) {
		t.Errorf("huge capability error = %v, want ErrOverflow", err)
	}
}

func TestQueueSpecFromVolcano(t *testing.T) {
	vq := &schedv1beta1.Queue{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a"},
		Spec: schedv1beta1.QueueSpec{
			Weight:     3,
			Parent:     "org",
			Capability: list("cpu", "8", gpu, "2"),
			Deserved:   list("cpu", "4", "memory", "8Gi"),
			Guarantee:  schedv1beta1.Guarantee{Resource: list("cpu", "500m")},
		},
	}
	got, err := QueueSpecFromVolcano(vq)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "team-a" || got.Parent != "org" || got.Weight != 3 {
		t.Errorf("got %+v", got)
	}
	if v, ok := got.Capability.Get(api.CPU); !ok || v != 8000 {
		t.Errorf("capability cpu = %d, %v", v, ok)
	}
	if _, ok := got.Capability.Get(api.Memory); ok {
		t.Error("capability memory set although not listed")
	}
	if want := api.NewResource(4000, 8<<30, nil); !got.Deserved.Equal(want) {
		t.Errorf("deserved = %v, want %v", got.Deserved, want)
	}
	if want := api.NewResource(500, 0, nil); !got.Guarantee.Equal(want) {
		t.Errorf("guarantee = %v, want %v", got.Guarantee, want)
	}

	if got.DequeueStrategy != "" {
		t.Errorf("unset dequeue strategy converted to %q", got.DequeueStrategy)
	}
	for _, st := range []schedv1beta1.DequeueStrategy{schedv1beta1.DequeueStrategyFIFO, schedv1beta1.DequeueStrategyTraverse, "lifo"} {
		withStrategy := vq.DeepCopy()
		withStrategy.Spec.DequeueStrategy = st
		got, err := QueueSpecFromVolcano(withStrategy)
		if err != nil || got.DequeueStrategy != string(st) {
			t.Errorf("dequeueStrategy %q converted to %q, %v", st, got.DequeueStrategy, err)
		}
	}
	// Volcano's strategy names are the api's, and an unknown one leaves the
	// queue out of the tree (not the whole tree).
	if string(schedv1beta1.DequeueStrategyFIFO) != api.DequeueFIFO || string(schedv1beta1.DequeueStrategyTraverse) != api.DequeueTraverse {
		t.Error("Volcano's dequeue strategy names differ from the api's")
	}
	lifo := vq.DeepCopy()
	lifo.Spec.Parent, lifo.Spec.DequeueStrategy = "", "lifo"
	spec, err := QueueSpecFromVolcano(lifo)
	if err != nil {
		t.Fatal(err)
	}
	if _, left := api.BuildTreePartial([]api.QueueSpec{spec}); !errors.Is(left["team-a"], api.ErrQueueSpec) || !strings.Contains(left["team-a"].Error(), "lifo") {
		t.Errorf("unknown strategy: %v, want team-a left out naming lifo", left["team-a"])
	}

	bad := vq.DeepCopy()
	bad.Spec.Deserved = list(gpu, "-1")
	if _, err := QueueSpecFromVolcano(bad); !errors.Is(err, api.ErrNegative) || !strings.Contains(err.Error(), "team-a") || !strings.Contains(err.Error(), gpu) {
		t.Errorf("negative deserved error = %v, want ErrNegative naming team-a and %s", err, gpu)
	}
}

func TestParseQuantityRejectsHugeNegativeExponent(t *testing.T) {
	_, err := ParseQuantity("cpu", "1e-999999999")
	if err == nil || !strings.Contains(err.Error(), "exponent") || !strings.Contains(err.Error(), "cpu") {
		t.Fatalf("ParseQuantity(1e-999999999) = %v, want an exponent error naming cpu", err)
	}
}

// TestQuantityFastPathAgrees checks that the int64 path of quantityInt
// gives what the big-integer path gives, value and error, for whole
// numbers of every size and suffix, at both scales.
func TestQuantityFastPathAgrees(t *testing.T) {
	var inputs []string
	for _, v := range []string{"1", "2", "7", "64", "1000", "9223372036854775", "9223372036854776", "9223372036854775807", "922337203685477580"} {
		for _, suffix := range []string{"", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "e6", "e15", "e18"} {
			inputs = append(inputs, v+suffix)
		}
	}
	fast := 0
	for _, s := range inputs {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			continue
		}
		if _, ok := q.AsInt64(); ok {
			fast++
		}
		for _, scale := range []resource.Scale{0, resource.Milli} {
			got, gerr := quantityInt("r", q, scale)
			want, werr := quantityIntExact("r", q, scale)
			if got != want || (gerr == nil) != (werr == nil) || (werr != nil && !errors.Is(gerr, api.ErrOverflow)) {
				t.Errorf("%q at scale %d: %d, %v; the exact path: %d, %v", s, scale, got, gerr, want, werr)
			}
		}
	}
	// About half of the inputs are held as int64 (the others overflow it,
	// or are held as decimals); the milli boundary ("9223372036854775" and
	// "…776") is among them.
	if fast < 50 {
		t.Fatalf("only %d of %d inputs take the int64 path: the test does not exercise it", fast, len(inputs))
	}
}

func BenchmarkResourceFromList(b *testing.B) {
	list := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}
	for b.Loop() {
		if _, err := ResourceFromList(list); err != nil {
			b.Fatal(err)
		}
	}
}

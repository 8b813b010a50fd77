package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// cpuProfile is a CPU profile whose samples carry the given part labels
// ("" for none) and CPU nanoseconds.
func cpuProfile(t *testing.T, samples map[string][]int64) []byte {
	t.Helper()
	fn := &profile.Function{ID: 1, Name: "f"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
		Function:   []*profile.Function{fn},
		Location:   []*profile.Location{loc},
	}
	for part, values := range samples {
		for _, v := range values {
			s := &profile.Sample{Location: []*profile.Location{loc}, Value: []int64{1, v}}
			if part != "" {
				s.Label = map[string][]string{partLabel: {part}}
			}
			p.Sample = append(p.Sample, s)
		}
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCPUByPart(t *testing.T) {
	data := cpuProfile(t, map[string][]int64{
		partLeader:  {10e6, 20e6},
		partClients: {40e6},
		partEtcd:    {30e6, 30e6},
		"":          {5e6},
		"stranger":  {5e6}, // a label not listed counts with the rest
	})
	got, err := cpuByPart(data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{partLeader: 30 * time.Millisecond, partClients: 40 * time.Millisecond, partEtcd: 60 * time.Millisecond, partRest: 10 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("parts %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("part %q: %v, want %v", k, got[k], v)
		}
	}
	// 1,000 reservations: the leader 30 µs each (one core: 33,333/s; with
	// the rest's 10 µs, 25,000/s), etcd 60 µs (16,667/s).
	d := describeSplit(got, 1000)
	for _, s := range []string{"leader 30.0,", "clients 40.0,", "etcd 60.0,", "runtime) 10.0,", "in all 140.0", "alone 33333 (25000 with", "etcd's 16667"} {
		if !strings.Contains(d, s) {
			t.Errorf("%q does not say %q", d, s)
		}
	}
	if _, err := cpuByPart([]byte("not a profile")); err == nil {
		t.Error("garbage parsed as a profile")
	}
}

package main

import (
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// The parts of the process that -cpu-split tells apart. Each is started
// under a profiler label (inPart), which every goroutine it starts
// inherits: etcd's servers and apply loop, the leader's loop, HTTP server
// and etcd client, the clients' dispatchers and workers. What carries no
// label is the runtime's own: the collector's background workers,
// scavenging, the profiler.
const (
	partLabel   = "part"
	partLeader  = "leader"
	partClients = "clients"
	partEtcd    = "etcd"
	partRest    = "" // no label
)

// labelledParts are the parts started under a label, in the order
// describeSplit gives them.
func labelledParts() []string { return []string{partLeader, partClients, partEtcd} }

// inPart runs f with the goroutine labelled as part, so that what f starts
// is counted to it.
func inPart(ctx context.Context, part string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(partLabel, part), f)
}

// cpuByPart sums a CPU profile's samples by part (partRest for those with
// no part label, or one not listed above).
func cpuByPart(data []byte) (map[string]time.Duration, error) {
	p, err := profile.ParseData(data)
	if err != nil {
		return nil, err
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("not a CPU profile: no cpu/nanoseconds sample type")
	}
	out := map[string]time.Duration{}
	for _, s := range p.Sample {
		part := partRest
		if v := s.Label[partLabel]; len(v) > 0 && slices.Contains(labelledParts(), v[0]) {
			part = v[0]
		}
		out[part] += time.Duration(s.Value[idx])
	}
	return out, nil
}

// describeSplit says what each part spent per reservation over ops
// reservations, and the rate one core would allow for the leader's work
// alone (with and without the unlabelled rest charged to it) and for
// etcd's: what a leader and an etcd on machines of their own could reach
// if CPU were their only bound.
func describeSplit(parts map[string]time.Duration, ops int64) string {
	per := func(part string) float64 { return float64(parts[part].Nanoseconds()) / 1e3 / float64(ops) }
	var b strings.Builder
	b.WriteString("CPU µs per reservation by part (the profile's labels):")
	var total float64
	for _, part := range append(labelledParts(), partRest) {
		name := part
		if part == partRest {
			name = "the rest (collector workers, runtime)"
		}
		fmt.Fprintf(&b, " %s %.1f,", name, per(part))
		total += per(part)
	}
	fmt.Fprintf(&b, " in all %.1f", total)
	rate := func(us float64) string {
		if us <= 0 {
			return "unbounded"
		}
		return fmt.Sprintf("%.0f", 1e6/us)
	}
	fmt.Fprintf(&b, "; one core's reservations/s for the leader's work alone %s (%s with the rest charged to it), for etcd's %s",
		rate(per(partLeader)), rate(per(partLeader)+per(partRest)), rate(per(partEtcd)))
	return b.String()
}

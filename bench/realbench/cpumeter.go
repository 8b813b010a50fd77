package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardsched/shardsched/bench/procstat"
)

// cpuMeter reads, at a run's clock start and end, the CPU time of every
// process of the control plane and of the whole machine, so that a run
// can say where the CPU per bound pod went: the system's own share is only
// part of it on a machine whose cores the API server, etcd and kwok share.
type cpuMeter struct {
	pids map[string]int // control plane part -> pid
	// start holds the first readings; a part whose reading failed is
	// left out of the note.
	start   map[string]time.Duration
	machine time.Duration
	ok      bool // the machine's reading succeeded
}

// startCPUMeter takes the first readings.
func startCPUMeter(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: make(map[string]time.Duration, len(pids))}
	for name, pid := range pids {
		if d, err := procstat.CPUOf(pid); err == nil {
			m.start[name] = d
		}
	}
	var err error
	m.machine, err = procstat.MachineBusy()
	m.ok = err == nil
	return m
}

// cpuSpent is what a meter measured over a run.
type cpuSpent struct {
	parts   map[string]time.Duration // control plane part -> CPU over the run
	machine time.Duration            // every core's busy time over the run (0: not read)
}

// stop takes the second readings.
func (m *cpuMeter) stop() cpuSpent {
	if m == nil {
		return cpuSpent{}
	}
	out := cpuSpent{parts: make(map[string]time.Duration, len(m.start))}
	for name, d0 := range m.start {
		if d, err := procstat.CPUOf(m.pids[name]); err == nil && d >= d0 {
			out.parts[name] = d - d0
		}
	}
	if b, err := procstat.MachineBusy(); err == nil && m.ok && b >= m.machine {
		out.machine = b - m.machine
	}
	return out
}

// note says the CPU seconds per 1000 bound pods of the whole machine, of
// each control plane part, of the system and of the harness, and what is
// left (other processes: the kernel's own work, anything else running).
// system and harness are the run's own figures (harness 0 when it is
// inside system's).
func (s cpuSpent) note(bound int, system, harness time.Duration) string {
	if bound == 0 || (s.machine == 0 && len(s.parts) == 0) {
		return ""
	}
	per := func(d time.Duration) float64 { return d.Seconds() / float64(bound) * 1000 }
	known := system + harness
	for _, d := range s.parts {
		known += d
	}
	rest := s.machine - known
	if rest < 0 && per(-rest) < 0.005 {
		rest = 0 // a shortfall that rounds to nothing here is none
	}
	var b strings.Builder
	b.WriteString("CPU s per 1000 bound pods over the run:")
	switch {
	case s.machine <= 0:
	case rest >= 0:
		fmt.Fprintf(&b, " the whole machine %.2f =", per(s.machine))
	default:
		// /proc/stat's busy time is counted at the clock tick, a
		// process's from the kernel scheduler's own runtime: on a
		// machine with idle time the first can fall short of the sum of
		// the second; no "rest" is then worked out below zero.
		fmt.Fprintf(&b, " the whole machine %.2f by /proc/stat, %.2f less than its parts' own figures (busy time counted at the clock tick against the processes' runtime):", per(s.machine), per(-rest))
	}
	fmt.Fprintf(&b, " the system %.2f", per(system))
	if harness > 0 {
		fmt.Fprintf(&b, " + the harness %.2f", per(harness))
	}
	for _, name := range slices.Sorted(maps.Keys(s.parts)) {
		fmt.Fprintf(&b, " + %s %.2f", name, per(s.parts[name]))
	}
	if s.machine > 0 && rest >= 0 {
		fmt.Fprintf(&b, " + the rest %.2f", per(rest))
	}
	if api := s.parts[apiServerPart]; api > 0 {
		// Every process of a run moves with the machine's speed of the
		// moment, so this quotient varies less between runs of one build
		// than either figure does (the thirtieth session's A/B runs).
		fmt.Fprintf(&b, "; the system's CPU over %s's: %.3f", apiServerPart, system.Seconds()/api.Seconds())
	}
	return b.String()
}

// apiServerPart is the control plane part the API server's CPU is read as.
const apiServerPart = "kube-apiserver"

// idleRates measures, over window, the CPU per second of the system, the
// harness (0 for an in-process system, which includes it), each control
// plane part and the whole machine while the system runs with no pod to
// place: what each costs per second whatever the pods. A run that lasts
// longer pays it for longer, so it is part of the CPU per pod of a slower
// run without being work on any pod.
func idleRates(ctx context.Context, window time.Duration, pids map[string]int, system func() time.Duration, inProcess bool) (idleCPU, error) {
	m := startCPUMeter(pids)
	sys0, harness0 := system(), procstat.CPU()
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return idleCPU{}, ctx.Err()
	case <-time.After(window):
	}
	spent := m.stop()
	secs := time.Since(t0).Seconds()
	out := idleCPU{parts: map[string]float64{}, system: (system() - sys0).Seconds() / secs, machine: spent.machine.Seconds() / secs}
	if !inProcess {
		out.harness = (procstat.CPU() - harness0).Seconds() / secs
	}
	for name, d := range spent.parts {
		out.parts[name] = d.Seconds() / secs
	}
	return out, nil
}

// idleCPU is CPU seconds per second (cores) of each process while idle.
type idleCPU struct {
	parts                    map[string]float64
	system, harness, machine float64
}

// note says the idle rates, in CPU ms per second.
func (c idleCPU) note(window time.Duration) string {
	if c.machine == 0 && c.system == 0 && len(c.parts) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CPU ms per second with the system started and no pod yet (%v before the clock): the whole machine %.0f, the system %.0f", window, c.machine*1000, c.system*1000)
	if c.harness > 0 {
		fmt.Fprintf(&b, ", the harness %.0f", c.harness*1000)
	}
	for _, name := range slices.Sorted(maps.Keys(c.parts)) {
		fmt.Fprintf(&b, ", %s %.0f", name, c.parts[name]*1000)
	}
	return b.String()
}

// quietWait is how each run first waits for the machine to be quiet: the
// previous run's deletes are answered before the namespace is empty, but
// kwok, the API server's watchers and etcd go on working through them for
// seconds after, and a system started then is measured on a machine still
// busy with the run before (up to 0.5–1 core in the idle windows).
type quietWait struct {
	below  float64       // cores: quiet is the whole machine below this
	window time.Duration // over one window
	max    time.Duration // then the run starts anyway
	// busy is the machine's busy CPU time so far (procstat.MachineBusy).
	busy func() (time.Duration, error)
}

// wait measures the machine's CPU over successive windows until one is
// below q.below cores, q.max has passed or ctx ends. It returns the run's
// note: how long it waited and what it measured last.
func (q quietWait) wait(ctx context.Context) (string, error) {
	if q.below <= 0 {
		return "", nil
	}
	t0 := time.Now()
	prev, err := q.busy()
	if err != nil {
		return fmt.Sprintf("the machine's quiet not awaited: %v", err), nil
	}
	for {
		w0 := time.Now()
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(q.window):
		}
		cur, err := q.busy()
		if err != nil {
			return fmt.Sprintf("the machine's quiet not awaited: %v", err), nil
		}
		cores := (cur - prev).Seconds() / time.Since(w0).Seconds()
		prev = cur
		waited := time.Since(t0)
		if cores < q.below {
			return fmt.Sprintf("waited %.1f s for the machine to be quiet before starting the system (%.2f cores busy over the last %s, below %.2f)", waited.Seconds(), cores, q.window, q.below), nil
		}
		if waited >= q.max {
			return fmt.Sprintf("the machine was not quiet after %.0f s (%.2f cores busy over the last %s, not below %.2f): the system started anyway", waited.Seconds(), cores, q.window, q.below), nil
		}
	}
}

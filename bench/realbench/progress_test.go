package main

import (
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
)

func TestProgressLine(t *testing.T) {
	got := progressLine("shardsched-1 stream", 1234, 2000, 12345*time.Millisecond, 1.849, nil)
	if want := "  shardsched-1 stream: 1234/2000 bound, 12.3 s, load 1.85"; got != want {
		t.Errorf("progressLine = %q, want %q", got, want)
	}
	got = progressLine("binder backlog", 0, 10, 0, 0, errors.New("no /proc"))
	if want := "  binder backlog: 0/10 bound, 0.0 s, load n/a"; got != want {
		t.Errorf("progressLine without a load = %q, want %q", got, want)
	}
}

// lockedBuilder is a strings.Builder safe for concurrent use.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestRunMonitor(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out lockedBuilder
	var mu sync.Mutex
	bound := 3
	m := startMonitor(&out, time.Millisecond, "kube-scheduler stream", 10, time.Now(), func() int {
		mu.Lock()
		defer mu.Unlock()
		bound++
		return bound
	})
	for strings.Count(out.String(), "\n") < 3 {
		time.Sleep(time.Millisecond)
	}
	st := m.stop()
	printed := out.String()
	line := regexp.MustCompile(`^  kube-scheduler stream: (\d+)/10 bound, \d+\.\d s, load (\d+\.\d\d|n/a)$`)
	for i, l := range strings.Split(strings.TrimSuffix(printed, "\n"), "\n") {
		if got := line.FindStringSubmatch(l); got == nil {
			t.Errorf("progress line %d = %q, want one like %q", i, l, line)
		} else if want := []string{"4", "5", "6"}; i < len(want) && got[1] != want[i] {
			t.Errorf("progress line %d reports %s bound, want %s", i, got[1], want[i])
		}
	}
	time.Sleep(5 * time.Millisecond)
	if out.String() != printed {
		t.Error("the monitor printed after stop")
	}
	if again := m.stop(); again != st {
		t.Errorf("second stop = %+v, want %+v", again, st)
	}
	if _, _, _, err := procstat.LoadAvg(); err == nil {
		if l := reportLoad(st); l == nil || l.Samples < 1 || l.CPUs < 1 {
			t.Errorf("reportLoad(%+v) = %+v, want at least the reading at stop and the CPUs", st, l)
		}
	}
	if l := reportLoad((*runMonitor)(nil).stop()); l != nil {
		t.Errorf("a run whose clock never started reports load %+v, want none", l)
	}
}

// jobMadeNote splits the pods of multi-pod jobs' create→bound into the
// wait for the job's last pod and the scheduler's part after it.
func TestJobMadeNote(t *testing.T) {
	if got := jobMadeNote(nil, nil); got != "" {
		t.Errorf("no job of several pods: %q, want no note", got)
	}
	making := []float64{4, 0, 2, 1}
	fromLast := []float64{0.5, 0.2, 0.3}
	got := jobMadeNote(making, fromLast)
	for _, want := range []string{"(4)", "last pod p50 1.000 s, p99 4.000 s, max 4.000 s", "p50 0.300 s, p99 0.500 s, max 0.500 s"} {
		if !strings.Contains(got, want) {
			t.Errorf("note %q lacks %q", got, want)
		}
	}
}

// A missed p99 of a run with gangs says how long their pods waited for the
// job's last pod and what came after it; a run without them says nothing.
func TestTargetsExplainTheGangsWait(t *testing.T) {
	results := []result{
		{mode: modeStream, sys: sysSpec{name: "shardsched-proc-1", shards: 1}, makingP99: 21.5, fromLastP99: 2.4},
		{mode: modeStream, sys: sysSpec{name: "shardsched-proc-2", shards: 2}},
	}
	runs := []report.Run{{LatencyP99: 23}, {LatencyP99: 3}}
	var whys []string
	for _, tg := range targets(results, runs) {
		if strings.HasPrefix(tg.Name, "p99 create→bound") {
			if tg.Met {
				t.Errorf("%s: met with p99 above 2 s", tg.Name)
			}
			whys = append(whys, tg.Why)
		}
	}
	if len(whys) != 2 || !strings.Contains(whys[0], "up to 21.50 s") || !strings.Contains(whys[0], "p99 is 2.40 s") || whys[1] != "" {
		t.Errorf("p99 targets' reasons: %q", whys)
	}
}

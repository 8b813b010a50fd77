package procstat

import (
	"errors"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseLoadAvg(t *testing.T) {
	one, five, fifteen, err := parseLoadAvg("1.85 0.58 12.00 3/389 12345\n")
	if err != nil {
		t.Fatalf("parseLoadAvg: %v", err)
	}
	if one != 1.85 || five != 0.58 || fifteen != 12 {
		t.Errorf("parseLoadAvg = %v %v %v, want 1.85 0.58 12", one, five, fifteen)
	}
	for _, bad := range []string{"", "0.1 0.2", "0.1 x 0.3 1/2 3", "-1 0.2 0.3 1/2 3"} {
		if _, _, _, err := parseLoadAvg(bad); err == nil || !strings.Contains(err.Error(), "/proc/loadavg") {
			t.Errorf("parseLoadAvg(%q): err = %v, want one naming /proc/loadavg", bad, err)
		}
	}
}

func TestLoadAvgReadsThisMachine(t *testing.T) {
	one, five, fifteen, err := LoadAvg()
	if err != nil {
		t.Skipf("no load average here: %v", err)
	}
	if one < 0 || five < 0 || fifteen < 0 {
		t.Errorf("LoadAvg = %v %v %v: negative", one, five, fifteen)
	}
}

// readings returns a reading function that yields vs one after the other
// (then the last forever) and the number of calls made so far.
func readings(vs ...float64) (func() (float64, error), func() int) {
	var mu sync.Mutex
	n := 0
	return func() (float64, error) {
			mu.Lock()
			defer mu.Unlock()
			v := vs[min(n, len(vs)-1)]
			n++
			if math.IsNaN(v) {
				return 0, errors.New("no reading")
			}
			return v, nil
		}, func() int {
			mu.Lock()
			defer mu.Unlock()
			return n
		}
}

func TestLoadSampler(t *testing.T) {
	read, calls := readings(0.5, 1, 3, 2)
	s := startLoadSampler(time.Millisecond, read)
	for calls() < 3 {
		time.Sleep(time.Millisecond)
	}
	st := s.Stop()
	if st.Before != 0.5 {
		t.Errorf("Before = %v, want the first reading 0.5", st.Before)
	}
	// After the first reading: 1, 3, then 2 until Stop (its last reading
	// included), so the mean lies in (1, 3) and tends to 2.
	if st.Max != 3 || st.Samples < 3 || st.Samples != calls()-1 || st.Err != nil {
		t.Errorf("Stop = %+v after %d readings, want max 3 over every reading but the first", st, calls())
	}
	if want := (1 + 3 + 2*float64(st.Samples-2)) / float64(st.Samples); math.Abs(st.Mean-want) > 1e-9 {
		t.Errorf("Mean = %v, want %v", st.Mean, want)
	}
	n := calls()
	if again := s.Stop(); again != st {
		t.Errorf("second Stop = %+v, want %+v", again, st)
	}
	time.Sleep(5 * time.Millisecond)
	if calls() != n {
		t.Errorf("the sampler read the load %d times after Stop", calls()-n)
	}
}

func TestLoadSamplerStopsAtOnce(t *testing.T) {
	read, calls := readings(0.25, 0.75)
	s := startLoadSampler(time.Hour, read)
	st := s.Stop()
	if st.Before != 0.25 || st.Samples != 1 || st.Mean != 0.75 || st.Max != 0.75 || calls() != 2 {
		t.Errorf("Stop before the first tick = %+v after %d readings, want before 0.25 and Stop's own reading 0.75", st, calls())
	}
}

func TestLoadSamplerKeepsFailures(t *testing.T) {
	read, calls := readings(math.NaN(), 1, math.NaN(), 2)
	s := startLoadSampler(time.Millisecond, read)
	for calls() < 4 {
		time.Sleep(time.Millisecond)
	}
	st := s.Stop()
	if st.Err == nil || st.Before != 0 {
		t.Errorf("Stop = %+v, want the failed first reading in Err and Before 0", st)
	}
	if st.Samples < 2 || st.Max != 2 {
		t.Errorf("Stop = %+v, want the good readings (1, then 2s) counted and the failed one left out", st)
	}
}

func TestLoadSamplerConcurrentStop(t *testing.T) {
	read, _ := readings(1)
	s := startLoadSampler(time.Millisecond, read)
	var wg sync.WaitGroup
	got := make([]LoadStats, 8)
	for i := range got {
		wg.Go(func() { got[i] = s.Stop() })
	}
	wg.Wait()
	for i, st := range got {
		if st != got[0] || st.Samples == 0 {
			t.Errorf("Stop #%d = %+v, want %+v with at least one reading", i, st, got[0])
		}
	}
}

func TestParseVmHWM(t *testing.T) {
	got, err := parseVmHWM("Name:\tshardsched\nVmPeak:\t 2000000 kB\nVmHWM:\t  524288 kB\nVmRSS:\t  1000 kB\n")
	if err != nil || got != 512 {
		t.Fatalf("VmHWM 524288 kB: %g MiB, %v; want 512", got, err)
	}
	for _, bad := range []string{"VmRSS:\t 1 kB\n", "VmHWM:\t x kB\n", "VmHWM:\t 12 MB\n"} {
		if _, err := parseVmHWM(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseResident(t *testing.T) {
	got, err := parseResident("VmHWM:\t 9000 kB\nVmRSS:\t 3072 kB\nRssAnon:\t 2048 kB\nRssFile:\t 1024 kB\nRssShmem:\t 0 kB\n")
	if want := (Resident{Total: 3, Anon: 2, File: 1}); err != nil || got != want {
		t.Fatalf("parseResident = %+v, %v; want %+v", got, err, want)
	}
	if _, err := parseResident("VmRSS:\t 3072 kB\nRssAnon:\t 2048 kB\n"); err == nil {
		t.Error("no RssFile line: no error")
	}
	if r, err := ResidentMiB(); err != nil || r.Total <= 0 || r.Anon <= 0 {
		t.Errorf("ResidentMiB of this test process = %+v, %v; want positive figures", r, err)
	}
}

func TestParseProcStat(t *testing.T) {
	// A command name with a space and a ')' of its own: the fields are
	// counted from the last ')'. utime 250 and stime 50 ticks are 3 s.
	stat := "4242 (kube ap)i) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0"
	if got, err := parseProcStat(stat); err != nil || got != 3*time.Second {
		t.Fatalf("parseProcStat = %v, %v; want 3s", got, err)
	}
	for _, bad := range []string{"4242 kube S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 u 50 0"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	got, err := CPUOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn some CPU in this process: the reading must grow.
	deadline := time.Now().Add(50 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		_ = strings.Repeat("x", n%64)
	}
	if again, err := CPUOf(os.Getpid()); err != nil || again <= got {
		t.Errorf("CPUOf this process after 50 ms of work: %v then %v, %v; want it to grow", got, again, err)
	}
}

func TestParseMachineBusy(t *testing.T) {
	// busy = user + nice + system + irq + softirq + steal = 100+10+40+3+2+5 = 160 ticks;
	// idle (900) and iowait (20) are not counted, nor guest (7), inside user.
	stat := "cpu  100 10 40 900 20 3 2 5 7 0\ncpu0 50 5 20 450 10 1 1 2 3 0\n"
	if got, err := parseMachineBusy(stat); err != nil || got != 1600*time.Millisecond {
		t.Fatalf("parseMachineBusy = %v, %v; want 1.6s", got, err)
	}
	for _, bad := range []string{"cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n"} {
		if _, err := parseMachineBusy(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if b, err := MachineBusy(); err != nil || b <= 0 {
		t.Errorf("MachineBusy = %v, %v; want a positive time", b, err)
	}
}

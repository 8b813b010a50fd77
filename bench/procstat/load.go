package procstat

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// loadAvgPath is where Linux publishes the load average.
const loadAvgPath = "/proc/loadavg"

// LoadAvg reads the machine's load average (runnable and uninterruptible
// tasks, exponentially averaged) over 1, 5 and 15 minutes from
// /proc/loadavg. It fails where that file does not exist (not Linux).
func LoadAvg() (one, five, fifteen float64, err error) {
	b, err := os.ReadFile(loadAvgPath)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read the load average: %w", err)
	}
	return parseLoadAvg(string(b))
}

// parseLoadAvg parses the content of /proc/loadavg, e.g.
// "0.52 0.58 0.59 1/389 12345": its first three fields are the 1-, 5- and
// 15-minute load averages.
func parseLoadAvg(s string) (one, five, fifteen float64, err error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return 0, 0, 0, fmt.Errorf("parse %s %q: want at least 3 fields, got %d", loadAvgPath, s, len(f))
	}
	var v [3]float64
	for i := range v {
		if v[i], err = strconv.ParseFloat(f[i], 64); err != nil || v[i] < 0 {
			return 0, 0, 0, fmt.Errorf("parse %s %q: field %d (%q) is not a load average", loadAvgPath, s, i+1, f[i])
		}
	}
	return v[0], v[1], v[2], nil
}

// LoadStats is what a LoadSampler saw of the 1-minute load average.
type LoadStats struct {
	// Before is the reading taken when the sampler started.
	Before float64
	// Mean and Max are over the readings taken after it started: one
	// every interval and one when it stopped.
	Mean, Max float64
	// Samples counts those readings (the ones that succeeded).
	Samples int
	// CPUs is runtime.NumCPU when the sampler started: the load average
	// is to be read against it.
	CPUs int
	// Err is the first reading that failed, Before's included (nil when
	// none did); where /proc/loadavg cannot be read, every reading fails
	// and Samples is 0.
	Err error
}

// LoadSampler reads the 1-minute load average when it starts, then every
// interval on a goroutine of its own until Stop, which ends that
// goroutine. Stop may be called from any goroutine, any number of times.
type LoadSampler struct {
	read func() (float64, error) // one reading of the 1-minute load average
	stop chan struct{}           // closed by the first Stop
	done chan struct{}           // closed when the goroutine has returned
	once sync.Once

	// mu guards the fields below it; the goroutine writes them, Stop
	// reads them once the goroutine is done.
	mu    sync.Mutex
	stats LoadStats
	sum   float64
}

// StartLoadSampler takes the reading "before" at once and starts sampling
// every interval (a non-positive interval means one second).
func StartLoadSampler(interval time.Duration) *LoadSampler {
	return startLoadSampler(interval, loadAvg1)
}

// startLoadSampler is StartLoadSampler with the reading as a parameter.
func startLoadSampler(interval time.Duration, read func() (float64, error)) *LoadSampler {
	if interval <= 0 {
		interval = time.Second
	}
	s := &LoadSampler{read: read, stop: make(chan struct{}), done: make(chan struct{})}
	s.stats.Before, s.stats.Err = read()
	s.stats.CPUs = runtime.NumCPU()
	go s.run(interval)
	return s
}

// loadAvg1 is the 1-minute load average.
func loadAvg1() (float64, error) {
	one, _, _, err := LoadAvg()
	return one, err
}

// run samples every interval until stop is closed, then once more.
func (s *LoadSampler) run(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.sample()
		case <-s.stop:
			s.sample()
			return
		}
	}
}

// sample adds one reading of the 1-minute load average; a failed reading
// is left out, and the first failure is kept in Err.
func (s *LoadSampler) sample() {
	one, err := s.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.stats.Err == nil {
			s.stats.Err = err
		}
		return
	}
	s.stats.Samples++
	s.sum += one
	s.stats.Max = max(s.stats.Max, one)
}

// Stop ends the sampling (taking a last reading), waits for the goroutine
// to return and reports what was seen. Later calls report the same.
func (s *LoadSampler) Stop() LoadStats {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	if st.Samples > 0 {
		st.Mean = s.sum / float64(st.Samples)
	}
	return st
}

// Package procstat reads what the bench process itself uses: its CPU time
// and its resident memory. Both bench modes measure their own cost with it.
package procstat

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU is the CPU time (user and system) of this process so far.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RSSMiB is the resident memory of this process in MiB (0 when
// /proc/self/statm cannot be read).
func RSSMiB() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseFloat(f[1], 64)
	return pages * float64(os.Getpagesize()) / (1 << 20)
}

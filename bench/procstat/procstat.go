// Package procstat reads what the bench process itself uses (its CPU time
// and its resident memory) and how loaded the machine is (its load
// average, sampled over a run by LoadSampler). Both bench modes measure
// their own cost and the conditions of their figures with it. It only
// reads; it keeps no state beyond a LoadSampler's own.
package procstat

import (
	"fmt"
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

// PeakRSSMiBOf is the peak resident memory (VmHWM) of process pid in MiB.
func PeakRSSMiBOf(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	return parseVmHWM(string(b))
}

// parseVmHWM reads the VmHWM line ("VmHWM:    123456 kB") of a
// /proc/<pid>/status text, in MiB.
func parseVmHWM(status string) (float64, error) {
	return statusMiB(status, "VmHWM")
}

// statusMiB reads the line "<field>:    123456 kB" of a /proc/<pid>/status
// text, in MiB.
func statusMiB(status, field string) (float64, error) {
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("malformed %s line %q", field, line)
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("malformed %s line %q: %w", field, line, err)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("no %s line (not a Linux /proc status, or a kernel thread)", field)
}

// Resident is a process's resident memory in MiB, split as the kernel
// counts it: anonymous pages (the Go heap, stacks) and file pages mapped
// in (such as an embedded etcd's database, which is memory-mapped).
type Resident struct {
	Total, Anon, File float64
}

// ResidentMiB reads this process's resident memory from /proc/self/status.
func ResidentMiB() (Resident, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return Resident{}, err
	}
	return parseResident(string(b))
}

func parseResident(status string) (Resident, error) {
	var r Resident
	var err error
	if r.Total, err = statusMiB(status, "VmRSS"); err != nil {
		return Resident{}, err
	}
	if r.Anon, err = statusMiB(status, "RssAnon"); err != nil {
		return Resident{}, err
	}
	if r.File, err = statusMiB(status, "RssFile"); err != nil {
		return Resident{}, err
	}
	return r, nil
}

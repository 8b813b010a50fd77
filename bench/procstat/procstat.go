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

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat and
// /proc/stat: 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPUOf is the CPU time (user and system) process pid has used so far,
// read from /proc/<pid>/stat.
func CPUOf(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat reads utime + stime of a /proc/<pid>/stat text. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses of its own, so the fields are counted from the last ')':
// the state (field 3) comes first, utime and stime (fields 14 and 15)
// are the 12th and 13th after it.
func parseProcStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat %q", s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat %q", s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc stat times %q %q", f[11], f[12])
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// MachineBusy is the CPU time every core of the machine has spent busy
// (neither idle nor waiting for I/O) since boot, summed over the cores,
// from /proc/stat. The difference of two readings over a run is what
// every process on the machine used in it, the ones a bench does not
// start included.
func MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineBusy(string(b))
}

// parseMachineBusy reads the first ("cpu ") line of a /proc/stat text:
// user nice system idle iowait irq softirq steal [guest guest_nice]. Busy
// is every field but idle and iowait up to steal (guest time is already
// inside user).
func parseMachineBusy(s string) (time.Duration, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("malformed /proc/stat first line %q", line)
	}
	var busy int64
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed /proc/stat field %d %q", i+1, v)
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}

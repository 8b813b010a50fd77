package main

import (
	"os/exec"
	"runtime"
	"testing"
)

// A stopped process's peak RSS is its own, not the harness's: the harness
// here holds 256 MiB when it starts a process that holds next to nothing,
// and Linux carries the forking process's high-water mark into the child's
// rusage (which is what stop reported before).
func TestStoppedProcessPeakIsItsOwn(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("no sleep binary: %v", err)
	}
	held := make([]byte, 256<<20)
	for i := range held {
		held[i] = 1
	}
	p, err := startSchedulerProcess(t.TempDir(), sleep, "30")
	if err != nil {
		t.Fatal(err)
	}
	peak := p.stop()
	runtime.KeepAlive(held)
	if peak <= 0 || peak > 64<<10 {
		t.Errorf("peak RSS of a sleeping process: %d KiB, want its own (above 0, far below the harness's 256 MiB)", peak)
	}
	if !p.exited() {
		t.Error("the process outlived stop")
	}
}

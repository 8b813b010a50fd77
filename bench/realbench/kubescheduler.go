package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/internal/cluster"
)

// kubeSchedulerSystem runs the kube-scheduler binary built by
// `hack/controlplane.sh kube-scheduler` as a process of its own against the
// bench's control plane: one profile whose schedulerName is the run's, leader
// election off, secure serving on a free loopback port (only /readyz is
// read), every other setting at its default.
type kubeSchedulerSystem struct {
	bin string
	// qps and burst of the client connection; 0 keeps kube-scheduler's
	// defaults (50 and 100).
	qps, burst int
}

// kubeSchedulerBinary returns the cached kube-scheduler, or an error that
// says how to build it.
func kubeSchedulerBinary() (string, error) {
	p := filepath.Join(cluster.CacheDir(), "k8s-"+cluster.KubeVersion, "kube-scheduler")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("kube-scheduler %s is not built: run `make bench-tools` (or hack/controlplane.sh kube-scheduler) once: %w", cluster.KubeVersion, err)
	}
	return p, nil
}

// kubeSchedulerConfig is the KubeSchedulerConfiguration (v1) the bench
// writes; JSON is valid YAML, so kube-scheduler reads it as is.
func (k kubeSchedulerSystem) config(kubeconfig, schedName string) ([]byte, error) {
	conn := map[string]any{"kubeconfig": kubeconfig}
	if k.qps > 0 {
		conn["qps"], conn["burst"] = k.qps, k.burst
	}
	return json.MarshalIndent(map[string]any{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"clientConnection": conn,
		"leaderElection":   map[string]any{"leaderElect": false},
		"profiles":         []map[string]any{{"schedulerName": schedName}},
	}, "", "  ")
}

func (k kubeSchedulerSystem) start(ctx context.Context, env *benchEnv, run runSpec) (*instance, error) {
	p, readyz, err := k.startProcess(env, run.namespace, run.schedName)
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(ctx, readyz, 2*time.Minute); err != nil {
		p.stop()
		return nil, err
	}
	return &instance{
		cpu:   p.cpu,
		check: p.check,
		stop:  p.stop,
	}, nil
}

// startProcess starts kube-scheduler with its state in a directory named
// after name, scheduling the pods that ask for schedName; it returns the
// process and its /readyz URL.
func (k kubeSchedulerSystem) startProcess(env *benchEnv, name, schedName string) (*schedulerProcess, string, error) {
	dir := filepath.Join(env.dir, "kube-scheduler-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	cfg, err := k.config(env.kubeconfig, schedName)
	if err != nil {
		return nil, "", err
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return nil, "", err
	}
	port, err := cluster.FreePort()
	if err != nil {
		return nil, "", err
	}
	p, err := startSchedulerProcess(dir, k.bin,
		"--config="+cfgPath,
		"--authentication-kubeconfig="+env.kubeconfig,
		"--authorization-kubeconfig="+env.kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--v=0")
	if err != nil {
		return nil, "", err
	}
	return p, fmt.Sprintf("https://127.0.0.1:%d/readyz", port), nil
}

// schedulerProcess is a child process in a process group of its own, which
// dies with the bench (Pdeathsig).
type schedulerProcess struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once cmd.Wait returned
	err  error         // cmd.Wait's error, set before done is closed
}

func startSchedulerProcess(dir, bin string, args ...string) (*schedulerProcess, error) {
	logPath := filepath.Join(dir, filepath.Base(bin)+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &schedulerProcess{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *schedulerProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// check returns an error, with the end of the log, once the process has
// exited.
func (p *schedulerProcess) check() error {
	if !p.exited() {
		return nil
	}
	b, _ := os.ReadFile(p.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return fmt.Errorf("%s exited (%v); last log lines:\n%s", filepath.Base(p.cmd.Path), p.err, b)
}

// waitReady polls url (the process's /readyz) until it answers 200.
func (p *schedulerProcess) waitReady(ctx context.Context, url string, timeout time.Duration) error {
	last, err := cluster.WaitHTTPOK(ctx, url, nil, timeout, p.check)
	if err != nil && last != "" {
		return fmt.Errorf("%s not ready after %s (%s); log: %s", filepath.Base(p.cmd.Path), timeout, last, p.log)
	}
	return err
}

// cpu returns the CPU time the process used so far: from /proc while it
// runs, from its rusage once it has exited.
func (p *schedulerProcess) cpu() time.Duration {
	if p.exited() {
		if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		return 0
	}
	d, err := procstat.CPUOf(p.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return d
}

// peakRSSKiB is the process's peak RSS so far (its VmHWM), 0 once it has
// exited (unknown). Never its rusage: a child started by fork and exec
// carries in its ru_maxrss the high-water mark of the process it was
// forked from (Linux keeps it across exec), and the harness holds every
// pod of the run (at 250,000 pods the shard's "peak" was the harness's
// 1.6 GiB).
func (p *schedulerProcess) peakRSSKiB() int64 {
	if p.exited() {
		return 0
	}
	mib, err := procstat.PeakRSSMiBOf(p.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return int64(math.Round(mib * 1024))
}

// stop sends SIGTERM to the process group, SIGKILL after 10 s, waits for
// the process and returns its peak RSS in KiB up to the stop (peakRSSKiB).
func (p *schedulerProcess) stop() int64 {
	pgid := p.cmd.Process.Pid
	peak := p.peakRSSKiB()
	if !p.exited() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
	}
	// Nothing else of the group may outlive the run.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return peak
}

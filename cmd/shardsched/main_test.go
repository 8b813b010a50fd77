package main

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/scheduler"
)

func TestFlagsValidateNamesTheFlag(t *testing.T) {
	base := []string{"--shard-name=s0", "--etcd-endpoints=127.0.0.1:2379", "--insecure-coordinator"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--etcd-endpoints=x"}, "--shard-name"},
		{[]string{"--shard-name=s0"}, "--etcd-endpoints"},
		{append(base, "--partitions=0"), "--partitions"},
		{append(base, "--node-pools=^gpu-"), "--node-pools"},
		{append(base, "--node-pools=^(gpu"), "--node-pools"},
		{append(base, "--session-ttl=-1"), "--session-ttl"},
		{append(base, "--status-flush-interval=1ns"), "--status-flush-interval"},
		{append(base, "--cycle-interval=0s"), "--cycle-interval"},
		{append(base, "--cycle-interval=1m"), "--cycle-interval"},
		{append(base, "--podgroup-counts-interval=-1s"), "--podgroup-counts-interval"},
		{append(base, "--queue-counts-interval=11m"), "--queue-counts-interval"},
		{append(base, "--gossip-port=70000"), "--gossip-port"},
		{append(base, "--gossip-advertise-port=-2"), "--gossip-advertise-port"},
		{append(base, "--etcd-cert-file=/x"), "--etcd-cert-file"},
		{append(base, "--coordinator-addr=nonsense"), "--coordinator-addr"},
		{append(base, "--log-level=loud"), "--log-level"},
		{append(base, "--coordinator-max-group-ops=0"), "--coordinator-max-group-ops"},
		{append(base, "--bind-workers=0"), "--bind-workers"},
		{append(base, "--bind-workers=2000"), "--bind-workers"},
		{append(base, "--coordinator-max-group-ops=5000"), "--coordinator-max-group-ops"},
		{[]string{"--shard-name=s0", "--etcd-endpoints=x"}, "--coordinator-token-file"},
		{append(base, "--coordinator-token-file=/x"), "--coordinator-token-file"},
		{append(base, "--gc-heap-floor=lots"), "--gc-heap-floor"},
		{append(base, "--gc-heap-floor=-1Mi"), "--gc-heap-floor"},
		{append(base, "--gc-heap-floor=65Gi"), "--gc-heap-floor"},
		{append(base, "--gc-heap-floor=100m"), "--gc-heap-floor"}, // milli: a tenth of a byte
	}
	for _, c := range cases {
		_, err := parse(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parse(%v) = %v, want an error naming %s", c.args, err, c.want)
		}
	}
	if _, err := parse(base); err != nil {
		t.Fatalf("valid flags refused: %v", err)
	}
}

// Implicit PodGroups are on by default and off with the flag (Volcano's
// podgroup controller creates them when it runs beside the shards).
func TestImplicitPodGroupsFlag(t *testing.T) {
	base := []string{"--shard-name=s0", "--etcd-endpoints=127.0.0.1:2379", "--insecure-coordinator"}
	o, err := parse(base)
	if err != nil || !o.implicitGroups {
		t.Fatalf("default: implicit %v err %v, want on", o.implicitGroups, err)
	}
	o, err = parse(append(base, "--implicit-podgroups=false"))
	if err != nil || o.implicitGroups {
		t.Fatalf("--implicit-podgroups=false: implicit %v err %v, want off", o.implicitGroups, err)
	}
	if _, err := parse(append(base, "--implicit-podgroups=maybe")); err == nil || !strings.Contains(err.Error(), "implicit-podgroups") {
		t.Fatalf("--implicit-podgroups=maybe: err %v, want one naming the flag", err)
	}
}

// --version answers before any other flag is checked (no shard name or
// etcd needed to ask a binary what it is).
func TestVersionFlag(t *testing.T) {
	if _, err := parse([]string{"--version"}); !errors.Is(err, errVersion) {
		t.Fatalf("parse(--version) = %v, want errVersion", err)
	}
	if _, err := parse([]string{"--shard-name=s0", "--etcd-endpoints=x"}); errors.Is(err, errVersion) {
		t.Fatal("errVersion without --version")
	}
}

// The coordinator token is standard base64 of at least 24 bytes; the
// deploy/ placeholder, a short token or a missing file are refused with a
// message naming the flag.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	if tok, err := readToken(write("good", good+"\n")); err != nil || tok != good {
		t.Fatalf("readToken(a 32-byte token) = %q, %v; want it, trimmed", tok, err)
	}
	for name, content := range map[string]string{
		"placeholder": "REPLACE-ME-with-a-random-token-see-deploy-README",
		"short":       base64.StdEncoding.EncodeToString([]byte("sixteen bytes!!!")),
		"empty":       "",
	} {
		if _, err := readToken(write(name, content)); err == nil || !strings.Contains(err.Error(), "--coordinator-token-file") {
			t.Errorf("readToken(%s) = %v, want an error naming --coordinator-token-file", name, err)
		}
	}
	if _, err := readToken(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--coordinator-token-file") {
		t.Errorf("readToken(missing file) = %v, want an error naming the flag", err)
	}
}

// --cycle-interval defaults to the scheduler's period and takes a value in
// its range as given.
func TestCycleIntervalFlag(t *testing.T) {
	base := []string{"--shard-name=s0", "--etcd-endpoints=127.0.0.1:2379", "--insecure-coordinator"}
	o, err := parse(base)
	if err != nil || o.cycleInterval != scheduler.DefaultCycleInterval {
		t.Fatalf("default: %v (err %v), want %v", o.cycleInterval, err, scheduler.DefaultCycleInterval)
	}
	o, err = parse(append(base, "--cycle-interval=250ms"))
	if err != nil || o.cycleInterval != 250*time.Millisecond {
		t.Fatalf("--cycle-interval=250ms: %v (err %v)", o.cycleInterval, err)
	}
}

func TestGCHeapFloorFlag(t *testing.T) {
	base := []string{"--shard-name=s0", "--etcd-endpoints=127.0.0.1:2379", "--insecure-coordinator"}
	for _, c := range []struct {
		flag string
		want uint64
	}{
		{"", 256 << 20}, // the default
		{"--gc-heap-floor=1Gi", 1 << 30},
		{"--gc-heap-floor=100M", 100e6},
		{"--gc-heap-floor=0", 0},
	} {
		args := base
		if c.flag != "" {
			args = append(append([]string(nil), base...), c.flag)
		}
		o, err := parse(args)
		if err != nil || o.gcFloor != c.want {
			t.Errorf("%q: floor %d (err %v), want %d", c.flag, o.gcFloor, err, c.want)
		}
	}
}

package shard

// Golden scenario tests for Machine, plus a determinism test and a random
// event property test.
//
// Each testdata/machine/*.txt file drives one Machine through datadriven
// (github.com/cockroachdb/datadriven) directives:
//
//	<command> [arg=value ...]
//	----
//	<expected output lines>
//
// separated by blank lines; lines starting with # are comments. Run with
// datadriven's -rewrite flag to replace the expected output with the actual
// output (review the diff before committing it).
//
// Commands (the machine is created at virtual time 0 with RetryAfter=1s and
// LeaseMargin=3s):
//
//	lease until=<dur>            LeaseRenewed(start+dur)
//	tick by=<dur>                advance the virtual clock by dur, then Tick
//	desire [keys=(<key>, ...)]   SetDesired (no keys: the empty set)
//	acquired key=<key> epoch=N   Acquired
//	refused key=<key>            AcquireRefused
//	released key=<key>           Released
//	release-failed key=<key>     ReleaseFailed
//	lost key=<key>               Lost
//	deleted key=<key>            RecordDeleted
//	done key=<key>               Done
//	use key=<key>                Use: prints "ok epoch=N" or "refused"
//	holds key=<key>              Holds: prints true or false
//	state                        the clock and lease, every key the machine knows
//	                             (sorted) with its state, in-flight uses, epoch and
//	                             retry time, then "held: ..." from Held()
//
// Every event command prints the actions it returned, one per line
// ("acquire p/1", "release q/a"), or "(none)".
//
// After every command, machineInvariants checks the machine and the
// actions the command returned; a broken invariant fails the test (it is
// never written into the expected output, with -rewrite or without).

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/shardsched/shardsched/wire"
)

// scnStart is the virtual clock's origin; durations in scenarios are
// relative to it.
var scnStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

var scnConfig = MachineConfig{RetryAfter: time.Second, LeaseMargin: 3 * time.Second}

func TestMachineScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		e := newScnEnv()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return e.run(t, d)
		})
	})
}

// runScenarioText runs an inline scenario; used by the known-issue tests,
// which state the behaviour the machine should have.
func runScenarioText(t *testing.T, text string) {
	t.Helper()
	e := newScnEnv()
	datadriven.RunTestFromString(t, text, func(t *testing.T, d *datadriven.TestData) string {
		return e.run(t, d)
	})
}

// scnEnv is the state of one scenario: the machine and the virtual clock.
type scnEnv struct {
	m   *Machine
	now time.Duration // since scnStart
	// check runs after every command: machineInvariants, but for the test
	// that a broken invariant fails the scenario.
	check func(m *Machine, acts []Action) error
}

func newScnEnv() *scnEnv {
	return &scnEnv{m: NewMachine(scnConfig, scnStart), check: machineInvariants}
}

// run executes one directive and checks the invariants after it: a bad
// directive or a broken invariant fails the test at the directive's line.
func (e *scnEnv) run(t testing.TB, d *datadriven.TestData) string {
	t.Helper()
	out, acts, err := e.exec(d)
	if err != nil {
		d.Fatalf(t, "%s: %v", d.FullCmd(), err)
	}
	if err := e.check(e.m, acts); err != nil {
		d.Fatalf(t, "%s: invariant broken: %v", d.FullCmd(), err)
	}
	return strings.Join(out, "\n")
}

// exec runs one directive; acts are the actions an event returned (nil
// for the other commands).
func (e *scnEnv) exec(d *datadriven.TestData) (out []string, acts []Action, err error) {
	switch d.Cmd {
	case "lease":
		v, err := scnArgs(d, "until")
		if err != nil {
			return nil, nil, err
		}
		until, err := time.ParseDuration(v["until"])
		if err != nil {
			return nil, nil, err
		}
		acts = e.m.LeaseRenewed(scnStart.Add(until))
	case "tick":
		v, err := scnArgs(d, "by")
		if err != nil {
			return nil, nil, err
		}
		by, err := time.ParseDuration(v["by"])
		if err != nil {
			return nil, nil, err
		}
		if by < 0 {
			return nil, nil, fmt.Errorf("negative duration %v", by)
		}
		e.now += by
		acts = e.m.Tick(scnStart.Add(e.now))
	case "desire":
		var keys []string
		for _, a := range d.CmdArgs {
			if a.Key != "keys" {
				return nil, nil, fmt.Errorf("unexpected argument %q (want keys=)", a.Key)
			}
			keys = append(keys, a.Vals...)
		}
		for _, k := range keys {
			if !scnValidKey(k) {
				return nil, nil, fmt.Errorf("bad key %q", k)
			}
		}
		acts = e.m.SetDesired(keys)
	case "acquired":
		v, err := scnArgs(d, "key", "epoch")
		if err != nil {
			return nil, nil, err
		}
		epoch, err := strconv.ParseInt(v["epoch"], 10, 64)
		if err != nil {
			return nil, nil, err
		}
		acts = e.m.Acquired(v["key"], epoch)
	case "refused", "released", "release-failed", "lost", "deleted", "done", "use", "holds":
		v, err := scnArgs(d, "key")
		if err != nil {
			return nil, nil, err
		}
		key := v["key"]
		switch d.Cmd {
		case "refused":
			acts = e.m.AcquireRefused(key)
		case "released":
			acts = e.m.Released(key)
		case "release-failed":
			acts = e.m.ReleaseFailed(key)
		case "lost":
			acts = e.m.Lost(key)
		case "deleted":
			acts = e.m.RecordDeleted(key)
		case "done":
			acts = e.m.Done(key)
		case "use":
			epoch, ok := e.m.Use(key)
			if !ok {
				return []string{"refused"}, nil, nil
			}
			return []string{fmt.Sprintf("ok epoch=%d", epoch)}, nil, nil
		case "holds":
			return []string{strconv.FormatBool(e.m.Holds(key))}, nil, nil
		}
	case "state":
		if _, err := scnArgs(d); err != nil {
			return nil, nil, err
		}
		return e.state(), nil, nil
	default:
		return nil, nil, fmt.Errorf("unknown command %q", d.Cmd)
	}
	return formatActions(acts), acts, nil
}

func (e *scnEnv) state() []string {
	m := e.m
	lease := "none"
	if !m.leaseUntil.IsZero() {
		lease = m.leaseUntil.Sub(scnStart).String()
	}
	out := []string{fmt.Sprintf("now=%v lease-until=%s usable=%t", e.now, lease, m.leaseFresh())}
	var keys []string
	for k := range m.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		st, inflight := m.State(key)
		line := fmt.Sprintf("%s %s inflight=%d", key, st, inflight)
		k := m.keys[key]
		if k.epoch != 0 {
			line += fmt.Sprintf(" epoch=%d", k.epoch)
		}
		if st == Waiting {
			line += fmt.Sprintf(" retry-at=%v", k.retryAt.Sub(scnStart))
		}
		out = append(out, line)
	}
	held := m.Held()
	if len(held) == 0 {
		out = append(out, "held: (none)")
	} else {
		out = append(out, "held: "+strings.Join(held, " "))
	}
	return out
}

func formatActions(acts []Action) []string {
	if len(acts) == 0 {
		return []string{"(none)"}
	}
	out := make([]string, len(acts))
	for i, a := range acts {
		out[i] = a.Kind.String() + " " + a.Key
	}
	return out
}

// scnValidKey accepts ring keys: "p/<decimal>" or "q/<name>".
func scnValidKey(k string) bool {
	switch {
	case strings.HasPrefix(k, "p/"):
		n, err := strconv.Atoi(k[2:])
		return err == nil && n >= 0 && strconv.Itoa(n) == k[2:]
	case strings.HasPrefix(k, "q/"):
		return len(k) > 2
	}
	return false
}

// scnArgs reads single-valued arguments, requiring exactly the given
// names; a key= argument must be a ring key.
func scnArgs(d *datadriven.TestData, names ...string) (map[string]string, error) {
	v := map[string]string{}
	for _, a := range d.CmdArgs {
		if !slices.Contains(names, a.Key) {
			return nil, fmt.Errorf("unexpected argument %q (want %v)", a.Key, names)
		}
		if _, dup := v[a.Key]; dup {
			return nil, fmt.Errorf("%s= given twice", a.Key)
		}
		if len(a.Vals) != 1 {
			return nil, fmt.Errorf("%s= wants one value, got %q", a.Key, a.Vals)
		}
		v[a.Key] = a.Vals[0]
	}
	for _, n := range names {
		if _, ok := v[n]; !ok {
			return nil, fmt.Errorf("missing %s=", n)
		}
	}
	if k, ok := v["key"]; ok && !scnValidKey(k) {
		return nil, fmt.Errorf("bad key %q", k)
	}
	return v, nil
}

// machineInvariants checks what must hold after every event: the actions
// are sorted by key with at most one per key and match the keys' new
// states; Held is exactly the keys for which Holds is true, and those are
// in state Held under a fresh lease; Records covers Held.
func machineInvariants(m *Machine, acts []Action) error {
	for i, a := range acts {
		if i > 0 && acts[i-1].Key >= a.Key {
			return fmt.Errorf("actions not sorted by key or two actions for one key: %v", acts)
		}
		st, _ := m.State(a.Key)
		if a.Kind == Acquire && st != Acquiring {
			return fmt.Errorf("acquire %s issued but the key is %v", a.Key, st)
		}
		if a.Kind == Release && st != Releasing {
			return fmt.Errorf("release %s issued but the key is %v", a.Key, st)
		}
	}
	var holds []string
	for key := range m.keys {
		if m.Holds(key) {
			holds = append(holds, key)
			if st, _ := m.State(key); st != Held || !m.leaseFresh() {
				return fmt.Errorf("Holds(%s) but state %v, lease fresh %t", key, st, m.leaseFresh())
			}
		}
	}
	sort.Strings(holds)
	if held := m.Held(); !slices.Equal(held, holds) {
		return fmt.Errorf("Held() = %v, but Holds is true for %v", held, holds)
	}
	recs := m.Records()
	for _, h := range holds {
		if !slices.Contains(recs, h) {
			return fmt.Errorf("held key %s missing from Records() %v", h, recs)
		}
	}
	if !sort.StringsAreSorted(recs) {
		return fmt.Errorf("Records() not sorted: %v", recs)
	}
	return nil
}

// TestMachineActionsSortedAndDeterministic feeds the same event sequence
// (over many keys, so map iteration order would show) to 100 fresh machines
// and requires identical, sorted outputs every time.
func TestMachineActionsSortedAndDeterministic(t *testing.T) {
	var keys []string
	for i := 0; i < 40; i++ {
		keys = append(keys, wire.PartitionKey(i))
	}
	for _, q := range []string{"zeta", "alpha", "mid", "b", "a"} {
		keys = append(keys, wire.QueueKey(q))
	}
	// A fixed scramble of the keys, so SetDesired sees them unsorted.
	r := rand.New(rand.NewPCG(7, 11))
	scrambled := slices.Clone(keys)
	r.Shuffle(len(scrambled), func(i, j int) { scrambled[i], scrambled[j] = scrambled[j], scrambled[i] })
	half := scrambled[:len(scrambled)/2]

	transcript := func() string {
		var sb strings.Builder
		m := NewMachine(scnConfig, scnStart)
		record := func(what string, acts []Action) {
			for i := 1; i < len(acts); i++ {
				a, b := acts[i-1], acts[i]
				if a.Key > b.Key || (a.Key == b.Key && a.Kind >= b.Kind) {
					t.Fatalf("%s: actions not sorted: %v", what, acts)
				}
			}
			fmt.Fprintf(&sb, "%s: %v\n", what, acts)
		}
		record("desire-before-lease", m.SetDesired(scrambled))
		record("lease", m.LeaseRenewed(scnStart.Add(time.Minute)))
		for i, k := range scrambled {
			if i%3 == 0 {
				record("refused "+k, m.AcquireRefused(k))
			} else {
				record("acquired "+k, m.Acquired(k, int64(100+i)))
			}
		}
		for i, k := range scrambled {
			if i%4 == 0 {
				if _, ok := m.Use(k); ok {
					fmt.Fprintf(&sb, "use %s\n", k)
				}
			}
		}
		record("desire-half", m.SetDesired(half))
		record("tick", m.Tick(scnStart.Add(2*time.Second)))
		for _, k := range scrambled {
			record("done "+k, m.Done(k))
		}
		fmt.Fprintf(&sb, "held: %v\nrecords: %v\n", m.Held(), m.Records())
		return sb.String()
	}
	first := transcript()
	for i := 1; i < 100; i++ {
		if got := transcript(); got != first {
			t.Fatalf("run %d differs from run 0:\n%s\nvs\n%s", i, got, first)
		}
	}
}

// propKey is the random test's record of what the shell knows about a key.
type propKey struct {
	acquireOut bool  // an Acquire action is outstanding
	releaseOut int   // Release actions outstanding
	acquired   bool  // last acquire result was Acquired, no Lost/Released since
	epoch      int64 // epoch of that Acquired
	uses       int   // uses started and not yet done
}

// TestMachineRandomUsableOnlyWhenAcquired drives machines with random event
// sequences in which every result answers an action the machine issued
// (delivered in any order and after any delay) and Lost, RecordDeleted,
// clock, lease, ring and use events come at any time. It checks that a key
// is usable (Holds, Held, Use) only if its last acquire result was Acquired
// with no Lost or Released after it and the lease is fresh, that Use
// returns that Acquired's epoch, and that the machine never asks for an
// acquire it should not.
//
// Half the seeds also deliver Lost on keys in state Releasing (the shell
// filters those, but the machine must be safe either way).
func TestMachineRandomUsableOnlyWhenAcquired(t *testing.T) {
	seeds, steps := 300, 400
	if testing.Short() {
		seeds = 50
	}
	var total propStats
	for seed := 1; seed <= seeds; seed++ {
		st, err := machinePropertyRun(uint64(seed), steps, seed%2 == 0)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		total.uses += st.uses
		total.releases += st.releases
		total.reacquires += st.reacquires
	}
	// Guard against a vacuous run: the generator must reach the
	// interesting states.
	if total.uses < seeds || total.releases < seeds || total.reacquires < seeds/10 {
		t.Fatalf("random runs too tame: %+v over %d seeds", total, seeds)
	}
	t.Logf("%d seeds: %+v", seeds, total)
}

// propStats counts what a random run reached.
type propStats struct {
	uses       int // successful Use calls
	releases   int // Release actions
	reacquires int // Acquire actions for a key acquired before
}

// machinePropertyRun runs one random sequence; lostWhileReleasing allows
// Lost on a key in state Releasing.
func machinePropertyRun(seed uint64, steps int, lostWhileReleasing bool) (stats propStats, err error) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	universe := []string{"p/0", "p/1", "p/2", "q/a", "q/b"}
	m := NewMachine(scnConfig, scnStart)
	model := map[string]*propKey{}
	for _, k := range universe {
		model[k] = &propKey{}
	}
	var now time.Duration
	var leaseUntil time.Duration = -1 // none yet
	var nextEpoch int64 = 1
	desired := map[string]bool{}
	var log []string

	fresh := func() bool { return leaseUntil >= 0 && now < leaseUntil-scnConfig.LeaseMargin }
	fail := func(format string, a ...any) error {
		tail := log
		if len(tail) > 40 {
			tail = tail[len(tail)-40:]
		}
		return fmt.Errorf("%s\nlast events:\n  %s", fmt.Sprintf(format, a...), strings.Join(tail, "\n  "))
	}
	pick := func(ok func(*propKey) bool) (string, bool) {
		var cands []string
		for _, k := range universe {
			if ok(model[k]) {
				cands = append(cands, k)
			}
		}
		if len(cands) == 0 {
			return "", false
		}
		return cands[r.IntN(len(cands))], true
	}

	for step := 0; step < steps; step++ {
		var acts []Action
		var ev string
		key := universe[r.IntN(len(universe))]
		switch r.IntN(12) {
		case 0:
			var ks []string
			clear(desired)
			for _, k := range universe {
				if r.IntN(2) == 0 {
					ks = append(ks, k)
					desired[k] = true
				}
			}
			ev = fmt.Sprintf("desire %v", ks)
			acts = m.SetDesired(ks)
		case 1:
			now += time.Duration(r.IntN(7)) * 250 * time.Millisecond
			ev = fmt.Sprintf("tick -> %v", now)
			acts = m.Tick(scnStart.Add(now))
		case 2:
			until := now + time.Duration(r.IntN(13))*time.Second
			leaseUntil = max(leaseUntil, until)
			ev = fmt.Sprintf("lease until=%v", until)
			acts = m.LeaseRenewed(scnStart.Add(until))
		case 3, 4:
			k, ok := pick(func(p *propKey) bool { return p.acquireOut })
			if !ok {
				continue
			}
			p := model[k]
			p.acquireOut = false
			if r.IntN(3) > 0 {
				p.acquired, p.epoch = true, nextEpoch
				ev = fmt.Sprintf("acquired %s epoch=%d", k, nextEpoch)
				acts = m.Acquired(k, nextEpoch)
				nextEpoch++
			} else {
				p.acquired = false
				ev = "refused " + k
				acts = m.AcquireRefused(k)
			}
		case 5:
			k, ok := pick(func(p *propKey) bool { return p.releaseOut > 0 })
			if !ok {
				continue
			}
			p := model[k]
			p.releaseOut--
			if r.IntN(3) > 0 {
				p.acquired = false
				ev = "released " + k
				acts = m.Released(k)
			} else {
				ev = "release-failed " + k
				acts = m.ReleaseFailed(k)
			}
		case 6:
			if st, _ := m.State(key); st == Releasing && !lostWhileReleasing {
				continue
			}
			model[key].acquired = false
			ev = "lost " + key
			acts = m.Lost(key)
		case 7:
			ev = "deleted " + key
			acts = m.RecordDeleted(key)
		case 8, 9:
			epoch, ok := m.Use(key)
			ev = fmt.Sprintf("use %s -> %t", key, ok)
			p := model[key]
			if ok {
				if !p.acquired || !fresh() {
					log = append(log, ev)
					return stats, fail("Use(%s) succeeded: acquired=%t lease fresh=%t", key, p.acquired, fresh())
				}
				if epoch != p.epoch {
					log = append(log, ev)
					return stats, fail("Use(%s) returned epoch %d, last Acquired epoch %d", key, epoch, p.epoch)
				}
				p.uses++
				stats.uses++
			}
		case 10, 11:
			k, ok := pick(func(p *propKey) bool { return p.uses > 0 })
			if !ok || r.IntN(10) == 0 {
				k = key // sometimes a Done without a use: must be harmless
			}
			if model[k].uses > 0 {
				model[k].uses--
			}
			ev = "done " + k
			acts = m.Done(k)
		}
		log = append(log, fmt.Sprintf("%s => %v", ev, acts))
		// Per-key events settle only their key (stepKey), and a Tick
		// before the machine's wake time takes no step: a full step
		// right after must find nothing left to do. It is taken on a
		// copy, so that the machine goes on with only what its own
		// events kept (its wake time included).
		if err := fullStepFindsNothing(m); err != nil {
			return stats, fail("after %q: %v", ev, err)
		}

		if err := machineInvariants(m, acts); err != nil {
			return stats, fail("%v", err)
		}
		for _, a := range acts {
			p := model[a.Key]
			if p == nil {
				return stats, fail("action for unknown key %s", a.Key)
			}
			switch a.Kind {
			case Acquire:
				if p.acquireOut {
					return stats, fail("second acquire %s while one is outstanding", a.Key)
				}
				if p.releaseOut > 0 {
					return stats, fail("acquire %s while a release is outstanding", a.Key)
				}
				if !desired[a.Key] {
					return stats, fail("acquire %s for a key not desired", a.Key)
				}
				if !fresh() {
					return stats, fail("acquire %s issued with a stale lease", a.Key)
				}
				p.acquireOut = true
				if p.epoch != 0 {
					stats.reacquires++
				}
			case Release:
				if p.uses > 0 {
					return stats, fail("release %s with %d uses in flight", a.Key, p.uses)
				}
				if p.acquireOut || p.releaseOut > 0 {
					return stats, fail("release %s while another action is outstanding", a.Key)
				}
				p.releaseOut++
				stats.releases++
			}
		}
		for _, k := range universe {
			p := model[k]
			if m.Holds(k) && (!p.acquired || !fresh()) {
				return stats, fail("Holds(%s) with acquired=%t lease fresh=%t", k, p.acquired, fresh())
			}
			if _, inflight := m.State(k); inflight != p.uses {
				return stats, fail("State(%s) reports %d in flight, shell started %d", k, inflight, p.uses)
			}
		}
	}
	return stats, nil
}

// TestMachineRegressions pins the fixes of bugs found by these tests: a
// failed release resurrecting a key without a record, a Lost during a
// release or an acquire, and keys kept across a possible lease expiry.
func TestMachineRegressions(t *testing.T) {
	t.Run("release-failed-does-not-resurrect", func(t *testing.T) {
		// A failed release may have been applied (an etcd timeout after the
		// commit), and the shell drops the delete it sees while the key is
		// Releasing. So a key wanted again after a failed release must not
		// become usable on the strength of the old record: the release is
		// retried, and the key is acquired afresh once it is confirmed.
		runScenarioText(t, `
lease until=30s
----
(none)

desire keys=q/a
----
acquire q/a

acquired key=q/a epoch=5
----
(none)

desire
----
release q/a

desire keys=q/a
----
(none)

release-failed key=q/a
----
release q/a

use key=q/a
----
refused

released key=q/a
----
acquire q/a
`)
	})
	t.Run("lost-while-releasing-keeps-release-outstanding", func(t *testing.T) {
		// Lost on a Releasing key drops the machine's memory of the release
		// in flight: it re-acquires at once (two etcd operations on one key
		// in flight; the old release deletes by lease, so it may delete the
		// new record), and that release's late Released is then ignored
		// while the key is Held.
		runScenarioText(t, `
lease until=30s
----
(none)

desire keys=q/a
----
acquire q/a

acquired key=q/a epoch=5
----
(none)

desire
----
release q/a

desire keys=q/a
----
(none)

lost key=q/a
----
(none)

released key=q/a
----
acquire q/a
`)
		for seed := uint64(1); seed <= 300; seed++ {
			if _, err := machinePropertyRun(seed, 400, true); err != nil {
				t.Errorf("random run with Lost while releasing, seed %d: %v", seed, err)
				break
			}
		}
	})
	t.Run("held-across-possible-lease-expiry", func(t *testing.T) {
		// Once the clock passes leaseUntil the lease may have expired and
		// etcd may have deleted our records (and another shard taken
		// them). The machine keeps such keys Held, and the next renewal,
		// which may come from a new session (Shard.renewSession), makes
		// them usable again before, or without (the watch is reopened
		// "from now on"), the Lost events. Keys whose lease may have
		// expired should be released and acquired afresh.
		runScenarioText(t, `
lease until=10s
----
(none)

desire keys=p/1
----
acquire p/1

acquired key=p/1 epoch=3
----
(none)

tick by=10s
----
release p/1

lease until=40s
----
(none)

use key=p/1
----
refused

released key=p/1
----
acquire p/1
`)
	})
	t.Run("lost-while-acquiring", func(t *testing.T) {
		// Our new record is created and then deleted (lease expiry, an
		// operator, or a stale release of ours) before the Acquired result
		// is processed: the watch's delete arrives first and Lost is
		// ignored for an Acquiring key, so the key becomes Held with no
		// record behind it. Lost carries no revision, so it cannot tell
		// this from a late delete of an older record of ours; the safe
		// answer is to release (a no-op if the record is gone) and acquire
		// afresh, never to use the key.
		runScenarioText(t, `
lease until=30s
----
(none)

desire keys=q/a
----
acquire q/a

lost key=q/a
----
(none)

acquired key=q/a epoch=5
----
release q/a

use key=q/a
----
refused

released key=q/a
----
acquire q/a
`)
	})
}

// TestMachineInvariantsReportBrokenRules feeds machineInvariants what a
// broken machine would return, so the check the scenarios rely on is known
// to catch it.
func TestMachineInvariantsReportBrokenRules(t *testing.T) {
	m := NewMachine(scnConfig, scnStart)
	m.LeaseRenewed(scnStart.Add(30 * time.Second))
	acts := m.SetDesired([]string{"p/1", "p/2"})
	if err := machineInvariants(m, acts); err != nil {
		t.Fatalf("a correct machine's actions %v: %v", acts, err)
	}
	m.Acquired("p/1", 7)
	for _, c := range []struct {
		name string
		acts []Action
		want string
	}{
		{"unsorted", []Action{{Kind: Acquire, Key: "p/2"}, {Kind: Acquire, Key: "p/1"}}, "not sorted"},
		{"two for one key", []Action{{Kind: Acquire, Key: "p/2"}, {Kind: Acquire, Key: "p/2"}}, "two actions for one key"},
		{"acquire of a held key", []Action{{Kind: Acquire, Key: "p/1"}}, "acquire p/1 issued but the key is"},
		{"release of a held key", []Action{{Kind: Release, Key: "p/1"}}, "release p/1 issued but the key is"},
	} {
		err := machineInvariants(m, c.acts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: machineInvariants(%v) = %v, want an error with %q", c.name, c.acts, err, c.want)
		}
	}
}

// TestMachineScenarioFailsOnBrokenInvariant runs a scenario, through the
// driver the scenario files use, against a machine whose actions come out
// twice (the check sees each action doubled): the run must fail at the
// first command that returns an action, not record the doubled output.
func TestMachineScenarioFailsOnBrokenInvariant(t *testing.T) {
	e := newScnEnv()
	e.check = func(m *Machine, acts []Action) error {
		var doubled []Action
		for _, a := range acts {
			doubled = append(doubled, a, a)
		}
		return machineInvariants(m, doubled)
	}
	ft := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		datadriven.RunTestFromStringAny(ft, `
lease until=30s
----
(none)

desire keys=q/a
----
acquire q/a

state
----
now=0s lease-until=30s usable=true
q/a acquiring inflight=0
held: (none)
`, e.run)
	}()
	<-done
	if !ft.failed {
		t.Fatal("the scenario passed although the invariant check failed")
	}
	if want := "<string>:6: desire keys=q/a: invariant broken: actions not sorted by key or two actions for one key"; !strings.Contains(ft.msg, want) {
		t.Fatalf("failure %q, want it to contain %q", ft.msg, want)
	}
}

// fatalTB records a fatal failure instead of failing the real test, and
// ends the goroutine the way testing.T.FailNow does.
type fatalTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fatalTB) Helper()                   {}
func (f *fatalTB) Logf(string, ...any)       {}
func (f *fatalTB) Failed() bool              { return f.failed }
func (f *fatalTB) Fatal(args ...any)         { f.fail(fmt.Sprint(args...)) }
func (f *fatalTB) Fatalf(s string, a ...any) { f.fail(fmt.Sprintf(s, a...)) }
func (f *fatalTB) FailNow()                  { f.fail("FailNow") }

func (f *fatalTB) fail(msg string) {
	if !f.failed {
		f.failed, f.msg = true, msg
	}
	runtime.Goexit()
}

// A use's deadline is half the lease margin before the lease is known
// alive until; uses start only up to a whole margin before it, so every
// use has at least half the margin to end before the record could be lost.
func TestUseDeadlineBeforeTheLeaseEnds(t *testing.T) {
	m := NewMachine(scnConfig, scnStart)
	leaseUntil := scnStart.Add(10 * time.Second)
	m.LeaseRenewed(leaseUntil)
	m.SetDesired([]string{"p/1"})
	m.Acquired("p/1", 5)
	if _, ok := m.Use("p/1"); !ok {
		t.Fatal("a held key with a fresh lease cannot be used")
	}
	m.Done("p/1")
	want := leaseUntil.Add(-scnConfig.LeaseMargin / 2)
	if got := m.UseDeadline(); !got.Equal(want) {
		t.Fatalf("UseDeadline %s, want %s (half the margin before the lease)", got, want)
	}
	lastStart := leaseUntil.Add(-scnConfig.LeaseMargin)
	m.Tick(lastStart)
	if _, ok := m.Use("p/1"); ok {
		t.Fatalf("a use started a whole margin before the lease ends (at %s)", lastStart)
	}
	if left := m.UseDeadline().Sub(lastStart); left < scnConfig.LeaseMargin/2 {
		t.Fatalf("a use started just before %s has %s to end, want at least half the margin", lastStart, left)
	}
}

// A key just taken over is left out of HeldFor until it has been held for
// the period asked, by the machine's clock; Held has every usable key.
func TestHeldForWaitsAfterAcquire(t *testing.T) {
	m := NewMachine(scnConfig, scnStart)
	m.LeaseRenewed(scnStart.Add(time.Minute))
	m.SetDesired([]string{"p/1", "p/2"})
	m.Acquired("p/1", 5)
	m.Tick(scnStart.Add(500 * time.Millisecond))
	m.Acquired("p/2", 6)
	if got := m.Held(); len(got) != 2 {
		t.Fatalf("Held() = %v, want both keys", got)
	}
	if got := m.HeldFor(time.Second); len(got) != 0 {
		t.Fatalf("HeldFor(1s) at 0.5 s = %v, want none", got)
	}
	m.Tick(scnStart.Add(time.Second))
	if got := m.HeldFor(time.Second); len(got) != 1 || got[0] != "p/1" {
		t.Fatalf("HeldFor(1s) at 1 s = %v, want [p/1] (held since 0 s)", got)
	}
	m.Tick(scnStart.Add(1500 * time.Millisecond))
	got := m.HeldFor(time.Second)
	if len(got) != 2 {
		t.Fatalf("HeldFor(1s) at 1.5 s = %v, want both", got)
	}
	// The answer is the caller's: changing it changes no later answer.
	got[0] = "p/x"
	if again := m.HeldFor(time.Second); !slices.Equal(again, []string{"p/1", "p/2"}) {
		t.Fatalf("HeldFor(1s) after its last answer was changed = %v, want [p/1 p/2]", again)
	}
	// A key lost at the same instant leaves the next answer.
	m.Lost("p/1")
	if again := m.HeldFor(time.Second); !slices.Equal(again, []string{"p/2"}) {
		t.Fatalf("HeldFor(1s) after p/1 was lost = %v, want [p/2]", again)
	}
}

// BenchmarkHeldFor is the ownership loop's question at 5,000 nodes (about
// 4,096 partition keys held, asked every 100 ms while nothing moves).
func BenchmarkHeldFor(b *testing.B) {
	m := NewMachine(scnConfig, scnStart)
	m.LeaseRenewed(scnStart.Add(time.Hour))
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("p/%04d", i)
	}
	m.SetDesired(keys)
	for i, k := range keys {
		m.Acquired(k, int64(i+1))
	}
	m.Tick(scnStart.Add(2 * time.Second))
	b.ReportAllocs()
	for b.Loop() {
		if got := m.HeldFor(time.Second); len(got) != len(keys) {
			b.Fatalf("%d keys held, want %d", len(got), len(keys))
		}
	}
}

// cloneMachine is a deep copy of m.
func cloneMachine(m *Machine) *Machine {
	c := *m
	c.desired = maps.Clone(m.desired)
	c.keys = make(map[string]*keyInfo, len(m.keys))
	for key, k := range m.keys {
		kk := *k
		c.keys[key] = &kk
	}
	c.heldMemo.keys = slices.Clone(m.heldMemo.keys)
	return &c
}

// fullStepFindsNothing reports an error when a full step on a copy of m
// acts or moves a key: m was not settled for its clock.
func fullStepFindsNothing(m *Machine) error {
	c := cloneMachine(m)
	if acts := c.step(); len(acts) > 0 {
		return fmt.Errorf("a full step still acts: %v", acts)
	}
	for key := range c.keys {
		if m.keys[key] == nil {
			return fmt.Errorf("a full step adds key %s", key)
		}
	}
	for key, k := range m.keys {
		ck := c.keys[key]
		if ck == nil {
			if k.state != Absent || k.inflight != 0 {
				return fmt.Errorf("a full step drops key %s (%v, %d in flight)", key, k.state, k.inflight)
			}
			continue
		}
		if ck.state != k.state {
			return fmt.Errorf("a full step moves key %s from %v to %v", key, k.state, ck.state)
		}
	}
	return nil
}

// TestTickSkipsOnlyWhenNothingIsDue checks the skip of Tick against a full
// step: a key waiting for its retry, a held key when the lease may have
// expired. A Tick before either must leave the machine as a full step
// would, and one at it must act.
func TestTickSkipsOnlyWhenNothingIsDue(t *testing.T) {
	m := NewMachine(scnConfig, scnStart)
	m.SetDesired([]string{"p/0", "p/1"})
	m.LeaseRenewed(scnStart.Add(time.Minute))
	m.Acquired("p/0", 1)
	m.AcquireRefused("p/1") // retried after RetryAfter
	retry := scnStart.Add(scnConfig.RetryAfter)
	for _, at := range []time.Duration{time.Millisecond, scnConfig.RetryAfter / 2, scnConfig.RetryAfter - time.Nanosecond} {
		if acts := m.Tick(scnStart.Add(at)); len(acts) > 0 {
			t.Fatalf("tick at +%v, before the retry: %v", at, acts)
		}
		if err := fullStepFindsNothing(m); err != nil {
			t.Fatalf("tick at +%v: %v", at, err)
		}
	}
	if acts := m.Tick(retry); !slices.Equal(acts, []Action{{Acquire, "p/1"}}) {
		t.Fatalf("tick at the retry time: %v, want the acquire of p/1", acts)
	}
	m.Acquired("p/1", 2)
	before := scnStart.Add(time.Minute - time.Nanosecond)
	if acts := m.Tick(before); len(acts) > 0 {
		t.Fatalf("tick before the lease's end: %v", acts)
	}
	if err := fullStepFindsNothing(m); err != nil {
		t.Fatalf("tick before the lease's end: %v", err)
	}
	if acts := m.Tick(scnStart.Add(time.Minute)); !slices.Equal(acts, []Action{{Release, "p/0"}, {Release, "p/1"}}) {
		t.Fatalf("tick at the lease's end: %v, want both keys released (the lease may have expired)", acts)
	}
}

// BenchmarkTickIdle is one Tick of a shard holding 1,024 keys with nothing
// due, the ownership loop's every 100 ms.
func BenchmarkTickIdle(b *testing.B) {
	m := NewMachine(scnConfig, scnStart)
	var keys []string
	for i := range 1024 {
		keys = append(keys, wire.PartitionKey(i))
	}
	m.SetDesired(keys)
	m.LeaseRenewed(scnStart.Add(time.Hour))
	for i, k := range keys {
		m.Acquired(k, int64(i+1))
	}
	now := scnStart
	b.ResetTimer()
	for range b.N {
		now = now.Add(time.Microsecond)
		if acts := m.Tick(now); len(acts) > 0 {
			b.Fatal(acts)
		}
	}
}

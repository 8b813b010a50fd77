package coordinator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/shardsched/shardsched/api"
)

// Property test of reclaim and preemption on random trees of 2–4 levels
// (capabilities, deserved shares, guarantees, queues that are not
// reclaimable, priorities, protected jobs, elastic jobs grown beyond their
// gang). Every plan the ledger makes is carried out at once (victims
// released or shrunk, the preemptor asking again) and checked by rcCheck,
// which recomputes every figure from the reservations and the tree specs,
// never from the ledger's usage:
//   - the preemptor fits once its victims are gone (it is promoted), and no
//     level is then above its capability;
//   - no victim is protected, unconfirmed or of equal or higher priority in
//     the preemptor's own queue; a reclaim leaves every level of the
//     victim's branch at or above its deserved share and guarantee, and
//     every level of the preemptor's branch at or below its deserved share;
//   - no victim could have been spared (never more than needed);
//   - jobs evicted asking again, with reclaim, reach a fixed point (no loop).
func TestReclaimPropertyRandomTrees(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rcRandomRun(t, rand.New(rand.NewPCG(seed, 7)))
		})
	}
}

// rcQueue is a generated queue; rcJob a generated job.
type rcJob struct {
	uid, queue string
	cpu, floor int64 // milli-CPU
	prio       int32
	protected  bool
	age        int64
}

func rcRandomTree(rng *rand.Rand) []api.QueueSpec {
	var specs []api.QueueSpec
	var grow func(parent string, depth int, capAbove int64)
	n := 0
	grow = func(parent string, depth int, capAbove int64) {
		kids := 1 + rng.IntN(3)
		if depth == 1 {
			kids = 2 + rng.IntN(2)
		}
		for i := 0; i < kids; i++ {
			n++
			name := fmt.Sprintf("q%d", n)
			s := api.QueueSpec{Name: name, Parent: parent}
			c := capAbove
			if rng.IntN(3) > 0 || depth == 1 {
				c = min(capAbove, int64(4+rng.IntN(12))*1000)
				s.Capability, _ = api.NewLimit(map[string]int64{api.CPU: c})
			}
			s.Deserved = api.NewResource(int64(rng.IntN(8))*1000, 0, nil)
			if rng.IntN(4) == 0 {
				s.Guarantee = api.NewResource(min(s.Deserved.MilliCPU, int64(rng.IntN(3))*1000), 0, nil)
			}
			s.NotReclaimable = rng.IntN(6) == 0
			s.Priority = int32(rng.IntN(3))
			specs = append(specs, s)
			if depth < 3 && rng.IntN(2) == 0 {
				grow(name, depth+1, c)
			}
		}
	}
	grow(api.RootQueue, 1, 24000)
	return specs
}

func rcLeaves(specs []api.QueueSpec) []string {
	parent := map[string]bool{}
	for _, s := range specs {
		parent[s.Parent] = true
	}
	var out []string
	for _, s := range specs {
		if !parent[s.Name] {
			out = append(out, s.Name)
		}
	}
	return out
}

func rcRandomRun(t *testing.T, rng *rand.Rand) {
	specs := rcRandomTree(rng)
	l := NewLedger(nil)
	if _, err := l.SetTree(specs); err != nil {
		t.Fatalf("tree: %v", err)
	}
	leaves := rcLeaves(specs)
	jobs := map[string]*rcJob{}
	serial := 0
	newJob := func() *rcJob {
		serial++
		j := &rcJob{uid: fmt.Sprintf("j%d", serial), queue: leaves[rng.IntN(len(leaves))], cpu: int64(1+rng.IntN(3)) * 1000,
			prio: int32(rng.IntN(4)), protected: rng.IntN(8) == 0, age: int64(serial)}
		j.floor = j.cpu
		jobs[j.uid] = j
		return j
	}
	ask := func(j *rcJob, reclaim bool) (Reservation, error) {
		r, _, err := l.Reserve(ReserveRequest{Job: JobRef{Namespace: "ns", Name: j.uid, UID: j.uid}, Queue: j.queue,
			Amount: api.NewResource(j.floor, 0, nil), Lease: 1, Shard: "s",
			Terms: &Terms{Priority: j.prio, Protected: j.protected, Created: j.age, Reclaim: reclaim}})
		return r, err
	}
	// Fill: jobs admitted without reclaim, confirmed; some grow beyond
	// their gang (elastic).
	for i := 0; i < 40; i++ {
		j := newJob()
		if _, err := ask(j, false); err != nil {
			delete(jobs, j.uid)
			continue
		}
		if _, err := l.Confirm(j.uid); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(3) == 0 {
			target := j.floor + int64(1+rng.IntN(3))*1000
			if r, _, _, err := l.Resize(ResizeRequest{UID: j.uid, Targets: []api.Resource{api.NewResource(target, 0, nil)}}); err == nil {
				j.cpu = r.Amount.MilliCPU
			}
		}
	}
	// Preemptors, each plan carried out before the next.
	var waiting []*rcJob
	evictions := 0
	for i := 0; i < 30; i++ {
		waiting = append(waiting, newJob())
	}
	for round := 0; len(waiting) > 0; round++ {
		if round > 200 {
			t.Fatalf("no fixed point after %d rounds: %d waiting, %d evictions", round, len(waiting), evictions)
		}
		progressed := false
		var still []*rcJob
		for _, j := range waiting {
			before := rcSnapshot(l)
			r, err := ask(j, true)
			if err != nil {
				still = append(still, j)
				continue
			}
			progressed = true
			if r.State != Nominated {
				if _, err := l.Confirm(j.uid); err != nil {
					t.Fatal(err)
				}
				continue
			}
			victims := l.Victims(j.uid)
			if len(victims) == 0 {
				t.Fatalf("%s nominated with no victim", j.uid)
			}
			for _, v := range rcCheck(l.Tree(), before, j, victims) {
				t.Errorf("plan for %s (queue %s, %d milli-CPU, prio %d): %s", j.uid, j.queue, j.floor, j.prio, v)
			}
			// Carry it out.
			for _, v := range victims {
				evictions++
				vj := jobs[v.Job.UID]
				if v.Evict.Whole {
					l.Release(v.Job.UID)
					vj.cpu = vj.floor
					still = append(still, vj) // asks again, with reclaim
					continue
				}
				if _, _, refused, err := l.Resize(ResizeRequest{UID: v.Job.UID, Targets: []api.Resource{v.Evict.To}}); err != nil || refused != nil {
					t.Fatalf("shrink %s: %v %v", v.Job.UID, err, refused)
				}
				vj.cpu = v.Evict.To.MilliCPU
			}
			p, err := ask(j, true)
			if err != nil || p.State == Nominated {
				t.Fatalf("%s not promoted once its victims were gone: %v (%s)", j.uid, err, p.State)
			}
			if _, err := l.Confirm(j.uid); err != nil {
				t.Fatal(err)
			}
			if over := rcOverruns(l.Tree(), rcSnapshot(l)); len(over) > 0 {
				t.Fatalf("after %s was promoted: %v", j.uid, over)
			}
		}
		waiting = still
		if !progressed {
			break
		}
	}
	if evictions > 40*len(jobs) {
		t.Fatalf("%d evictions for %d jobs: a loop", evictions, len(jobs))
	}
}

// rcRes is one reservation as the checker sees it.
type rcRes struct {
	uid, queue       string
	cpu              int64
	state            State
	prio             int32
	protected        bool
	evicting, nomine bool
}

func rcSnapshot(l *Ledger) map[string]rcRes {
	out := map[string]rcRes{}
	for _, r := range l.Reservations() {
		out[r.Job.UID] = rcRes{uid: r.Job.UID, queue: r.Queue, cpu: r.Amount.MilliCPU, state: r.State, prio: r.Priority,
			protected: r.Protected, evicting: r.Evict != nil, nomine: r.State == Nominated}
	}
	return out
}

// rcUse is every level's cpu from the reservations (each on its queue's
// path in tree).
func rcUse(tree *api.Tree, res map[string]rcRes) map[string]int64 {
	use := map[string]int64{}
	for _, r := range res {
		p, err := tree.Path(r.queue)
		if err != nil {
			continue
		}
		for _, q := range p {
			use[q] += r.cpu
		}
	}
	return use
}

// rcHeld is what the siblings of path[i-1] under path[i] keep for their
// guarantee and do not use.
func rcHeld(tree *api.Tree, use map[string]int64, path []string, i int) int64 {
	if i == 0 {
		return 0
	}
	var held int64
	for _, c := range tree.Children(path[i]) {
		if c == path[i-1] {
			continue
		}
		spec, _ := tree.Get(c)
		held += max(0, spec.Guarantee.MilliCPU-use[c])
	}
	return held
}

func rcOverruns(tree *api.Tree, res map[string]rcRes) []string {
	use := rcUse(tree, res)
	var out []string
	for _, q := range tree.Names() {
		spec, _ := tree.Get(q)
		if c, ok := spec.Capability.Get(api.CPU); ok && use[q] > c {
			out = append(out, fmt.Sprintf("queue %s holds %d of %d", q, use[q], c))
		}
	}
	return out
}

// rcFits reports whether a job of cpu in queue fits over res, at every
// level of its path, with what siblings hold for their guarantee.
func rcFits(tree *api.Tree, res map[string]rcRes, queue string, cpu int64) (bool, string) {
	use := rcUse(tree, res)
	path, _ := tree.Path(queue)
	for i, q := range path {
		spec, _ := tree.Get(q)
		if c, ok := spec.Capability.Get(api.CPU); ok && use[q]+cpu+rcHeld(tree, use, path, i) > c {
			return false, fmt.Sprintf("queue %s: %d + %d + held %d > %d", q, use[q], cpu, rcHeld(tree, use, path, i), c)
		}
	}
	return true, ""
}

// rcCheck checks one plan (victims, with their marks, made for job over
// the reservations before) against the rules, from the reservations and
// the tree alone. Plans are carried out one at a time here, so before
// holds no other nominee.
func rcCheck(tree *api.Tree, before map[string]rcRes, job *rcJob, victims []Reservation) []string {
	var out []string
	after := map[string]rcRes{}
	for k, v := range before {
		after[k] = v
	}
	gives := map[string]int64{}
	for _, v := range victims {
		b, ok := before[v.Job.UID]
		switch {
		case !ok:
			out = append(out, v.Job.UID+" was not reserved")
			continue
		case b.state != Confirmed:
			out = append(out, fmt.Sprintf("%s is %s, not a running gang", v.Job.UID, b.state))
		case b.protected:
			out = append(out, v.Job.UID+" is protected")
		}
		switch v.Evict.Reason {
		case ReasonPreempt:
			if b.queue != job.queue || b.prio >= job.prio {
				out = append(out, fmt.Sprintf("%s preempted from queue %s at priority %d by priority %d", v.Job.UID, b.queue, b.prio, job.prio))
			}
		case ReasonReclaim:
			if b.queue == job.queue {
				out = append(out, v.Job.UID+" reclaimed from the preemptor's own queue")
			}
		default:
			out = append(out, v.Job.UID+": reason "+v.Evict.Reason)
		}
		give := b.cpu
		if !v.Evict.Whole {
			give = b.cpu - v.Evict.To.MilliCPU
		}
		gives[v.Job.UID] = give
		a := after[v.Job.UID]
		a.cpu -= give
		if a.cpu <= 0 {
			delete(after, v.Job.UID)
		} else {
			after[v.Job.UID] = a
		}
	}
	// The preemptor fits once they are gone, and then no level is over.
	if ok, why := rcFits(tree, after, job.queue, job.floor); !ok {
		out = append(out, "does not fit once the victims are gone: "+why)
	}
	withJob := map[string]rcRes{job.uid: {uid: job.uid, queue: job.queue, cpu: job.floor}}
	for k, v := range after {
		withJob[k] = v
	}
	for _, o := range rcOverruns(tree, withJob) {
		out = append(out, "after the plan: "+o)
	}
	// Shares: the victim's branch stays at or above deserved and
	// guarantee; the preemptor's at or below deserved.
	use := rcUse(tree, withJob)
	jobPath, _ := tree.Path(job.queue)
	for _, v := range victims {
		if v.Evict.Reason != ReasonReclaim {
			continue
		}
		vPath, _ := tree.Path(before[v.Job.UID].queue)
		for _, q := range vPath {
			if slices.Contains(jobPath, q) {
				break // the common ancestor and above
			}
			spec, _ := tree.Get(q)
			if floor := max(spec.Deserved.MilliCPU, spec.Guarantee.MilliCPU); use[q] < floor {
				out = append(out, fmt.Sprintf("reclaim of %s leaves queue %s at %d, below its share %d", v.Job.UID, q, use[q], floor))
			}
			if !spec.Reclaimable() {
				out = append(out, fmt.Sprintf("reclaim of %s from queue %s, which is not reclaimable", v.Job.UID, q))
			}
		}
		for _, q := range jobPath {
			if slices.Contains(vPath, q) {
				break
			}
			if spec, _ := tree.Get(q); use[q] > spec.Deserved.MilliCPU {
				out = append(out, fmt.Sprintf("reclaim of %s takes queue %s to %d, above its deserved %d", v.Job.UID, q, use[q], spec.Deserved.MilliCPU))
			}
		}
	}
	// Never more than needed: with any one victim spared, it does not fit.
	for _, v := range victims {
		spared := map[string]rcRes{}
		for k, r := range after {
			spared[k] = r
		}
		b := before[v.Job.UID]
		spared[v.Job.UID] = b
		if ok, _ := rcFits(tree, spared, job.queue, job.floor); ok {
			out = append(out, fmt.Sprintf("%s was not needed (gives %d)", v.Job.UID, gives[v.Job.UID]))
		}
	}
	return out
}

// The checker is not vacuous: plans that break each rule are reported.
func TestReclaimCheckCatchesBrokenPlans(t *testing.T) {
	specs := []api.QueueSpec{
		{Name: "p", Capability: api.LimitOf(api.NewResource(8000, 0, nil))},
		{Name: "a", Parent: "p", Deserved: api.NewResource(4000, 0, nil)},
		{Name: "b", Parent: "p", Deserved: api.NewResource(4000, 0, nil)},
	}
	tree, err := api.BuildTree(specs)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]rcRes{}
	for i := 1; i <= 8; i++ {
		uid := fmt.Sprintf("b%d", i)
		before[uid] = rcRes{uid: uid, queue: "b", cpu: 1000, state: Confirmed}
	}
	job := &rcJob{uid: "a1", queue: "a", cpu: 2000, floor: 2000, prio: 1}
	victim := func(uid string) Reservation {
		return Reservation{Job: JobRef{UID: uid}, Queue: "b", Evict: &Eviction{Reason: ReasonReclaim, Whole: true}}
	}
	if v := rcCheck(tree, before, job, []Reservation{victim("b1"), victim("b2")}); len(v) != 0 {
		t.Fatalf("a good plan reported: %v", v)
	}
	cases := map[string][]Reservation{
		"too few victims":    {victim("b1")},
		"one too many":       {victim("b1"), victim("b2"), victim("b3")},
		"preempt across":     {victim("b1"), {Job: JobRef{UID: "b2"}, Queue: "b", Evict: &Eviction{Reason: ReasonPreempt, Whole: true}}},
		"below deserved too": {victim("b1"), victim("b2"), victim("b3"), victim("b4"), victim("b5")},
	}
	for name, plan := range cases {
		if v := rcCheck(tree, before, job, plan); len(v) == 0 {
			t.Errorf("%s: not reported", name)
		}
	}
	// A protected victim, and a preemptor taken above its own share.
	prot := map[string]rcRes{}
	for k, v := range before {
		prot[k] = v
	}
	p := prot["b1"]
	p.protected = true
	prot["b1"] = p
	if v := rcCheck(tree, prot, job, []Reservation{victim("b1"), victim("b2")}); len(v) == 0 {
		t.Error("protected victim: not reported")
	}
	big := &rcJob{uid: "a1", queue: "a", cpu: 5000, floor: 5000}
	if v := rcCheck(tree, before, big, []Reservation{victim("b1"), victim("b2"), victim("b3"), victim("b4"), victim("b5")}); len(v) == 0 {
		t.Error("preemptor above its deserved share: not reported")
	}
}

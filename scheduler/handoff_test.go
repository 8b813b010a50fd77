package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/testenv"
	"github.com/shardsched/shardsched/wire"
)

// The tests drive Cycle by hand against a real cache and fakes of the
// ports; the claim store fake keeps the records in memory with the same
// preconditions as shard.Claims (its etcd side is tested in package shard).

const gi = int64(1) << 30

type fakeOwnership struct {
	mu      sync.Mutex
	notHeld map[string]bool
	uses    map[string]int
	// until is the deadline UseUntil gives (zero: none).
	until time.Time
}

func (f *fakeOwnership) Holds(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.notHeld[key]
}

func (f *fakeOwnership) Use(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notHeld[key] {
		return false
	}
	f.uses[key]++
	return true
}

func (f *fakeOwnership) UseUntil(key string) (time.Time, bool) {
	if !f.Use(key) {
		return time.Time{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.until, true
}

func (f *fakeOwnership) Done(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uses[key]--
}

// fakeQuota is the coordinator's ledger (pure logic, no etcd) behind the
// Quota port, with every call recorded. Queues it does not know are added
// as unlimited leaves under the root; setQueues declares capped ones.
type fakeQuota struct {
	mu     sync.Mutex
	calls  []string
	ledger *coordinator.Ledger
	specs  []api.QueueSpec
	// noBound answers resizes as a leader that predates
	// ResizeRequest.Bound: the targets alone.
	noBound bool
	// listed is the queues each List asked for.
	listed [][]string
}

func (f *fakeQuota) record(op, uid string) {
	f.calls = append(f.calls, op+" "+uid)
}

// setQueues replaces the ledger's queue tree.
func (f *fakeQuota) setQueues(specs []api.QueueSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.specs = append([]api.QueueSpec(nil), specs...)
	return f.setTreeLocked()
}

func (f *fakeQuota) setTreeLocked() error {
	if f.ledger == nil {
		f.ledger = coordinator.NewLedger(nil)
	}
	_, err := f.ledger.SetTree(f.specs)
	return err
}

func (f *fakeQuota) ensureQueue(q string) {
	if f.ledger == nil {
		_ = f.setTreeLocked()
	}
	if _, ok := f.ledger.Tree().Get(q); ok || q == "" {
		return
	}
	f.specs = append(f.specs, api.QueueSpec{Name: q})
	_ = f.setTreeLocked()
}

func (f *fakeQuota) Reserve(ctx context.Context, job wire.JobRef, q string, a api.Resource) (wire.Result, error) {
	return f.ReserveWith(ctx, job, q, a, nil)
}

func (f *fakeQuota) ReserveWith(_ context.Context, job wire.JobRef, q string, a api.Resource, terms *wire.Terms) (wire.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("reserve", job.UID)
	f.ensureQueue(q)
	r, existed, err := f.ledger.Reserve(coordinator.ReserveRequest{Job: job, Queue: q, Amount: a, Lease: 1, Shard: "s", Terms: terms})
	out := wire.Result{Reservation: r, Existed: existed}
	if err == nil && r.State == wire.Nominated {
		out.Victims = f.ledger.Victims(job.UID)
	}
	return out, err
}

// ReserveInOrder is the coordinator's chain (coordinator/term.go, apply):
// each reserve in turn through the ledger; with stop, those behind one
// that blocks (refused, unless it can never fit) are answered ErrBehind.
// The scheduler therefore admits through its ordered path in every test
// that uses this fake; TestReserveInOrder checks the coordinator's own.
func (f *fakeQuota) ReserveInOrder(ctx context.Context, reqs []wire.InOrder, stop bool) []wire.Answer {
	out := make([]wire.Answer, len(reqs))
	blocked := false
	for i, r := range reqs {
		if stop && blocked {
			out[i].Err = wire.ErrBehind
			continue
		}
		res, err := f.ReserveWith(ctx, r.Job, r.Queue, r.Amount, r.Terms)
		out[i] = wire.Answer{Result: res, Err: err}
		blocked = wire.HoldsUpQueue(err)
	}
	return out
}

func (f *fakeQuota) Evictions(context.Context) (wire.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ledger == nil {
		_ = f.setTreeLocked()
	}
	return wire.Result{Reservations: f.ledger.Evicting()}, nil
}

func (f *fakeQuota) Confirm(_ context.Context, uid string) (wire.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("confirm", uid)
	if f.ledger == nil {
		_ = f.setTreeLocked()
	}
	r, err := f.ledger.Confirm(uid)
	return wire.Result{Reservation: r}, err
}

func (f *fakeQuota) Release(_ context.Context, uid string) (wire.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("release", uid)
	if f.ledger == nil {
		_ = f.setTreeLocked()
	}
	r, found := f.ledger.Release(uid)
	return wire.Result{Reservation: r, Found: found}, nil
}

func (f *fakeQuota) Resize(_ context.Context, uid string, bound *api.Resource, targets []api.Resource) (wire.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("resize", uid)
	if f.ledger == nil {
		_ = f.setTreeLocked()
	}
	if f.noBound {
		bound = nil
	}
	r, granted, refused, err := f.ledger.Resize(coordinator.ResizeRequest{UID: uid, Targets: targets, Bound: bound})
	return wire.Result{Reservation: r, Granted: granted, Refused: refused}, err
}

func (f *fakeQuota) List(_ context.Context, queues ...string) (wire.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed = append(f.listed, slices.Clone(queues))
	if f.ledger == nil {
		_ = f.setTreeLocked()
	}
	return wire.Result{Reservations: f.ledger.ReservationsIn(queues)}, nil
}

func (f *fakeQuota) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// fakeBinder records binds and, for a claimed job, whether the bind ran
// under a use of the claim.
type fakeBinder struct {
	mu       sync.Mutex
	claims   *fakeClaims
	binds    map[string]string // task UID → node
	unfenced int               // binds of a claimed job outside Claims.Use
	// deadlines are the bind calls' context deadlines (zero: none).
	deadlines []time.Time
	// unknown: the next so many calls bind the pod but answer with an
	// unknown outcome (the answer lost on the way back).
	unknown int
}

func (f *fakeBinder) Bind(ctx context.Context, t *api.Task, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, _ := ctx.Deadline()
	f.deadlines = append(f.deadlines, d)
	if f.claims != nil && f.claims.claimedJob(t) && f.claims.uses(t) == 0 {
		f.unfenced++
	}
	f.binds[t.UID] = node
	if f.unknown > 0 {
		f.unknown--
		return fmt.Errorf("%w: context deadline exceeded", wire.ErrBindUnknown)
	}
	return nil
}

// boundTo is the node the task was bound to ("" if it was not).
func (f *fakeBinder) boundTo(uid string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.binds[uid]
}

func (f *fakeBinder) Binds() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for k, v := range f.binds {
		out[k] = v
	}
	return out
}

type nopRecorder struct{}

// noteRecorder keeps the FailedScheduling messages by task UID.
type noteRecorder struct {
	nopRecorder
	mu     sync.Mutex
	failed map[string]string
}

func (n *noteRecorder) FailedScheduling(t *api.Task, msg string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failed == nil {
		n.failed = map[string]string{}
	}
	n.failed[t.UID] = msg
}

// newRigNoting is newRig with a scheduler whose FailedScheduling events
// the returned recorder keeps.
func newRigNoting(t *testing.T, name string) (*rig, *noteRecorder) {
	t.Helper()
	r := newRig(t, name)
	r.stop()
	events := &noteRecorder{}
	r.recorder = events
	r.s = r.newScheduler(t, 1, nopStatus{})
	r.start(t)
	return r, events
}

func (n *noteRecorder) failure(uid string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.failed[uid]
}

func (nopRecorder) Scheduled(*api.Task, string)        {}
func (nopRecorder) FailedScheduling(*api.Task, string) {}
func (nopRecorder) Unschedulable(*api.Job, string)     {}

type nopStatus struct{}

func (nopStatus) SetQueue(string, api.QueueStatus)                  {}
func (nopStatus) SetPodGroup(string, string, string, api.JobStatus) {}
func (nopStatus) ForgetPodGroup(string) <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

type fakePeers struct {
	mu        sync.Mutex
	name      string
	members   []wire.Meta
	published []wire.Capacity
}

func (f *fakePeers) Name() string { return f.name }
func (f *fakePeers) Members() []wire.Meta {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.Meta(nil), f.members...)
}
func (f *fakePeers) SetCapacity(c wire.Capacity) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, c)
}

// fakeClaims is an in-memory claim store for shard me.
type fakeClaims struct {
	mu      sync.Mutex
	me      string
	rev     int64
	recs    map[string]wire.Claim
	inUse   map[string]int
	jobOf   map[string]string // task UID → job UID, to tell claimed binds
	offered []string          // "uid→to" of every offer made
	// claimErr, if set, is what Claim answers (a claim lost to a race);
	// offerErr, what Offer answers (the queue's record lost, etcd away).
	claimErr, offerErr error
}

func newFakeClaims(me string) *fakeClaims {
	return &fakeClaims{me: me, recs: map[string]wire.Claim{}, inUse: map[string]int{}, jobOf: map[string]string{}}
}

func (f *fakeClaims) put(c wire.Claim) wire.Claim {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	c.Rev = f.rev
	f.recs[c.Job] = c
	return c
}

func (f *fakeClaims) remove(uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.recs, uid)
}

func (f *fakeClaims) get(uid string) (wire.Claim, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.recs[uid]
	return c, ok
}

func (f *fakeClaims) claimedJob(t *api.Task) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.recs[f.jobOf[t.UID]]
	return ok && c.State == wire.Claimed && c.To == f.me
}

func (f *fakeClaims) uses(t *api.Task) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inUse[f.jobOf[t.UID]]
}

func (f *fakeClaims) Lookup(uid string) (wire.Claim, bool) { return f.get(uid) }
func (f *fakeClaims) List() []wire.Claim {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []wire.Claim
	for _, c := range f.recs {
		out = append(out, c)
	}
	return out
}
func (f *fakeClaims) OwnerMayPlace(uid, _ string) bool { _, ok := f.get(uid); return !ok }
func (f *fakeClaims) Holds(uid string) bool {
	c, ok := f.get(uid)
	return ok && c.State == wire.Claimed && c.To == f.me
}
func (f *fakeClaims) Use(uid string) bool {
	if !f.Holds(uid) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inUse[uid]++
	return true
}
func (f *fakeClaims) Done(uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inUse[uid]--
}
func (f *fakeClaims) Offer(_ context.Context, uid, queue, to string) (wire.Claim, error) {
	f.mu.Lock()
	err := f.offerErr
	f.mu.Unlock()
	if err != nil {
		return wire.Claim{}, err
	}
	if _, ok := f.get(uid); ok {
		return wire.Claim{}, wire.ErrClaimExists
	}
	f.mu.Lock()
	f.offered = append(f.offered, uid+"→"+to)
	f.mu.Unlock()
	return f.put(wire.Claim{Job: uid, Queue: queue, From: f.me, To: to, State: wire.Offered}), nil
}
func (f *fakeClaims) Claim(_ context.Context, uid string, rev int64) (wire.Claim, error) {
	f.mu.Lock()
	err := f.claimErr
	f.mu.Unlock()
	if err != nil {
		return wire.Claim{}, err
	}
	c, ok := f.get(uid)
	if !ok || c.Rev != rev {
		return wire.Claim{}, wire.ErrClaimChanged
	}
	if c.State != wire.Offered || c.To != f.me {
		return wire.Claim{}, wire.ErrNotAddressed
	}
	c.State = wire.Claimed
	return f.put(c), nil
}
func (f *fakeClaims) Drop(_ context.Context, uid string, rev int64) error {
	c, ok := f.get(uid)
	if !ok || c.Rev != rev {
		return wire.ErrClaimChanged
	}
	f.remove(uid)
	return nil
}
func (f *fakeClaims) Delete(_ context.Context, uid string) error { f.remove(uid); return nil }
func (f *fakeClaims) Offered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.offered...)
}

// rig is one shard's scheduler over a real cache and the fakes.
type rig struct {
	s      *Scheduler
	c      *cache.Cache
	own    *fakeOwnership
	quota  *fakeQuota
	binder *fakeBinder
	peers  *fakePeers
	claims *fakeClaims
	now    time.Time
	mu     sync.Mutex // guards now
	// stopBinders stops the bind workers (test goroutine only).
	stopBinders func()
	// evictor, when set, is the schedulers' Evictor; afterCycle runs after
	// each cycle of cycles (the world's reaction to it).
	evictor    Evictor
	afterCycle func()
	// recorder, when set before newScheduler, takes the events.
	recorder Recorder
}

func newRig(t testing.TB, name string, notHeld ...string) *rig {
	t.Helper()
	r := &rig{c: cache.New(cache.Options{}), own: &fakeOwnership{notHeld: map[string]bool{}, uses: map[string]int{}},
		quota: &fakeQuota{}, peers: &fakePeers{name: name}, claims: newFakeClaims(name), now: time.Unix(1_000_000, 0)}
	for _, k := range notHeld {
		r.own.notHeld[k] = true
	}
	r.binder = &fakeBinder{claims: r.claims, binds: map[string]string{}}
	r.s = r.newScheduler(t, 1, nopStatus{})
	r.start(t)
	return r
}

// newScheduler is a scheduler over the rig's cache and fakes.
func (r *rig) newScheduler(t testing.TB, seed uint64, st Status) *Scheduler {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.Now = r.clock
	var rec Recorder = nopRecorder{}
	if r.recorder != nil {
		rec = r.recorder
	}
	s, err := New(cfg, Deps{Cache: r.c, Ownership: r.own, Quota: r.quota, Binder: r.binder, Recorder: rec,
		Status: st, Peers: r.peers, Claims: r.claims, Evictor: r.evictor})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// start runs the scheduler's bind workers until stop (or the test's end).
func (r *rig) start(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	wait := r.s.StartBinders(ctx)
	r.stopBinders = func() {
		cancel()
		wait()
	}
	t.Cleanup(r.stop)
}

// stop stops the bind workers started last.
func (r *rig) stop() {
	if r.stopBinders != nil {
		r.stopBinders()
		r.stopBinders = nil
	}
}

func (r *rig) clock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

func (r *rig) advance(d time.Duration) {
	r.mu.Lock()
	r.now = r.now.Add(d)
	r.mu.Unlock()
}

func (r *rig) node(name string, cpu int64) {
	r.c.AddOrUpdateNode(api.Node{Name: name, UID: name, Allocatable: api.NewResource(cpu*1000, 64*gi, map[string]int64{api.Pods: 110})})
}

// gang adds a job of n tasks of cpu cores each (minMember n) in queue q.
func (r *rig) gang(uid string, n int, cpu int64) { r.gangOf(uid, n, cpu, n) }

// gangOf adds a job of n tasks of cpu cores each in queue q.
func (r *rig) gangOf(uid string, n int, cpu int64, minMember int) {
	r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: uid, UID: uid, Queue: "q", MinMember: int32(minMember), Phase: api.JobPending})
	for i := 0; i < n; i++ {
		t := api.Task{Namespace: "ns", Name: fmt.Sprintf("%s-%d", uid, i), UID: fmt.Sprintf("%s-%d", uid, i), Job: uid,
			Request: api.NewResource(cpu*1000, gi, map[string]int64{api.Pods: 1}), Phase: api.TaskPending, SchedulerName: "volcano"}
		r.claims.mu.Lock()
		r.claims.jobOf[t.UID] = uid
		r.claims.mu.Unlock()
		r.c.AddOrUpdateTask(t)
	}
}

// cycles runs n cycles, a cycle interval apart on the scheduler's clock,
// and waits for the binds they queued.
func (r *rig) cycles(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		r.s.Cycle(context.Background())
		r.waitBinds(t, 5*time.Second)
		if r.afterCycle != nil {
			r.afterCycle()
		}
		r.advance(100 * time.Millisecond)
	}
}

// waitBinds waits until the bind workers have no bind queued or in
// flight, failing tb after limit.
func (r *rig) waitBinds(tb testing.TB, limit time.Duration) {
	tb.Helper()
	for deadline := time.Now().Add(limit); r.s.BindsInFlight() > 0; time.Sleep(50 * time.Microsecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("binds still in flight after %v", limit)
		}
	}
}

func capacity(freeCPU, largestCPU int64) wire.Capacity {
	return wire.Capacity{FreeMilliCPU: freeCPU * 1000, LargestCPU: largestCPU * 1000, FreeMemory: 1 << 40, LargestMemory: 1 << 40, Nodes: 4}
}

// The queue owner never places a job while a claim record exists, even
// with room on its own nodes, and places it once the record is gone.
func TestOwnerDoesNotPlaceClaimedJob(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("n1", 32)
	r.gang("job", 3, 2)
	for _, state := range []wire.ClaimState{wire.Offered, wire.Claimed} {
		r.claims.put(wire.Claim{Job: "job", Queue: "q", From: "shard-o", To: "shard-t", State: state})
		r.cycles(t, 5)
		if b := r.binder.Binds(); len(b) != 0 {
			t.Fatalf("record %s to shard-t: the owner bound %v", state, b)
		}
	}
	r.claims.remove("job")
	r.cycles(t, 3)
	if b := r.binder.Binds(); len(b) != 3 {
		t.Fatalf("record gone: the owner bound %d of 3 tasks (%v)", len(b), b)
	}
	if r.binder.unfenced != 0 {
		t.Fatalf("%d binds of a claimed job outside its claim", r.binder.unfenced)
	}
}

// A gang that does not fit on the owner's nodes is offered to the live
// shard with room and the most free CPU; a shard whose largest node is too
// small for one task is skipped, and so is one that refused the job lately.
// The owner binds nothing meanwhile.
func TestOfferGoesToShardWithRoom(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("small", 2)
	r.peers.members = []wire.Meta{
		{ID: "shard-b", Capacity: capacity(16, 8)},
		{ID: "shard-c", Capacity: capacity(32, 8)},
		{ID: "shard-d", Capacity: capacity(100, 2)}, // no node holds a 3-CPU task
		{ID: "shard-e", Capacity: capacity(8, 8)},   // 9 CPU do not fit in 8
		{ID: "shard-o", Capacity: capacity(1000, 1000)},
	}
	r.gang("job", 3, 3)
	r.cycles(t, 2)
	if got := r.claims.Offered(); len(got) != 1 || got[0] != "job→shard-c" {
		t.Fatalf("offers %v, want one to shard-c", got)
	}
	// shard-c refuses (deletes the offer): the next offer goes to shard-b.
	r.claims.remove("job")
	r.cycles(t, 2)
	if got := r.claims.Offered(); len(got) != 2 || got[1] != "job→shard-b" {
		t.Fatalf("offers %v, want the second to shard-b", got)
	}
	// shard-b does not claim it: the owner withdraws it after OfferTimeout
	// and, with both refusals fresh, has nobody left to offer it to.
	r.advance(r.s.cfg.OfferTimeout)
	r.cycles(t, 3)
	if _, ok := r.claims.get("job"); ok {
		t.Fatal("an offer nobody claimed is still there after the timeout")
	}
	if got := r.claims.Offered(); len(got) != 2 {
		t.Fatalf("offers %v, want no third while shard-b and shard-c refused lately", got)
	}
	if st := r.s.Stats(); st.Offers != 2 || st.OfferTimeouts != 1 {
		t.Fatalf("stats %+v, want 2 offers and 1 timeout", st)
	}
	// Refusals expire.
	r.advance(r.s.cfg.RefusedFor)
	r.cycles(t, 2)
	if got := r.claims.Offered(); len(got) != 3 || got[2] != "job→shard-c" {
		t.Fatalf("offers %v, want a third to shard-c once its refusal expired", got)
	}
	if b := r.binder.Binds(); len(b) != 0 {
		t.Fatalf("the owner bound %v onto a node with no room", b)
	}
}

// Gangs offered and not yet claimed count against the target's gossiped
// room: the owner does not offer a shard more than the room it gossips,
// which a burst of jobs all offered to the one shard with the most free
// CPU did (most were refused).
func TestOffersCountAgainstTheRoomPromised(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("small", 2)
	r.peers.members = []wire.Meta{
		{ID: "shard-b", Capacity: capacity(10, 8)},
		{ID: "shard-c", Capacity: capacity(12, 8)},
		{ID: "shard-o", Capacity: capacity(1000, 1000)},
	}
	r.gang("job-1", 3, 3)
	r.gang("job-2", 3, 3)
	r.cycles(t, 2)
	got := r.claims.Offered()
	slices.Sort(got)
	if want := []string{"job-1→shard-c", "job-2→shard-b"}; !slices.Equal(got, want) && !slices.Equal(got, []string{"job-1→shard-b", "job-2→shard-c"}) {
		t.Fatalf("offers %v, want one gang to each shard (9 CPU each; shard-c has 12 free, shard-b 10)", got)
	}
	// Neither is claimed yet: both count against their target.
	if p := r.s.promised(); p["shard-b"].MilliCPU != 9000 || p["shard-c"].MilliCPU != 9000 {
		t.Fatalf("promised %v, want 9 CPU to each", p)
	}
}

// An offer is chosen during placement and made at the end of the pass,
// side by side with the others: one whose call fails (here the queue's
// record lost, then etcd away) is taken back, so its room is not counted
// as promised to the target, and the job is offered again in a later
// cycle once the store answers.
func TestOfferNotMadeIsTakenBack(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("small", 2)
	r.peers.members = []wire.Meta{
		{ID: "shard-b", Capacity: capacity(16, 8)},
		{ID: "shard-o", Capacity: capacity(2, 2)},
	}
	r.gang("job", 3, 3)
	for _, err := range []error{wire.ErrNotQueueOwner, errors.New("etcd unreachable")} {
		r.claims.mu.Lock()
		r.claims.offerErr = err
		r.claims.mu.Unlock()
		r.cycles(t, 2)
		if got, p, st := r.claims.Offered(), r.s.promised(), r.s.Stats(); len(got) != 0 || len(p) != 0 || st.Offers != 0 {
			t.Fatalf("offers failing with %v: offered %v, promised %v, %d counted; want none", err, got, p, st.Offers)
		}
	}
	r.claims.mu.Lock()
	r.claims.offerErr = nil
	r.claims.mu.Unlock()
	r.cycles(t, 1)
	if got := r.claims.Offered(); len(got) != 1 || got[0] != "job→shard-b" {
		t.Fatalf("offers %v once the store answers, want one to shard-b", got)
	}
	if p := r.s.promised(); p["shard-b"].MilliCPU != 9000 {
		t.Fatalf("promised %v, want the gang's 9 CPU to shard-b", p)
	}
	if b := r.binder.Binds(); len(b) != 0 {
		t.Fatalf("the owner bound %v onto a node with no room", b)
	}
}

// A running job's further pods (minMember 1, as a Deployment's or a batch
// Job's) that do not fit on the queue owner's nodes are offered to a shard
// that gossips room for them, as a gang that does not fit is; they did wait
// there, uncovered and unannounced, for room on the owner's nodes alone.
func TestRunningJobsFurtherPodsOfferedWhenOwnerIsFull(t *testing.T) {
	r, events := newRigNoting(t, "shard-o")
	r.node("n1", 4)
	r.gangOf("dep", 2, 3, 1)
	r.cycles(t, 3)
	if b := r.binder.Binds(); len(b) != 1 {
		t.Fatalf("binds %v, want one pod of the job on n1 (4 CPU hold one 3-CPU pod)", b)
	}
	if got := r.claims.Offered(); len(got) != 0 {
		t.Fatalf("offers %v with no other shard in sight", got)
	}
	if msg := events.failure("dep-1"); !strings.Contains(msg, "no other shard reports room") {
		t.Fatalf("the pod left waiting was told %q, want why it waits", msg)
	}
	r.peers.members = []wire.Meta{{ID: "shard-b", Capacity: capacity(16, 8)}, {ID: "shard-o", Capacity: capacity(1, 1)}}
	r.cycles(t, 2)
	if got := r.claims.Offered(); len(got) != 1 || got[0] != "dep→shard-b" {
		t.Fatalf("offers %v, want the running job offered to shard-b for its pod that does not fit here", got)
	}
	if b := r.binder.Binds(); len(b) != 1 {
		t.Fatalf("binds %v: the owner bound more than its node holds", b)
	}
}

// A running job's grow refused for quota, then its queue raised while its
// node filled up: once the grow's backoff has run out, its pod that no
// longer fits here is offered to a shard with room (the record of the
// refusal stays until a grow succeeds, and no grow is asked without room
// here; it kept the pod here before, neither offered nor told why).
func TestFurtherPodsOfferedAfterAQuotaWaitWithNoRoomLeft(t *testing.T) {
	r := newRig(t, "shard-o")
	if err := r.quota.setQueues([]api.QueueSpec{{Name: "q", Capability: mustLimit(t, 3)}}); err != nil {
		t.Fatal(err)
	}
	r.node("n1", 8)
	r.gangOf("dep", 2, 3, 1)
	r.cycles(t, 3)
	if b := r.binder.Binds(); len(b) != 1 {
		t.Fatalf("binds %v, want one pod: the queue holds 3 CPU", b)
	}
	if st := r.s.Stats(); st.QuotaWaits == 0 {
		t.Fatalf("stats %+v: the second pod's grow was not refused for quota", st)
	}
	// The queue is raised, but the node has no room left for the second
	// pod; another shard gossips room.
	if err := r.quota.setQueues([]api.QueueSpec{{Name: "q", Capability: mustLimit(t, 16)}}); err != nil {
		t.Fatal(err)
	}
	r.c.AddOrUpdateNode(api.Node{Name: "n1", UID: "n1", Allocatable: api.NewResource(4000, 64*gi, map[string]int64{api.Pods: 110})})
	r.peers.members = []wire.Meta{{ID: "shard-b", Capacity: capacity(16, 8)}, {ID: "shard-o", Capacity: capacity(1, 1)}}
	r.advance(5 * time.Second) // past any grow's backoff (2 s at most)
	r.cycles(t, 2)
	if got := r.claims.Offered(); len(got) != 1 || got[0] != "dep→shard-b" {
		t.Fatalf("offers %v, want the running job offered to shard-b for its pod that does not fit here", got)
	}
	if b := r.binder.Binds(); len(b) != 1 {
		t.Fatalf("binds %v: the owner bound more than its node holds", b)
	}
}

// The shard offered a job claims it when the gang fits on its nodes and
// binds it there, under the claim, without touching the reservation (the
// owner's); an offer that does not fit is refused (the record deleted).
func TestClaimerPlacesOfferedJob(t *testing.T) {
	r := newRig(t, "shard-t", wire.QueueKey("q")) // not the queue's owner
	r.node("big-1", 8)
	r.node("big-2", 8)
	r.gang("fits", 3, 3)
	r.gang("too-big", 2, 9)
	r.claims.put(wire.Claim{Job: "fits", Queue: "q", From: "shard-o", To: "shard-t", State: wire.Offered})
	r.claims.put(wire.Claim{Job: "too-big", Queue: "q", From: "shard-o", To: "shard-t", State: wire.Offered})
	// The owner (another shard) admitted both.
	for uid, cpu := range map[string]int64{"fits": 9, "too-big": 18} {
		if _, err := r.quota.Reserve(context.Background(), wire.JobRef{Namespace: "ns", Name: uid, UID: uid}, "q", api.NewResource(cpu*1000, 0, nil)); err != nil {
			t.Fatal(err)
		}
	}
	r.quota.mu.Lock()
	r.quota.calls = nil
	r.quota.mu.Unlock()
	r.cycles(t, 2)
	c, ok := r.claims.get("fits")
	if !ok || c.State != wire.Claimed || c.To != "shard-t" {
		t.Fatalf("record of the job that fits: %+v (present %v), want claimed by shard-t", c, ok)
	}
	b := r.binder.Binds()
	for i := 0; i < 3; i++ {
		if n := b[fmt.Sprintf("fits-%d", i)]; n != "big-1" && n != "big-2" {
			t.Fatalf("task fits-%d bound to %q", i, n)
		}
	}
	if len(b) != 3 || r.binder.unfenced != 0 {
		t.Fatalf("binds %v (%d outside the claim), want the 3 tasks of the claimed job under its claim", b, r.binder.unfenced)
	}
	if _, ok := r.claims.get("too-big"); ok {
		t.Fatal("an offer that does not fit was not refused")
	}
	// The claimer only resizes the reservation it places under (to learn
	// and grow what it covers); admission stays with the owner.
	for _, c := range r.quota.Calls() {
		if c != "resize fits" {
			t.Fatalf("the claimer called the coordinator for more than a resize: %v", r.quota.Calls())
		}
	}
	if st := r.s.Stats(); st.Claims != 1 || st.Refusals != 1 {
		t.Fatalf("stats %+v, want 1 claim and 1 refusal", st)
	}
	// The job goes: the claimer deletes its record.
	r.c.DeleteJob("fits")
	r.cycles(t, 1)
	if _, ok := r.claims.get("fits"); ok {
		t.Fatal("the claim of a job that is gone was kept")
	}
}

// Two offers that each fit alone but not together: the claimer takes
// both (each checked against its nodes as they are) and places the older.
// The other is given back in the same cycle when another shard gossips
// room for it, so that its owner can offer it there at once; with no room
// anywhere else it is kept for ClaimGiveUp (room may come here).
func TestClaimThatNoLongerFitsIsGivenBackWhenRoomIsElsewhere(t *testing.T) {
	for _, roomElsewhere := range []bool{true, false} {
		t.Run(fmt.Sprintf("room elsewhere %v", roomElsewhere), func(t *testing.T) {
			r := newRig(t, "shard-t", wire.QueueKey("q")) // not the queue's owner
			r.node("n-1", 8)
			r.gang("a", 1, 6)
			r.gang("b", 1, 6)
			for _, uid := range []string{"a", "b"} {
				r.claims.put(wire.Claim{Job: uid, Queue: "q", From: "shard-o", To: "shard-t", State: wire.Offered})
				if _, err := r.quota.Reserve(context.Background(), wire.JobRef{Namespace: "ns", Name: uid, UID: uid}, "q", api.NewResource(6000, 0, nil)); err != nil {
					t.Fatal(err)
				}
			}
			r.peers.members = []wire.Meta{{ID: "shard-o", Capacity: capacity(2, 2)}, {ID: "shard-t", Capacity: capacity(2, 2)}}
			if roomElsewhere {
				r.peers.members = append(r.peers.members, wire.Meta{ID: "shard-b", Capacity: capacity(16, 8)})
			}
			r.cycles(t, 1)
			if n := r.binder.Binds()["a-0"]; n != "n-1" {
				t.Fatalf("the older claimed job's task bound to %q, want n-1", n)
			}
			_, kept := r.claims.get("b")
			if st := r.s.Stats(); st.Claims != 2 {
				t.Fatalf("stats %+v, want both offers claimed", st)
			}
			if kept == roomElsewhere {
				t.Fatalf("claim of the job that no longer fits kept %v after its cycle, with room elsewhere %v", kept, roomElsewhere)
			}
			if roomElsewhere {
				return
			}
			r.advance(r.s.cfg.ClaimGiveUp)
			r.cycles(t, 2)
			if _, ok := r.claims.get("b"); ok {
				t.Fatal("the claim of a job that does not fit here was kept past ClaimGiveUp")
			}
			if st := r.s.Stats(); st.Refusals != 1 {
				t.Fatalf("stats %+v, want the claim given back once", st)
			}
		})
	}
}

// A batch Job's next wave comes into a PodGroup whose phase still says
// Completed (the owner's Inqueue may not be written yet, or was decided on
// a snapshot that had not seen Completed): offered to a shard with room,
// it is claimed and placed like any pending gang, not skipped as finished
// (it was, and such jobs waited to the end of a 30-minute churn when their
// GPU nodes were another shard's).
func TestClaimerTakesCompletedGroupWithNewPods(t *testing.T) {
	r := newRig(t, "shard-t", wire.QueueKey("q")) // not the queue's owner
	r.node("big-1", 8)
	r.gang("wave", 2, 3)
	r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: "wave", UID: "wave", Queue: "q", MinMember: 2, Phase: api.JobCompleted})
	r.gang("done", 0, 1) // a finished job, nothing pending: still skipped
	r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: "done", UID: "done", Queue: "q", MinMember: 1, Phase: api.JobCompleted})
	r.claims.put(wire.Claim{Job: "wave", Queue: "q", From: "shard-o", To: "shard-t", State: wire.Offered})
	r.claims.put(wire.Claim{Job: "done", Queue: "q", From: "shard-o", To: "shard-t", State: wire.Offered})
	if _, err := r.quota.Reserve(context.Background(), wire.JobRef{Namespace: "ns", Name: "wave", UID: "wave"}, "q", api.NewResource(6000, 0, nil)); err != nil {
		t.Fatal(err)
	}
	r.cycles(t, 2)
	if c, ok := r.claims.get("wave"); !ok || c.State != wire.Claimed || c.To != "shard-t" {
		t.Fatalf("record of the new wave: %+v (present %v), want claimed by shard-t", c, ok)
	}
	b := r.binder.Binds()
	if b["wave-0"] != "big-1" || b["wave-1"] != "big-1" || len(b) != 2 {
		t.Fatalf("binds %v, want the wave's 2 tasks on big-1", b)
	}
	if c, ok := r.claims.get("done"); ok && c.State == wire.Claimed {
		t.Fatalf("the offer of a finished job was claimed: %+v", c)
	}
}

// The owner admits a batch Job's next wave on a snapshot that has not seen
// the Completed it wrote for the wave before (the PodGroup still shows
// Running there): it writes Inqueue all the same, or the group would stay
// Completed for every other shard.
func TestNextWaveWritesInqueueOverTheCompletedSent(t *testing.T) {
	r := newRig(t, "shard-o")
	st := &recStatus{groups: map[string]api.JobStatus{}}
	r.s = r.newScheduler(t, 1, st)
	tree, err := api.BuildTree([]api.QueueSpec{{Name: "q"}})
	if err != nil {
		t.Fatal(err)
	}
	r.s.SetTree(tree)
	r.gang("wave", 2, 3) // no node: admitted, not placed
	r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: "wave", UID: "wave", Queue: "q", MinMember: 2, Phase: api.JobRunning})
	r.s.mu.Lock()
	r.s.rec("wave").phaseSent = phaseKey{phase: api.JobCompleted, succeeded: 2}
	r.s.mu.Unlock()
	r.s.Cycle(context.Background())
	if got := st.phase("wave"); got != string(api.JobInqueue) {
		t.Fatalf("phase written %q, want Inqueue (calls %v)", got, r.quota.Calls())
	}
}

// The capacity gossiped is the free CPU of the schedulable nodes and the
// largest free node, republished when it changes noticeably.
func TestCapacityPublished(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("a", 8)
	r.node("b", 4)
	r.c.AddOrUpdateNode(api.Node{Name: "cordoned", UID: "cordoned", Unschedulable: true,
		Allocatable: api.NewResource(64000, 64*gi, map[string]int64{api.Pods: 110})})
	r.cycles(t, 1)
	pub := r.peers.published
	if len(pub) != 1 || pub[0].FreeMilliCPU != 12000 || pub[0].LargestCPU != 8000 || pub[0].Nodes != 2 || pub[0].FreeMemory != 128*gi {
		t.Fatalf("published %+v, want 12 CPU free on 2 nodes, largest 8", pub)
	}
	if pub[0].AllocMilliCPU != 12000 || pub[0].LargestAllocCPU != 8000 || pub[0].AllocMemory != 128*gi {
		t.Fatalf("published %+v, want 12 CPU allocatable on the schedulable nodes, largest 8", pub)
	}
	r.cycles(t, 10) // nothing changed: nothing new
	if len(r.peers.published) != 1 {
		t.Fatalf("published %d times with nothing changed", len(r.peers.published))
	}
	r.node("c", 16)
	r.cycles(t, 6)
	pub = r.peers.published
	if len(pub) != 2 || pub[1].FreeMilliCPU != 28000 || pub[1].LargestCPU != 16000 {
		t.Fatalf("published %+v, want a second summary with 28 CPU free, largest 16", pub)
	}
}

// Between publications the capacity is summed at most every quarter of
// CapacityInterval, not every cycle: a noticeable change made just after
// a check is gossiped once a quarter interval has passed, not before.
func TestCapacityCheckedAtMostEveryQuarterInterval(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("a", 8)
	ctx := context.Background()
	r.s.Cycle(ctx)
	if n := len(r.peers.published); n != 1 {
		t.Fatalf("published %d times after the first cycle, want 1", n)
	}
	iv := r.s.cfg.CapacityInterval
	r.advance(iv)
	r.s.Cycle(ctx) // checked: nothing changed
	r.node("b", 16)
	r.advance(iv/4 - time.Millisecond)
	r.s.Cycle(ctx)
	if n := len(r.peers.published); n != 1 {
		t.Fatalf("published %d times within a quarter interval of the last check, want 1", n)
	}
	r.advance(time.Millisecond)
	r.s.Cycle(ctx)
	pub := r.peers.published
	if len(pub) != 2 || pub[1].FreeMilliCPU != 24000 || pub[1].Nodes != 2 {
		t.Fatalf("published %+v, want a second summary with 24 CPU free on 2 nodes a quarter interval after the check", pub)
	}
}

// A bind's deadline is the partition use's (the shard may lose the record
// with its lease soon after), never CallTimeout beyond it; with a lease
// far ahead, CallTimeout bounds it.
func TestBindDeadlineBoundedByTheUse(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("n1", 32)
	until := time.Now().Add(3 * time.Second)
	r.own.mu.Lock()
	r.own.until = until
	r.own.mu.Unlock()
	r.gang("near", 2, 1)
	r.cycles(t, 3)
	r.own.mu.Lock()
	r.own.until = time.Now().Add(time.Hour)
	r.own.mu.Unlock()
	r.gang("far", 2, 1)
	r.cycles(t, 3)

	r.binder.mu.Lock()
	defer r.binder.mu.Unlock()
	if len(r.binder.deadlines) != 4 {
		t.Fatalf("%d binds, want 4", len(r.binder.deadlines))
	}
	for i, d := range r.binder.deadlines[:2] {
		if d.IsZero() || d.After(until) {
			t.Errorf("bind %d under a use that ends at %s had deadline %s", i, until.Format(time.StampMilli), d.Format(time.StampMilli))
		}
	}
	for i, d := range r.binder.deadlines[2:] {
		if d.IsZero() || d.After(time.Now().Add(DefaultConfig().CallTimeout)) {
			t.Errorf("bind %d with the lease an hour ahead had deadline %s, want within CallTimeout", i+2, d.Format(time.StampMilli))
		}
	}
}

// A bind whose outcome is unknown keeps the pod's room: no other pod is
// placed there while it is in doubt (the API server may have bound it),
// and the bind is asked again until it is known. Forgetting the pod at
// once, as for a refused bind, double-books the node.
func TestBindInDoubtKeepsTheRoom(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("n1", 2)
	r.binder.mu.Lock()
	r.binder.unknown = 1
	r.binder.mu.Unlock()
	r.gang("first", 1, 2)
	r.s.Cycle(context.Background())
	testenv.Eventually(t, 5*time.Second, func() bool {
		r.binder.mu.Lock()
		defer r.binder.mu.Unlock()
		return r.binder.unknown == 0
	}, "the first bind was not called")
	// While in doubt, another pod that needs the whole node waits.
	r.gang("second", 1, 2)
	for range 3 {
		r.advance(100 * time.Millisecond)
		r.s.Cycle(context.Background())
	}
	if _, ok := r.c.Assumed("second-0"); ok {
		t.Fatal("a pod was placed on the room of a pod whose bind is in doubt")
	}
	if n, ok := r.c.Assumed("first-0"); !ok || n != "n1" {
		t.Fatalf("the pod in doubt is assumed on %q (%v), want n1", n, ok)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return r.s.BindsInFlight() == 0 }, "binds still in flight")
	st := r.s.Stats()
	if st.Binds != 1 || st.BindFailures != 0 || st.BindsInDoubt != 1 {
		t.Fatalf("binds %d, failures %d, in doubt %d: want one in doubt, then the retry confirming it", st.Binds, st.BindFailures, st.BindsInDoubt)
	}
	r.binder.mu.Lock()
	defer r.binder.mu.Unlock()
	if _, ok := r.binder.binds["second-0"]; ok || r.binder.binds["first-0"] != "n1" {
		t.Fatalf("binds %v, want only first-0 on n1", r.binder.binds)
	}
}

// A queue owner whose tentative reservation of a job went with its
// session's lease (its process paused past the TTL) while another shard
// holds the job's claim asks for the reservation again at its next
// reconciliation: the claimer binds only what a resize of the reservation
// covers, so without it the job would wait for ever.
func TestLostReservationAdmittedAgain(t *testing.T) {
	r := newRig(t, "shard-o")
	tree, err := api.BuildTree([]api.QueueSpec{{Name: "q"}})
	if err != nil {
		t.Fatal(err)
	}
	r.s.SetTree(tree)
	r.node("small", 2)
	r.peers.members = []wire.Meta{{ID: "shard-t", Capacity: capacity(32, 8)}}
	r.gang("job", 1, 3)
	r.cycles(t, 2)
	c, ok := r.claims.get("job")
	if !ok || c.To != "shard-t" {
		t.Fatalf("record %+v (present %v), want an offer to shard-t", c, ok)
	}
	c.State = wire.Claimed
	r.claims.put(c)
	reserves := func() int {
		n := 0
		for _, c := range r.quota.Calls() {
			if c == "reserve job" {
				n++
			}
		}
		return n
	}
	if n := reserves(); n != 1 {
		t.Fatalf("%d reserve calls before the loss, want 1: %v", n, r.quota.Calls())
	}
	// The owner's lease expires: its tentative reservation goes.
	r.quota.mu.Lock()
	_, found := r.quota.ledger.Release("job")
	r.quota.mu.Unlock()
	if !found {
		t.Fatal("the job had no reservation to lose")
	}
	r.cycles(t, 2)
	if n := reserves(); n != 1 {
		t.Fatalf("asked again before reconciliation was due (%d reserve calls)", n)
	}
	r.advance(reconcileEvery)
	r.cycles(t, 2)
	r.quota.mu.Lock()
	_, held := r.quota.ledger.Get("job")
	r.quota.mu.Unlock()
	if !held || reserves() != 2 {
		t.Fatalf("after reconciliation: reservation held %v, %d reserve calls, want it asked for again once", held, reserves())
	}
	if st := r.s.Stats(); st.LostReservations != 1 {
		t.Fatalf("stats %+v, want 1 lost reservation", st)
	}
	if b := r.binder.Binds(); len(b) != 0 {
		t.Fatalf("the owner bound %v although shard-t holds the claim", b)
	}
}

// starvingGang adds, created now on the rig's clock, a job of n tasks of
// cpu cores (minMember n) in queue q.
func (r *rig) starvingGang(uid string, n int, cpu int64) {
	r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: uid, UID: uid, Queue: "q", MinMember: int32(n), Phase: api.JobPending, Created: r.clock()})
	for i := 0; i < n; i++ {
		t := api.Task{Namespace: "ns", Name: fmt.Sprintf("%s-%d", uid, i), UID: fmt.Sprintf("%s-%d", uid, i), Job: uid,
			Request: api.NewResource(cpu*1000, gi, map[string]int64{api.Pods: 1}), Phase: api.TaskPending, SchedulerName: "volcano", Created: r.clock()}
		r.claims.mu.Lock()
		r.claims.jobOf[t.UID] = uid
		r.claims.mu.Unlock()
		r.c.AddOrUpdateTask(t)
	}
}

// running puts a running pod of cpu cores on node.
func (r *rig) running(uid, node string, cpu int64, phase api.TaskPhase) {
	r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: uid, UID: uid, Job: "other", NodeName: node, Phase: phase,
		Request: api.NewResource(cpu*1000, gi, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
}

// withAlloc is a capacity with no room now whose nodes, empty, hold
// allocCPU cores in all and largestCPU on one.
func withAlloc(allocCPU, largestCPU int64) wire.Capacity {
	c := capacity(1, 1)
	c.AllocMilliCPU, c.LargestAllocCPU, c.AllocMemory, c.LargestAllocMem = allocCPU*1000, largestCPU*1000, 1<<40, 1<<40
	return c
}

// A gang too large for its owner's nodes even were they empty, for which
// no shard has room now, is offered once it starves (not before) to a
// shard whose nodes could hold it empty, the one with the most free now;
// one whose nodes are too few or too small is skipped. Without that offer
// it waited until some shard had room for it all at once.
func TestStarvingGangOfferedToShardThatCanHold(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("a", 8)
	r.node("b", 8) // 16 CPU here: a gang of 3 × 8 never fits
	few, small := withAlloc(16, 8), withAlloc(64, 4)
	can, canMore := withAlloc(32, 8), withAlloc(32, 8)
	canMore.FreeMilliCPU = 2000
	r.peers.members = []wire.Meta{{ID: "shard-few", Capacity: few}, {ID: "shard-small", Capacity: small},
		{ID: "shard-can", Capacity: can}, {ID: "shard-more", Capacity: canMore}}
	r.starvingGang("big", 3, 8)
	r.cycles(t, 5)
	if got := r.claims.Offered(); len(got) != 0 {
		t.Fatalf("offers %v before the gang starved, with no shard's room fitting it", got)
	}
	r.advance(r.s.cfg.StarveAfter)
	r.cycles(t, 1)
	if got := r.claims.Offered(); len(got) != 1 || got[0] != "big→shard-more" {
		t.Fatalf("offers %v, want one to shard-more (can hold it, most free)", got)
	}
	if st := r.s.Stats(); st.HoldOffers != 1 || st.Offers != 1 || st.Holds != 0 {
		t.Fatalf("stats %+v, want 1 offer to hold and no hold here", st)
	}
	// shard-more refuses: the next goes to shard-can, never to the others.
	r.claims.remove("big")
	r.cycles(t, 2)
	if got := r.claims.Offered(); len(got) != 2 || got[1] != "big→shard-can" {
		t.Fatalf("offers %v, want the second to shard-can", got)
	}
	r.claims.remove("big")
	r.cycles(t, 2)
	if got := r.claims.Offered(); len(got) != 2 {
		t.Fatalf("offers %v, want none to shards whose nodes cannot hold the gang", got)
	}
}

// A gang that fits its owner's nodes when empty, where no shard that
// could hold it has more free, is held for there, not offered.
func TestStarvingGangThatFitsHereIsNotOfferedToHold(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("a", 8)
	r.node("b", 8)
	r.running("busy-a", "a", 6, api.TaskRunning)
	r.running("busy-b", "b", 6, api.TaskRunning)
	r.peers.members = []wire.Meta{{ID: "shard-can", Capacity: withAlloc(64, 8)}}
	r.starvingGang("pair", 2, 8)
	r.advance(r.s.cfg.StarveAfter)
	r.cycles(t, 2)
	if got := r.claims.Offered(); len(got) != 0 {
		t.Fatalf("offers %v of a gang this shard can hold for", got)
	}
	if st := r.s.Stats(); st.Holds != 1 {
		t.Fatalf("stats %+v, want a hold here", st)
	}
}

// The shard offered a starving gang that does not fit now claims it when
// it can hold nodes for it, keeps the claim past ClaimGiveUp while the
// held nodes drain (younger jobs go elsewhere), and binds the gang there
// under the claim. A gang that has not starved yet is refused as before.
func TestClaimerHoldsForStarvingGang(t *testing.T) {
	r := newRig(t, "shard-t", wire.QueueKey("q")) // not the queue's owner
	for _, n := range []string{"n1", "n2", "n3"} {
		r.node(n, 8)
		r.running("busy-"+n, n, 5, api.TaskRunning) // 3 CPU free on each
	}
	r.starvingGang("starved", 2, 6)
	r.advance(r.s.cfg.StarveAfter - time.Second)
	r.starvingGang("fresh", 2, 6)
	r.advance(time.Second) // "starved" has waited StarveAfter, "fresh" 1 s
	for _, uid := range []string{"starved", "fresh"} {
		if _, err := r.quota.Reserve(context.Background(), wire.JobRef{Namespace: "ns", Name: uid, UID: uid}, "q", api.NewResource(12000, 0, nil)); err != nil {
			t.Fatal(err)
		}
	}
	// An offer that is not one to hold is refused, not held for: while
	// another shard gossips room for the gang (its owner offers it there),
	// or while the owner's own nodes could hold it (it holds for it).
	owner := wire.Meta{ID: "shard-o", Capacity: withAlloc(8, 8)} // cannot hold 12 CPU
	for _, members := range [][]wire.Meta{
		{owner, {ID: "shard-room", Capacity: capacity(64, 8)}},
		{{ID: "shard-o", Capacity: withAlloc(64, 8)}},
	} {
		r.peers.members = members
		r.claims.put(wire.Claim{Job: "starved", Queue: "q", From: "shard-o", To: "shard-t", State: wire.Offered})
		r.cycles(t, 1)
		if _, ok := r.claims.get("starved"); ok || len(r.s.held.byJob) != 0 {
			t.Fatalf("peers %+v: an offer not to hold was held for here: holds %+v", members, r.s.held)
		}
	}
	r.peers.members = []wire.Meta{owner}
	r.s.ho.refused = map[string]map[string]time.Time{}
	r.claims.put(wire.Claim{Job: "starved", Queue: "q", From: "shard-o", To: "shard-t", State: wire.Offered})
	r.claims.put(wire.Claim{Job: "fresh", Queue: "q", From: "shard-o", To: "shard-t", State: wire.Offered})
	r.cycles(t, 1)
	if _, ok := r.claims.get("fresh"); ok {
		t.Fatal("an offer of a gang that has not starved and does not fit was not refused")
	}
	c, ok := r.claims.get("starved")
	if !ok || c.State != wire.Claimed {
		t.Fatalf("record of the starving gang: %+v (present %v), want claimed", c, ok)
	}
	h := r.s.held.byJob["starved"]
	if h == nil || len(h.nodes) != 2 {
		t.Fatalf("holds %+v, want two nodes held for the claimed gang", r.s.held)
	}
	// Past ClaimGiveUp the claim stays: its nodes are draining, and a
	// younger job of this shard's own goes to the node not held.
	r.advance(2 * r.s.cfg.ClaimGiveUp)
	r.cycles(t, 3)
	if c, ok := r.claims.get("starved"); !ok || c.State != wire.Claimed {
		t.Fatalf("claim given up while its held nodes drain: %+v (present %v)", c, ok)
	}
	r.own.mu.Lock()
	delete(r.own.notHeld, wire.QueueKey("q")) // this shard now owns queue q too
	r.own.mu.Unlock()
	r.starvingGang("small", 1, 2)
	r.cycles(t, 3)
	if node, ok := r.binder.Binds()["small-0"]; !ok || h.nodes[node] {
		t.Fatalf("younger job bound to %q (bound: %v), want the node not held (held %v)", node, ok, h.nodes)
	}
	// The pods on the held nodes finish: the gang binds there, under the claim.
	for n := range h.nodes {
		r.running("busy-"+n, n, 5, api.TaskSucceeded)
	}
	r.cycles(t, 2)
	b := r.binder.Binds()
	delete(b, "small-0")
	if !h.nodes[b["starved-0"]] || !h.nodes[b["starved-1"]] || len(b) != 2 || r.binder.unfenced != 0 {
		t.Fatalf("binds %v (%d outside the claim), want the gang on its held nodes %v", b, r.binder.unfenced, h.nodes)
	}
	if len(r.s.held.byJob) != 0 {
		t.Fatalf("hold still on after the gang was placed: %+v", r.s.held)
	}
}

// A claim lost after the claimer held nodes for the gang undoes the hold
// (and its count), so that nothing is held for a job placed elsewhere; the
// next offer is claimed and held for at once.
func TestClaimLostUndoesTheHold(t *testing.T) {
	r := newRig(t, "shard-t", wire.QueueKey("q"))
	for _, n := range []string{"n1", "n2"} {
		r.node(n, 8)
		r.running("busy-"+n, n, 5, api.TaskRunning)
	}
	r.starvingGang("g", 2, 6)
	if _, err := r.quota.Reserve(context.Background(), wire.JobRef{Namespace: "ns", Name: "g", UID: "g"}, "q", api.NewResource(12000, 0, nil)); err != nil {
		t.Fatal(err)
	}
	r.advance(r.s.cfg.StarveAfter)
	r.peers.members = []wire.Meta{{ID: "shard-o", Capacity: withAlloc(8, 8)}} // its owner cannot hold it
	r.claims.put(wire.Claim{Job: "g", Queue: "q", From: "shard-o", To: "shard-t", State: wire.Offered})
	r.claims.mu.Lock()
	r.claims.claimErr = wire.ErrClaimChanged
	r.claims.mu.Unlock()
	r.cycles(t, 1)
	if len(r.s.held.byJob) != 0 || len(r.s.held.byNode) != 0 || r.s.Stats().Holds != 0 {
		t.Fatalf("claim lost, yet holds %+v (stats %+v)", r.s.held, r.s.Stats())
	}
	r.claims.mu.Lock()
	r.claims.claimErr = nil
	r.claims.mu.Unlock()
	r.cycles(t, 1)
	if c, ok := r.claims.get("g"); !ok || c.State != wire.Claimed || r.s.held.byJob["g"] == nil || r.s.Stats().Holds != 1 {
		t.Fatalf("record %+v (present %v), holds %+v: want it claimed and held for", c, ok, r.s.held)
	}
}

// A starving GPU gang goes where GPUs are free, whatever the CPU: its
// owner has no GPU node, a shard with the most free CPU has too few GPUs
// to hold it even empty, and of the two that could hold it the one with
// more free GPUs gets it.
func TestStarvingGPUGangGoesWhereGPUsAreFree(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("cpu-only", 64)
	gpus := func(freeCPU, freeGPU, allocGPU int64) wire.Capacity {
		c := withAlloc(1024, 64)
		c.FreeMilliCPU, c.FreeGPU, c.AllocGPU, c.LargestAllocGPU = freeCPU*1000, freeGPU, allocGPU, 8
		return c
	}
	r.peers.members = []wire.Meta{
		{ID: "shard-cpu", Capacity: gpus(900, 8, 8)}, // 8 GPUs in all: 16 never fit
		{ID: "shard-few", Capacity: gpus(10, 4, 32)},
		{ID: "shard-many", Capacity: gpus(5, 12, 32)},
	}
	r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: "gpu", UID: "gpu", Queue: "q", MinMember: 4, Phase: api.JobPending, Created: r.clock()})
	for i := 0; i < 4; i++ {
		tk := api.Task{Namespace: "ns", Name: fmt.Sprintf("gpu-%d", i), UID: fmt.Sprintf("gpu-%d", i), Job: "gpu",
			Request: api.NewResource(4000, gi, map[string]int64{api.Pods: 1, "nvidia.com/gpu": 4}), Phase: api.TaskPending, SchedulerName: "volcano", Created: r.clock()}
		r.claims.mu.Lock()
		r.claims.jobOf[tk.UID] = "gpu"
		r.claims.mu.Unlock()
		r.c.AddOrUpdateTask(tk)
	}
	r.advance(r.s.cfg.StarveAfter)
	r.cycles(t, 1)
	if got := r.claims.Offered(); len(got) != 1 || got[0] != "gpu→shard-many" {
		t.Fatalf("offers %v, want one to shard-many (most free GPUs among those that could hold 16)", got)
	}
}

// Reconciliation lists the reservations of the queues held here, not the
// cluster's: a reservation whose job is gone is released in a held queue,
// and one in another shard's queue is neither listed nor touched.
func TestReconcileListsOnlyTheQueuesHeld(t *testing.T) {
	r := newRig(t, "shard-o", wire.QueueKey("theirs"))
	specs := []api.QueueSpec{{Name: "org"}, {Name: "mine", Parent: "org"}, {Name: "theirs", Parent: "org"}}
	r.queues(t, specs)
	r.node("n1", 8)
	r.quota.mu.Lock()
	for _, q := range []string{"mine", "theirs"} {
		if _, _, err := r.quota.ledger.Reserve(coordinator.ReserveRequest{Job: wire.JobRef{Namespace: "ns", Name: "gone-" + q, UID: "gone-" + q}, Queue: q, Amount: api.NewResource(1000, gi, nil)}); err != nil {
			r.quota.mu.Unlock()
			t.Fatal(err)
		}
	}
	r.quota.mu.Unlock()
	r.cycles(t, 1)
	r.advance(orphanGrace)
	r.cycles(t, 1)
	r.quota.mu.Lock()
	listed := slices.Clone(r.quota.listed)
	_, mineHeld := r.quota.ledger.Get("gone-mine")
	_, theirsHeld := r.quota.ledger.Get("gone-theirs")
	r.quota.mu.Unlock()
	if len(listed) < 2 {
		t.Fatalf("listed %v, want a list at each of the two reconciliations", listed)
	}
	for _, qs := range listed {
		if !slices.Equal(qs, []string{"default", "mine", "org", "root"}) {
			t.Fatalf("listed %v, want only the queues held here (the tree's but theirs), each time", listed)
		}
	}
	if mineHeld || !theirsHeld {
		t.Fatalf("after two reconciliations: the orphan in a held queue kept %v, the one in another shard's queue kept %v; want released and kept", mineHeld, theirsHeld)
	}
}

// A job admitted here whose PodGroup moved to another queue held here
// keeps its reservation in the first queue until it fits in the new one;
// that queue is no longer held here, yet reconciliation lists it too, so
// the reservation is not taken for lost (admitted again, counted, warned).
func TestReconcileFindsAMovedJobsReservation(t *testing.T) {
	r := newRig(t, "shard-o")
	specs := []api.QueueSpec{{Name: "q"}, {Name: "new", Capability: mustLimit(t, 1)}}
	r.queues(t, specs)
	r.node("small", 2)
	r.gang("job", 1, 4) // admitted in q, fits on no node: stays admitted and pending
	r.cycles(t, 2)
	r.quota.mu.Lock()
	res, ok := r.quota.ledger.Get("job")
	r.quota.mu.Unlock()
	if !ok || res.Queue != "q" {
		t.Fatalf("reservation %+v (present %v), want one in q", res, ok)
	}
	// The PodGroup moves to new, where 4 CPU does not fit under 1, and q
	// goes to another shard.
	r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: "job", UID: "job", Queue: "new", MinMember: 1, Phase: api.JobPending, ResourceVersion: "2"})
	r.own.mu.Lock()
	r.own.notHeld[wire.QueueKey("q")] = true
	r.own.mu.Unlock()
	r.advance(reconcileEvery)
	r.cycles(t, 2)
	r.quota.mu.Lock()
	res, ok = r.quota.ledger.Get("job")
	listed := slices.Clone(r.quota.listed)
	r.quota.mu.Unlock()
	if st := r.s.Stats(); st.LostReservations != 0 {
		t.Fatalf("stats %+v: the moved job's reservation was taken for lost (lists asked %v)", st, listed)
	}
	if !ok || res.Queue != "q" {
		t.Fatalf("reservation %+v (present %v), want it still in q", res, ok)
	}
	if last := listed[len(listed)-1]; !slices.Contains(last, "q") || !slices.Contains(last, "new") {
		t.Fatalf("the last list asked for %v, want new (held) and q (the admitted job's reservation)", last)
	}
}

// queues gives the rig's coordinator and its scheduler the tree of specs.
func (r *rig) queues(t *testing.T, specs []api.QueueSpec) {
	t.Helper()
	if err := r.quota.setQueues(specs); err != nil {
		t.Fatal(err)
	}
	tree, err := api.BuildTree(specs)
	if err != nil {
		t.Fatal(err)
	}
	r.s.SetTree(tree)
}

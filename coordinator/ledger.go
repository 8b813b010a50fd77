package coordinator

import (
	"fmt"
	"slices"
	"sort"

	"github.com/shardsched/shardsched/api"
)

// ReserveRequest asks for quota for one job.
type ReserveRequest struct {
	Job    JobRef       `json:"job"`
	Queue  string       `json:"queue"`
	Amount api.Resource `json:"amount"`
	// Lease is the asking shard's session lease; the reservation is
	// tentative until confirmed and is dropped when this lease expires.
	Lease int64  `json:"lease"`
	Shard string `json:"shard"`
	// Terms, when set, are recorded on the reservation; with Reclaim the
	// job takes quota back when it does not fit (reclaim.go).
	Terms *Terms `json:"terms,omitempty"`
}

// Ledger is the hierarchical quota ledger: the queue tree, every
// reservation, and the usage of every queue (the sum of the reservations in
// its subtree). It is a deterministic state machine with no I/O and no
// locking: one goroutine owns it (the leader's loop).
type Ledger struct {
	tree  *api.Tree
	usage map[string]api.Resource
	res   map[string]*Reservation // by job UID
	// victims: nominee UID → the UIDs of the reservations marked for it.
	victims map[string]map[string]bool
	// nominees: the UIDs of the nominated reservations.
	nominees map[string]bool
	// byQueue: leaf queue → its reservations by UID (a plan looks only at
	// the queues it may take from).
	byQueue map[string]map[string]*Reservation
	// dirty: reservations changed as a side effect since takeDirty.
	dirty map[string]bool
	// guar: parent → children that set a guarantee, for guarTree.
	guar     map[string][]string
	guarTree *api.Tree
}

// NewLedger returns an empty ledger over tree (nil means a tree of only the
// root and default queues).
func NewLedger(tree *api.Tree) *Ledger {
	if tree == nil {
		tree, _ = api.BuildTree(nil)
	}
	return &Ledger{tree: tree, usage: map[string]api.Resource{}, res: map[string]*Reservation{},
		victims: map[string]map[string]bool{}, nominees: map[string]bool{}, dirty: map[string]bool{},
		byQueue: map[string]map[string]*Reservation{}}
}

// Tree returns the current queue tree.
func (l *Ledger) Tree() *api.Tree { return l.tree }

// Usage returns the reserved amount of a queue's subtree.
func (l *Ledger) Usage(queue string) api.Resource { return l.usage[queue].Clone() }

// Get returns the reservation of a job UID.
func (l *Ledger) Get(uid string) (Reservation, bool) {
	r, ok := l.res[uid]
	if !ok {
		return Reservation{}, false
	}
	return r.Clone(), true
}

// Len returns the number of reservations.
func (l *Ledger) Len() int { return len(l.res) }

// Reservations returns every reservation, sorted by UID.
func (l *Ledger) Reservations() []Reservation {
	return l.ReservationsIn(nil)
}

// ReservationsIn is Reservations of the jobs in these leaf queues only
// (every queue when none is named), in the same order.
func (l *Ledger) ReservationsIn(queues []string) []Reservation {
	in := queueSet(queues)
	var out []Reservation
	if in == nil {
		out = make([]Reservation, 0, len(l.res))
	}
	for _, r := range l.res {
		if in == nil || in[r.Queue] {
			out = append(out, r.Clone())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Job.UID < out[j].Job.UID })
	return out
}

// queueSet is the set of queues, nil when none is named (every queue).
func queueSet(queues []string) map[string]bool {
	if len(queues) == 0 {
		return nil
	}
	in := make(map[string]bool, len(queues))
	for _, q := range queues {
		in[q] = true
	}
	return in
}

// ValidateReserve checks a request without touching the ledger.
func (l *Ledger) ValidateReserve(req ReserveRequest) error {
	if req.Job.UID == "" {
		return fmt.Errorf("%w: job %s/%s has an empty UID", ErrInvalid, req.Job.Namespace, req.Job.Name)
	}
	if err := req.Amount.Validate(); err != nil {
		return fmt.Errorf("%w: job %s: %v", ErrInvalid, req.Job, err)
	}
	if req.Amount.IsZero() {
		return fmt.Errorf("%w: job %s asks for an empty amount", ErrInvalid, req.Job)
	}
	if _, err := l.tree.JobPath(req.Queue); err != nil {
		return fmt.Errorf("%w: job %s: %v", ErrInvalid, req.Job, err)
	}
	return nil
}

// Reserve admits req if, for its leaf queue and every ancestor, usage +
// amount ≤ capability (unset dimensions unlimited). On success usage grows
// at every level at once; on failure nothing changes and the error is a
// *QuotaError naming the first level short. A request for a UID that already
// holds a reservation returns that reservation (existed = true) whatever the
// amount asked, except that:
//   - a request naming another queue moves the reservation there, amount
//     unchanged, if it fits on every level of the new path that the old
//     one does not share (the job's PodGroup was moved to another queue);
//     otherwise nothing changes and the error is the *QuotaError of the
//     first level short, or ErrInvalid for an unknown queue;
//   - a tentative reservation held under another shard session's lease is
//     moved to the asker's lease (a queue that changed owner: the new owner
//     must hold what it places on, or the reservation would vanish with the
//     previous owner's lease while its job runs).
//
// A bad request returns an error wrapping ErrInvalid.
func (l *Ledger) Reserve(req ReserveRequest) (res Reservation, existed bool, err error) {
	if req.Job.UID != "" {
		if r, ok := l.res[req.Job.UID]; ok {
			if r.State != Nominated {
				if req.Queue != "" && req.Queue != r.Queue {
					if err := l.move(r, req.Queue); err != nil {
						return Reservation{}, true, err
					}
				}
				if r.State == Tentative && req.Lease != 0 && r.Lease != req.Lease {
					r.Lease, r.Shard = req.Lease, req.Shard
				}
				return r.Clone(), true, nil
			}
			if l.keepNominated(r, req) {
				return r.Clone(), true, nil
			}
			// Dropped (moved, or no longer fits once its victims went):
			// asked for again below, as new.
		}
	}
	if err := l.ValidateReserve(req); err != nil {
		return Reservation{}, false, err
	}
	path, _ := l.tree.JobPath(req.Queue)
	for _, q := range path {
		if _, err := l.usage[q].Add(req.Amount); err != nil {
			return Reservation{}, false, fmt.Errorf("%w: queue %q: %v", ErrInvalid, q, err)
		}
	}
	if qe := l.overAt(path, req.Amount); qe != nil {
		if picks, ok := l.plan(req, path, qe); ok {
			return l.applyPlan(req, path, picks), false, nil
		}
		return Reservation{}, false, qe
	}
	r := &Reservation{
		Job: req.Job, Queue: req.Queue, Path: path, Amount: req.Amount.Clone(), Floor: req.Amount.Clone(),
		State: Tentative, Lease: req.Lease, Shard: req.Shard,
	}
	r.SetTerms(req.Terms)
	if req.Lease == 0 {
		// No session to bind to: the caller vouches for the job itself.
		r.State = Confirmed
	}
	l.insert(r)
	l.book(r)
	return r.Clone(), false, nil
}

// keepNominated answers the nominee's Reserve: while victims are left it
// stays nominated (moved to the asker's lease); once none is, it is
// promoted if it fits. It reports false when the nominated reservation was
// dropped instead (the job's PodGroup moved to another queue, or it no
// longer fits): the caller then treats the request as new.
func (l *Ledger) keepNominated(r *Reservation, req ReserveRequest) bool {
	if req.Queue != "" && req.Queue != r.Queue {
		l.Release(r.Job.UID)
		return false
	}
	if len(l.victims[r.Job.UID]) > 0 {
		if req.Lease != 0 && r.Lease != req.Lease {
			r.Lease, r.Shard = req.Lease, req.Shard
		}
		return true
	}
	return l.promote(r, req.Lease, req.Shard)
}

// move takes r off its path and books it on queue's, if its amount fits on
// every level of the new path that is not on the old one (a level on both
// keeps its usage); otherwise nothing changes.
func (l *Ledger) move(r *Reservation, queue string) error {
	path, err := l.tree.JobPath(queue)
	if err != nil {
		return fmt.Errorf("%w: move of %s to queue %q: %v", ErrInvalid, r.Job, queue, err)
	}
	onOld := make(map[string]bool, len(r.Path))
	for _, q := range r.Path {
		onOld[q] = true
	}
	for _, q := range path {
		if onOld[q] {
			continue
		}
		u, err := l.usage[q].Add(r.Amount)
		if err != nil {
			return fmt.Errorf("%w: queue %q: %v", ErrInvalid, q, err)
		}
		spec, _ := l.tree.Get(q)
		if dim, over, bad := spec.Capability.Excess(u); bad {
			capv, _ := spec.Capability.Get(dim)
			return &QuotaError{Queue: q, Resource: dim, Reserved: l.usage[q].Get(dim), Asked: r.Amount.Get(dim),
				Capability: capv, Short: over}
		}
	}
	l.unbook(r)
	l.remove(r)
	r.Queue, r.Path = queue, path
	l.insert(r)
	l.book(r)
	return nil
}

// Confirm makes a tentative reservation durable. Confirming a confirmed
// reservation is a no-op; a nominated one cannot be confirmed (ErrInvalid).
func (l *Ledger) Confirm(uid string) (Reservation, error) {
	r, ok := l.res[uid]
	if !ok {
		return Reservation{}, fmt.Errorf("%w: uid %q", ErrNotFound, uid)
	}
	if r.State == Nominated {
		// Held while its victims go: nothing of it is bound yet.
		return Reservation{}, fmt.Errorf("%w: the reservation of %s is nominated, not yet the job's", ErrInvalid, r.Job)
	}
	r.State, r.Lease = Confirmed, 0
	return r.Clone(), nil
}

// Release removes a reservation and returns it; found is false (and nothing
// changes) when the UID holds none.
func (l *Ledger) Release(uid string) (res Reservation, found bool) {
	r, ok := l.res[uid]
	if !ok {
		return Reservation{}, false
	}
	l.remove(r)
	l.unbook(r)
	if r.Evict != nil {
		// A victim gone: its nominee may be promoted on its next ask.
		if set := l.victims[r.Evict.By.UID]; set != nil {
			delete(set, uid)
			if len(set) == 0 {
				delete(l.victims, r.Evict.By.UID)
			}
		}
	}
	if r.State == Nominated {
		delete(l.nominees, uid)
		l.unmarkVictimsOf(uid) // its plan is undone
	}
	return r.Clone(), true
}

// insert adds r to the reservations and their index by queue.
func (l *Ledger) insert(r *Reservation) {
	l.res[r.Job.UID] = r
	m := l.byQueue[r.Queue]
	if m == nil {
		m = map[string]*Reservation{}
		l.byQueue[r.Queue] = m
	}
	m[r.Job.UID] = r
}

// remove takes r out of the reservations and their index.
func (l *Ledger) remove(r *Reservation) {
	delete(l.res, r.Job.UID)
	if m := l.byQueue[r.Queue]; m != nil {
		delete(m, r.Job.UID)
		if len(m) == 0 {
			delete(l.byQueue, r.Queue)
		}
	}
}

// book adds r's amount to the usage of every queue on its path.
func (l *Ledger) book(r *Reservation) {
	for _, q := range r.Path {
		u, _ := l.usage[q].Add(r.Amount)
		l.usage[q] = u
	}
}

// unbook takes r's amount off the usage of every queue on its path; a usage
// that reaches zero is dropped.
func (l *Ledger) unbook(r *Reservation) {
	for _, q := range r.Path {
		u, _ := l.usage[q].Sub(r.Amount)
		if u.IsZero() {
			delete(l.usage, q)
		} else {
			l.usage[q] = u
		}
	}
}

// SetTree replaces the queue tree. The specs are validated as a whole
// (api.BuildTree); on error the ledger is unchanged: shards send the valid
// part of their tree (api.BuildTreePartial), so an invalid list here is a
// caller's bug. Existing reservations are never cancelled, even when a
// capability falls below usage: new reservations are blocked at once, at
// every level, until usage falls below it. A reservation whose queue still
// exists is counted along its queue's new path; one whose queue is gone
// keeps counting along its old path until released.
//
// Cost: a change that keeps every queue's path (capabilities, deserved,
// weights, strategies, leaves added or removed) is O(queues): usage is the
// sum of reservations along paths, which did not change. Only when some
// queue's path changed are the reservations of those queues moved, found in
// one pass over the reservations.
func (l *Ledger) SetTree(specs []api.QueueSpec) (*api.Tree, error) {
	tree, err := api.BuildTree(specs)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	l.useTree(tree)
	return tree, nil
}

// useTree installs tree and moves the reservations of queues whose path
// changed.
func (l *Ledger) useTree(tree *api.Tree) {
	old := l.tree
	l.tree = tree
	if old == tree {
		return
	}
	if moved := movedQueues(old, tree); len(moved) > 0 {
		l.repath(moved)
	}
}

// movedQueues returns the queues of cur whose path to the root differs from
// their path in old (or that old does not hold): a queue whose parent
// changed, and every queue below it.
func movedQueues(old, cur *api.Tree) map[string]bool {
	memo := map[string]bool{}
	var moved func(n string) bool
	moved = func(n string) bool {
		if m, ok := memo[n]; ok {
			return m
		}
		s, _ := cur.Get(n)
		o, inOld := old.Get(n)
		m := !inOld || o.Parent != s.Parent
		if !m && n != api.RootQueue {
			m = moved(s.Parent) // depth of a valid tree: no cycle
		}
		memo[n] = m
		return m
	}
	out := map[string]bool{}
	for _, n := range cur.Names() {
		if moved(n) {
			out[n] = true
		}
	}
	return out
}

// repath moves each reservation of a moved queue from its recorded path to
// its queue's path in the current tree.
func (l *Ledger) repath(moved map[string]bool) {
	for _, r := range l.res {
		if !moved[r.Queue] {
			continue
		}
		p, err := l.tree.Path(r.Queue)
		if err != nil || slices.Equal(p, r.Path) {
			continue
		}
		l.unbook(r)
		r.Path = p
		l.book(r)
	}
}

// Restore inserts a reservation read back from storage, as is; it is
// counted along its queue's path when the queue exists, else along its
// stored path.
func (l *Ledger) Restore(r Reservation) {
	if old, ok := l.res[r.Job.UID]; ok {
		l.Release(old.Job.UID)
	}
	rc := r.Clone()
	if p, err := l.tree.Path(rc.Queue); err == nil {
		rc.Path = p
	}
	rc.Evict = nil
	l.insert(&rc)
	l.book(&rc)
	if rc.State == Nominated {
		l.nominees[rc.Job.UID] = true
	}
	if r.Evict != nil {
		l.mark(&rc, *r.Evict.Clone())
		delete(l.dirty, rc.Job.UID)
	}
}

// Settle drops, after reservations were restored, the eviction marks whose
// nominee is gone or no longer nominated; the reservations it unmarks are
// written with the next commit.
func (l *Ledger) Settle() { l.settle() }

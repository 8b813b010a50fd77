package shard

import (
	"slices"
	"sort"
	"time"
)

// KeyState is the state of one key in the ownership machine.
type KeyState int

// Key states. Only Held keys may be used.
const (
	// Absent: not held, nothing in flight.
	Absent KeyState = iota
	// Acquiring: an acquire Txn is in flight.
	Acquiring
	// Waiting: wanted, but another shard's record exists; retried when that
	// record is deleted or at the next retry time.
	Waiting
	// Held: the record is ours; the key may be used while the lease is
	// fresh (Holds checks both).
	Held
	// Draining: no longer wanted (or the lease is stale); no new use starts,
	// the release waits for in-flight uses to end.
	Draining
	// Releasing: the delete Txn is in flight.
	Releasing
)

func (s KeyState) String() string {
	return [...]string{"absent", "acquiring", "waiting", "held", "draining", "releasing"}[s]
}

// ActionKind says what the shell must do for a key.
type ActionKind int

// Actions.
const (
	// Acquire: create the key's ownership record under our lease if absent.
	Acquire ActionKind = iota
	// Release: delete the key's ownership record if it is still ours.
	Release
)

func (a ActionKind) String() string {
	if a == Acquire {
		return "acquire"
	}
	return "release"
}

// Action is one etcd operation the shell must carry out and report back.
type Action struct {
	Kind ActionKind
	Key  string
}

// MachineConfig tunes the machine.
type MachineConfig struct {
	// RetryAfter is how long a refused or failed acquire waits before it is
	// tried again (a deleted record triggers an earlier try).
	RetryAfter time.Duration
	// LeaseMargin: keys stop being usable this long before the lease
	// could expire, so a shard never uses a key whose record another
	// shard may already have taken.
	LeaseMargin time.Duration
}

type keyInfo struct {
	state    KeyState
	inflight int
	retryAt  time.Time
	epoch    int64     // create revision of our record, while held
	heldAt   time.Time // when it last became held
	// lostWhileAcquiring: a Lost arrived while the acquire was in flight;
	// its result must not make the key usable.
	lostWhileAcquiring bool
	// mustRelease: the lease may have expired while held, so the key may
	// not return to Held without a release and a fresh acquire.
	mustRelease bool
}

// Machine decides ownership transitions. It is deterministic and not safe
// for concurrent use: one owner (Shard) feeds it events in order, carries
// out the actions it returns, and reports their results back as events.
type Machine struct {
	cfg        MachineConfig
	now        time.Time
	leaseUntil time.Time // the lease is known alive until then
	desired    map[string]bool
	keys       map[string]*keyInfo
	// heldGen counts the moves into and out of Held (setState); heldMemo
	// is HeldFor's last answer, which serves again while no key moved,
	// for the same d, until a held key comes of age. The ownership loop
	// asks every 100 ms, and listing and sorting a few thousand keys each
	// time was a sixth of an idle shard's CPU at 5,000 nodes.
	heldGen  uint64
	heldMemo heldMemo
	// wake is the earliest time at which the clock alone can move a key
	// (zero: no such time): a retry falling due, or the lease possibly
	// expiring. Every step and stepKey keeps it; a Tick before it
	// has nothing to do and skips the pass over every key (at 1,000 keys,
	// ten passes a second were a twentieth of a busy shard's CPU).
	wake time.Time
}

// heldMemo is one HeldFor answer: keys for d at heldGen gen, good until
// until, when a held key younger than d comes of age (zero: no such key).
type heldMemo struct {
	valid bool
	gen   uint64
	d     time.Duration
	until time.Time
	keys  []string
}

// setState moves k to state s; a move into or out of Held makes HeldFor
// list the keys again. Every change of a key's state goes through here.
func (m *Machine) setState(k *keyInfo, s KeyState) {
	if k.state == Held || s == Held {
		m.heldGen++
	}
	k.state = s
}

// NewMachine returns a machine that wants nothing and holds nothing.
func NewMachine(cfg MachineConfig, now time.Time) *Machine {
	return &Machine{cfg: cfg, now: now, desired: map[string]bool{}, keys: map[string]*keyInfo{}}
}

func (m *Machine) info(key string) *keyInfo {
	k, ok := m.keys[key]
	if !ok {
		k = &keyInfo{}
		m.keys[key] = k
	}
	return k
}

func (m *Machine) gc(key string) {
	if k, ok := m.keys[key]; ok && k.state == Absent && k.inflight == 0 && !m.desired[key] {
		delete(m.keys, key)
	}
}

// leaseExpired reports whether the lease may have expired (our records may
// be gone).
func (m *Machine) leaseExpired() bool { return !m.now.Before(m.leaseUntil) }

// leaseFresh reports whether keys may be used now.
func (m *Machine) leaseFresh() bool {
	return m.now.Before(m.leaseUntil.Add(-m.cfg.LeaseMargin))
}

// SetDesired replaces the set of keys the ring gives this shard and returns
// the actions that follow: acquires for new keys, releases for keys no
// longer wanted that have nothing in flight.
func (m *Machine) SetDesired(keys []string) []Action {
	m.desired = make(map[string]bool, len(keys))
	for _, k := range keys {
		m.desired[k] = true
	}
	return m.step()
}

// Tick advances the clock: retries fall due and a stale lease stops use.
func (m *Machine) Tick(now time.Time) []Action {
	if now.After(m.now) {
		m.now = now
	}
	if m.wake.IsZero() || m.now.Before(m.wake) {
		return nil // a full step would find every key where it is
	}
	return m.step()
}

// wakeAt makes a Tick at or after t take a full step.
func (m *Machine) wakeAt(t time.Time) {
	if m.wake.IsZero() || t.Before(m.wake) {
		m.wake = t
	}
}

// LeaseRenewed records that the lease is alive until the given time.
func (m *Machine) LeaseRenewed(until time.Time) []Action {
	if until.After(m.leaseUntil) {
		m.leaseUntil = until
	}
	return m.step()
}

// Acquired reports that our record for key was created at revision epoch.
func (m *Machine) Acquired(key string, epoch int64) []Action {
	k := m.info(key)
	if k.state == Acquiring {
		if k.lostWhileAcquiring {
			// The record may already be gone: release what we may have
			// and start over.
			k.lostWhileAcquiring = false
			m.setState(k, Draining)
			k.mustRelease = true
		} else {
			m.setState(k, Held)
			k.epoch, k.heldAt = epoch, m.now
		}
	}
	return m.stepKey(key)
}

// AcquireRefused reports that another shard's record exists (or the Txn
// failed); the key waits for that record to go or for the retry time.
func (m *Machine) AcquireRefused(key string) []Action {
	k := m.info(key)
	if k.state == Acquiring {
		m.setState(k, Waiting)
		k.retryAt = m.now.Add(m.cfg.RetryAfter)
		if k.lostWhileAcquiring {
			k.lostWhileAcquiring = false
			k.retryAt = m.now
		}
	}
	return m.stepKey(key)
}

// Released reports that our record was deleted by our release (or was
// already gone).
func (m *Machine) Released(key string) []Action {
	k := m.info(key)
	if k.state == Releasing {
		m.setState(k, Absent)
		k.epoch, k.mustRelease = 0, false
	}
	return m.stepKey(key)
}

// ReleaseFailed reports that the delete Txn failed (or its outcome is
// unknown). The key stays releasing and the release is issued again: it
// must never become usable again without a fresh acquire.
func (m *Machine) ReleaseFailed(key string) []Action {
	acts := m.stepKey(key)
	if k, ok := m.keys[key]; ok && k.state == Releasing {
		acts = append(acts, Action{Release, key})
		sortActions(acts)
	}
	return acts
}

// Lost reports that our record for key vanished without our release (lease
// expiry, an operator's delete): stop using the key at once.
func (m *Machine) Lost(key string) []Action {
	k := m.info(key)
	switch k.state {
	case Held, Draining:
		m.setState(k, Absent)
		k.epoch, k.mustRelease = 0, false
	case Acquiring:
		k.lostWhileAcquiring = true
	case Releasing:
		// The release in flight reports the end; acquiring before it
		// returns could let that release delete the new record.
	}
	return m.stepKey(key)
}

// RecordDeleted reports that someone's record for key was deleted: a
// waiting key is tried again now.
func (m *Machine) RecordDeleted(key string) []Action {
	if k, ok := m.keys[key]; ok && (k.state == Waiting || k.state == Acquiring) {
		// (A deletion seen while acquiring makes a refusal retry at once.)
		k.retryAt = m.now
	}
	return m.stepKey(key)
}

// Use starts one use of key (a bind onto a partition, an admission for a
// queue) if the key is held and the lease fresh; the caller must call Done.
func (m *Machine) Use(key string) (epoch int64, ok bool) {
	k, found := m.keys[key]
	if !found || k.state != Held || !m.leaseFresh() {
		return 0, false
	}
	k.inflight++
	return k.epoch, true
}

// Done ends one use of key; a draining key is released when its last use ends.
func (m *Machine) Done(key string) []Action {
	k, ok := m.keys[key]
	if !ok {
		return nil
	}
	if k.inflight > 0 {
		k.inflight--
	}
	// Only this key can change (the last use of a draining key ends):
	// a bind stays O(1) (a full step was 37 % of a burst's CPU).
	return m.stepKey(key)
}

// Holds reports whether key is usable now.
func (m *Machine) Holds(key string) bool {
	k, ok := m.keys[key]
	return ok && k.state == Held && m.leaseFresh()
}

// Epoch returns the create revision of our record for key (the epoch Use
// returns) if the key is usable now, as Holds reports; it starts no use.
// Like every method of Machine it is for the machine's one owner (Shard
// calls it under Shard.mu).
func (m *Machine) Epoch(key string) (int64, bool) {
	k, ok := m.keys[key]
	if !ok || k.state != Held || !m.leaseFresh() {
		return 0, false
	}
	return k.epoch, true
}

// LeaseFresh reports whether keys may be used now: the lease is known
// alive beyond the margin. For the machine's one owner, as Epoch.
func (m *Machine) LeaseFresh() bool { return m.leaseFresh() }

// UseDeadline is when a use begun now must have ended: half the lease
// margin before the lease is known alive until. Uses start only until a
// whole margin before it, so a use has at least half the margin; one that
// ran longer could act after the lease (and so the key's record) may be
// gone and another shard holds the key.
func (m *Machine) UseDeadline() time.Time { return m.leaseUntil.Add(-m.cfg.LeaseMargin / 2) }

// State returns the state of key and its in-flight uses.
func (m *Machine) State(key string) (KeyState, int) {
	k, ok := m.keys[key]
	if !ok {
		return Absent, 0
	}
	return k.state, k.inflight
}

// Held returns the usable keys, sorted.
func (m *Machine) Held() []string { return m.HeldFor(0) }

// HeldFor returns the keys usable now that have been held for at least d
// (by the machine's clock), sorted: a key just taken over from another
// shard can wait until what the previous holder did with it is seen.
func (m *Machine) HeldFor(d time.Duration) []string {
	if !m.leaseFresh() {
		return nil
	}
	c := &m.heldMemo
	if !c.valid || c.gen != m.heldGen || c.d != d || (!c.until.IsZero() && !m.now.Before(c.until)) {
		*c = heldMemo{valid: true, gen: m.heldGen, d: d, keys: c.keys[:0]}
		for key, k := range m.keys {
			if k.state != Held {
				continue
			}
			if age := m.now.Sub(k.heldAt); age >= d {
				c.keys = append(c.keys, key)
			} else if at := k.heldAt.Add(d); c.until.IsZero() || at.Before(c.until) {
				c.until = at
			}
		}
		sort.Strings(c.keys)
	}
	if len(c.keys) == 0 {
		return nil
	}
	return slices.Clone(c.keys)
}

// Records returns the keys whose record may exist in etcd as ours (held,
// draining, releasing, or being acquired), sorted.
func (m *Machine) Records() []string {
	var out []string
	for key, k := range m.keys {
		switch k.state {
		case Held, Draining, Releasing, Acquiring:
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

// step applies the rules to every key and returns the actions, sorted by
// key so the output is deterministic.
func (m *Machine) step() []Action {
	var acts []Action
	fresh := m.leaseFresh()
	expired := m.leaseExpired()
	// What the clock can change next, worked out again from every key
	// (settle adds the retries) and the lease: possibly expired from
	// leaseUntil, which moves held keys. The lease going stale a margin
	// before moves none (it only stops acquires and a draining key's
	// return, which a fresh lease, a full step, brings back).
	m.wake = time.Time{}
	if !expired {
		m.wakeAt(m.leaseUntil)
	}
	for key := range m.desired {
		if _, ok := m.keys[key]; !ok {
			m.keys[key] = &keyInfo{}
		}
	}
	for key, k := range m.keys {
		acts = m.settle(acts, key, k, fresh, expired)
	}
	for key := range m.keys {
		m.gc(key)
	}
	sortActions(acts)
	return acts
}

// stepKey is step for an event that changed only key: every other key was
// settled by the step of the event before, and nothing they depend on (the
// clock, the lease, the desired set) changed. It keeps the events of one
// key O(1) instead of O(keys) (acquiring 4,096 partitions was O(keys²)).
func (m *Machine) stepKey(key string) []Action {
	k, ok := m.keys[key]
	if !ok {
		if !m.desired[key] {
			return nil
		}
		k = &keyInfo{}
		m.keys[key] = k
	}
	acts := m.settle(nil, key, k, m.leaseFresh(), m.leaseExpired())
	m.gc(key)
	return acts
}

// settle moves one key as far as the clock, the lease and the desired set
// allow, appending the actions that follow.
func (m *Machine) settle(acts []Action, key string, k *keyInfo, fresh, expired bool) []Action {
	want := m.desired[key]
	switch k.state {
	case Absent:
		if want && fresh && !m.now.Before(k.retryAt) {
			m.setState(k, Acquiring)
			acts = append(acts, Action{Acquire, key})
		}
	case Waiting:
		if !want {
			m.setState(k, Absent)
		} else if fresh && !m.now.Before(k.retryAt) {
			m.setState(k, Acquiring)
			acts = append(acts, Action{Acquire, key})
		}
	case Held:
		if expired {
			// Our record may be gone with the lease: never use it
			// again without releasing and re-acquiring.
			m.setState(k, Draining)
			k.mustRelease = true
		} else if !want {
			m.setState(k, Draining)
		}
	case Draining:
		if want && fresh && !k.mustRelease {
			// Wanted again before the release started: keep it.
			m.setState(k, Held)
		}
	}
	if k.state == Draining && k.inflight == 0 {
		m.setState(k, Releasing)
		acts = append(acts, Action{Release, key})
	}
	if (k.state == Absent || k.state == Waiting) && want && m.now.Before(k.retryAt) {
		// Left waiting for its retry time: the clock moves it then
		// (wanted and retry due, only a stale lease holds it back, and
		// the lease changes only by LeaseRenewed, a full step).
		m.wakeAt(k.retryAt)
	}
	return acts
}

func sortActions(acts []Action) {
	sort.Slice(acts, func(i, j int) bool {
		if acts[i].Key != acts[j].Key {
			return acts[i].Key < acts[j].Key
		}
		return acts[i].Kind < acts[j].Kind
	})
}

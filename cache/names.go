package cache

import "hash/maphash"

// nameIndex finds the live task known under a namespace/name, so that a
// task re-created under the name of one whose deletion was not seen yet
// replaces it (names are unique among live objects). It keys the entries
// by a 64-bit hash of the name: a map slot is one word of key and one of
// value, against two string headers of key and one of value for a map
// keyed by the name (48 bytes a slot), and the index holds a slot for
// every task of the cluster in every shard. A task whose name hashes like
// another live task's goes to collided, keyed by the name itself; every
// lookup checks the name, so a collision costs a second lookup, never a
// wrong answer.
type nameIndex struct {
	seed     maphash.Seed
	byHash   map[uint64]*taskEntry
	collided map[objKey]*taskEntry
	// hash is nil except in tests, which force collisions with it.
	hash func(namespace, name string) uint64
}

func newNameIndex() nameIndex {
	return nameIndex{seed: maphash.MakeSeed(), byHash: map[uint64]*taskEntry{}, collided: map[objKey]*taskEntry{}}
}

func (x *nameIndex) sum(namespace, name string) uint64 {
	if x.hash != nil {
		return x.hash(namespace, name)
	}
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.WriteString(namespace)
	h.WriteByte(0) // no name has a NUL: "a"+"b/c" and "a/b"+"c" differ
	h.WriteString(name)
	return h.Sum64()
}

func named(e *taskEntry, namespace, name string) bool {
	return e.name() == name && e.namespace() == namespace
}

// get returns the entry indexed under namespace/name, or nil.
func (x *nameIndex) get(namespace, name string) *taskEntry {
	if e := x.byHash[x.sum(namespace, name)]; e != nil && named(e, namespace, name) {
		return e
	}
	return x.collided[objKey{namespace, name}]
}

// put indexes e under its stored task's name, replacing any entry indexed
// under that name.
func (x *nameIndex) put(e *taskEntry) {
	ns, name := e.namespace(), e.name()
	h := x.sum(ns, name)
	if cur := x.byHash[h]; cur != nil && cur != e && !named(cur, ns, name) {
		x.collided[objKey{ns, name}] = e
		return
	}
	x.byHash[h] = e
	if len(x.collided) > 0 {
		delete(x.collided, objKey{ns, name})
	}
}

// remove drops e from under its stored task's name, if it is indexed there.
func (x *nameIndex) remove(e *taskEntry) {
	ns, name := e.namespace(), e.name()
	h := x.sum(ns, name)
	if x.byHash[h] == e {
		delete(x.byHash, h)
	}
	if len(x.collided) > 0 && x.collided[objKey{ns, name}] == e {
		delete(x.collided, objKey{ns, name})
	}
}

// len is the number of entries indexed.
func (x *nameIndex) len() int { return len(x.byHash) + len(x.collided) }

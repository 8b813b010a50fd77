package cache

import "github.com/shardsched/shardsched/api"

// Jobs: the PodGroup events.

// AddOrUpdateJob records a job (a deep copy), keyed by UID; a job with an
// empty UID is ignored. If its namespace/name is held by another UID (the
// PodGroup was deleted and re-created), the older job is forgotten, and the
// tasks its predecessor left releasing or finished stop being members of
// the name (see "Job identity" in the package doc). Called concurrently by
// informer handlers.
func (c *Cache) AddOrUpdateJob(j api.Job) {
	if j.UID == "" {
		return
	}
	c.lock()
	defer c.unlock()
	key := objKey{j.Namespace, j.Name}
	gen := c.next()
	if other, ok := c.jobNames[key]; ok && other != j.UID {
		delete(c.jobs, other)
		c.logJob(gen, other)
	}
	moved := false // the same UID under another name: not possible in Kubernetes, handled anyway
	var oldKey objKey
	if old := c.jobs[j.UID]; old != nil {
		if oldKey = (objKey{old.Namespace, old.Name}); oldKey != key && c.jobNames[oldKey] == j.UID {
			delete(c.jobNames, oldKey)
			moved = true
		}
	}
	cp := cloneJob(j)
	c.jobs[j.UID] = &cp
	c.jobNames[key] = j.UID
	c.jobsGen = gen
	c.logJob(gen, j.UID)
	c.setCutoff(key)
	if moved {
		c.setCutoff(oldKey)
	}
}

// DeleteJob forgets the job with this UID; a job re-created under the same
// name has another UID and stays (F4). Called concurrently.
func (c *Cache) DeleteJob(uid string) {
	c.lock()
	defer c.unlock()
	j := c.jobs[uid]
	if j == nil {
		return
	}
	key := objKey{j.Namespace, j.Name}
	if c.jobNames[key] == uid {
		delete(c.jobNames, key)
	}
	delete(c.jobs, uid)
	c.jobsGen = c.next()
	c.logJob(c.jobsGen, uid)
	c.setCutoff(key)
}

// logJob records that the job of uid changed at gen. The log keeps at most
// about twice as many entries as there are jobs (and at least 1,024): past
// that its older half goes, and a snapshot older than what is left lists
// every job again. Called with mu held exclusively.
func (c *Cache) logJob(gen int64, uid string) {
	c.jobLog.add(gen, uid, max(2*len(c.jobs), 1024))
}

package cache

// The generation list: the books of the owned nodes, most recently changed
// first, so that UpdateSnapshot walks only the books changed since a
// snapshot's generation (see "Generations" in doc.go).

func (c *Cache) pushFront(be *bookEntry) {
	be.prev, be.next = nil, c.head
	if c.head != nil {
		c.head.prev = be
	}
	c.head = be
}

func (c *Cache) unlink(be *bookEntry) {
	if be.prev != nil {
		be.prev.next = be.next
	} else if c.head == be {
		c.head = be.next
	}
	if be.next != nil {
		be.next.prev = be.prev
	}
	be.prev, be.next = nil, nil
}

func (c *Cache) moveToFront(be *bookEntry) {
	if c.head == be {
		return
	}
	c.unlink(be)
	c.pushFront(be)
}

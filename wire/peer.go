package wire

// Meta is what a shard gossips about itself (memberlist node metadata).
type Meta struct {
	ID       string   `json:"id"`
	API      string   `json:"api,omitempty"`
	Capacity Capacity `json:"cap"`
}

// Capacity summarizes the free resources of the nodes a shard owns, so a
// job that does not fit on one shard can be handed to one with room; and
// what those nodes hold when empty (allocatable), so a gang that fits no
// shard now can be handed to one that can hold nodes until it fits.
type Capacity struct {
	FreeMilliCPU   int64 `json:"c,omitempty"`
	FreeMemory     int64 `json:"m,omitempty"`
	LargestCPU     int64 `json:"lc,omitempty"` // free milli-CPU of the emptiest node
	LargestMemory  int64 `json:"lm,omitempty"`
	Nodes          int   `json:"n,omitempty"`
	FreeGPU        int64 `json:"g,omitempty"`
	LargestFreeGPU int64 `json:"lg,omitempty"`

	AllocMilliCPU   int64 `json:"ac,omitempty"` // the same nodes' allocatable, summed
	AllocMemory     int64 `json:"am,omitempty"`
	AllocGPU        int64 `json:"ag,omitempty"`
	LargestAllocCPU int64 `json:"xc,omitempty"` // the largest allocatable of one node
	LargestAllocMem int64 `json:"xm,omitempty"`
	LargestAllocGPU int64 `json:"xg,omitempty"`
}

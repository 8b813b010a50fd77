package wire

// Meta is what a shard gossips about itself (memberlist node metadata).
type Meta struct {
	ID       string   `json:"id"`
	API      string   `json:"api,omitempty"`
	Capacity Capacity `json:"cap"`
}

// Capacity summarizes the free resources of the nodes a shard owns, so a
// job that does not fit on one shard can be handed to one with room.
type Capacity struct {
	FreeMilliCPU   int64 `json:"c,omitempty"`
	FreeMemory     int64 `json:"m,omitempty"`
	LargestCPU     int64 `json:"lc,omitempty"` // free milli-CPU of the emptiest node
	LargestMemory  int64 `json:"lm,omitempty"`
	Nodes          int   `json:"n,omitempty"`
	FreeGPU        int64 `json:"g,omitempty"`
	LargestFreeGPU int64 `json:"lg,omitempty"`
}

package ctl

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/kube"
)

// QueueRow is one queue of the tree as the plugin shows it. Amounts are
// Kubernetes quantities ("4", "500m", "8Gi"); an absent capability
// dimension is unlimited.
type QueueRow struct {
	Name   string `json:"name"`
	Parent string `json:"parent,omitempty"`
	// Depth is 0 for the root, 1 for its children, and so on.
	Depth      int               `json:"depth"`
	State      string            `json:"state"`
	Capability map[string]string `json:"capability,omitempty"`
	Deserved   map[string]string `json:"deserved,omitempty"`
	Guarantee  map[string]string `json:"guarantee,omitempty"`
	// Allocated, Pending, Inqueue and Running are the Queue's status, as
	// its owning shard last wrote it (a parent's rolls up its subtree).
	Allocated map[string]string `json:"allocated,omitempty"`
	Pending   int32             `json:"pending"`
	Inqueue   int32             `json:"inqueue"`
	Running   int32             `json:"running"`
	// LeftOut says why the scheduler leaves the queue (and its subtree)
	// out of the tree: a cycle, an unknown parent, an invalid quantity.
	// Its jobs are not scheduled until it is fixed.
	LeftOut string `json:"leftOut,omitempty"`

	cpuUsed, cpuCap int64
	capped          bool
}

// QueueTree lays out queues as the scheduler sees them: the valid tree
// depth first from the root (children by name), then the queues it leaves
// out, each with the reason. root and default are shown even when no object
// declares them, as the scheduler assumes them.
func QueueTree(queues []schedv1beta1.Queue) []QueueRow {
	byName := map[string]*schedv1beta1.Queue{}
	var specs []api.QueueSpec
	left := map[string]error{}
	for i := range queues {
		q := &queues[i]
		byName[q.Name] = q
		spec, err := kube.QueueSpecFromVolcano(q)
		if err != nil {
			left[q.Name] = err
			continue
		}
		specs = append(specs, spec)
	}
	tree, invalid := api.BuildTreeExcluding(specs, left)
	var rows []QueueRow
	var walk func(name string, depth int)
	walk = func(name string, depth int) {
		spec, _ := tree.Get(name)
		rows = append(rows, queueRow(spec.Name, spec.Parent, depth, &spec, byName[name], ""))
		for _, c := range tree.Children(name) {
			walk(c, depth+1)
		}
	}
	walk(api.RootQueue, 0)
	names := make([]string, 0, len(invalid))
	for n := range invalid {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		q := byName[n]
		parent := ""
		if q != nil {
			parent = q.Spec.Parent
		}
		rows = append(rows, queueRow(n, parent, 0, nil, q, invalid[n].Error()))
	}
	return rows
}

func queueRow(name, parent string, depth int, spec *api.QueueSpec, obj *schedv1beta1.Queue, leftOut string) QueueRow {
	r := QueueRow{Name: name, Parent: parent, Depth: depth, State: "Open", LeftOut: leftOut}
	if name == api.RootQueue {
		r.Parent = ""
	}
	if spec != nil {
		r.Capability = quantities(spec.Capability.Map())
		r.Deserved = quantities(resourceMap(spec.Deserved))
		r.Guarantee = quantities(resourceMap(spec.Guarantee))
		r.cpuCap, r.capped = spec.Capability.Get(api.CPU)
		if spec.Closed {
			r.State = "Closed"
		}
	}
	if obj != nil {
		if obj.Status.State != "" {
			r.State = string(obj.Status.State)
		}
		r.Pending, r.Inqueue, r.Running = obj.Status.Pending, obj.Status.Inqueue, obj.Status.Running
		if alloc, err := kube.ResourceFromList(obj.Status.Allocated); err == nil {
			r.Allocated = quantities(resourceMap(alloc))
			r.cpuUsed = alloc.Get(api.CPU)
		}
	}
	return r
}

func resourceMap(r api.Resource) map[string]int64 {
	out := map[string]int64{}
	for _, d := range r.Dims() {
		if v := r.Get(d); v != 0 {
			out[d] = v
		}
	}
	return out
}

func quantities(m map[string]int64) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for d, v := range m {
		out[d] = api.FormatQuantity(d, v)
	}
	return out
}

// bar draws used against capacity in width cells; an unlimited capacity
// draws nothing.
func bar(used, capacity int64, capped bool, width int) string {
	if !capped {
		return "[" + strings.Repeat(" ", width) + "]"
	}
	full := width
	if capacity > 0 {
		full = int(min(used, capacity) * int64(width) / capacity)
	}
	if used > 0 && full == 0 {
		full = 1
	}
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}

// dims renders a quantity map as "cpu 4, memory 8Gi" (cpu and memory
// first, then the rest by name); "-" when empty.
func dims(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := sortedDims(m)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+m[k])
	}
	return strings.Join(parts, ", ")
}

func dimOrder(d string) string {
	switch d {
	case api.CPU:
		return "0"
	case api.Memory:
		return "1"
	case api.Pods:
		return "2"
	}
	return "3" + d
}

// WriteQueues prints the rows as a table, the tree indented, with a bar of
// CPU allocated against capability.
func WriteQueues(w io.Writer, rows []QueueRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSTATE\tCPU ALLOCATED/CAPABILITY\tALLOCATED\tCAPABILITY\tDESERVED\tGUARANTEE\tPENDING\tINQUEUE\tRUNNING\tNOTE")
	for _, r := range rows {
		name := strings.Repeat("  ", r.Depth) + r.Name
		if r.LeftOut != "" {
			fmt.Fprintf(tw, "%s\tLEFT OUT\t-\t-\t-\t-\t-\t-\t-\t-\tnot scheduled: %s\n", r.Name, r.LeftOut)
			continue
		}
		cpu := r.Capability[api.CPU]
		if cpu == "" {
			cpu = "∞"
		}
		used := "0"
		if v, ok := r.Allocated[api.CPU]; ok {
			used = v
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s/%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t\n", name, r.State,
			bar(r.cpuUsed, r.cpuCap, r.capped, 10), used, cpu,
			dims(r.Allocated), dims(r.Capability), dims(r.Deserved), dims(r.Guarantee), r.Pending, r.Inqueue, r.Running)
	}
	return tw.Flush()
}

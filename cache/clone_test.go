package cache

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/shardsched/shardsched/api"
)

// mapID identifies a map's storage, to tell a shared map from an equal one.
func mapID(m map[string]int64) uintptr { return uintptr(reflect.ValueOf(m).UnsafePointer()) }

// The cache keeps one scalars map per distinct request of one or two
// scalars, shared by the tasks that ask for it, yet every task's request
// reads as it was given and is independent of the caller's map.
func TestStoredTasksShareScalars(t *testing.T) {
	c := New(Options{})
	gpu := func(name string, n int64) api.Task {
		tk := mkTask("ns", name, "j", 1000, 1)
		tk.Request.Scalars["nvidia.com/gpu"] = n
		return tk
	}
	given := []api.Task{mkTask("ns", "a", "j", 1000, 1), mkTask("ns", "b", "j", 2000, 2), gpu("g1", 1), gpu("g2", 1), gpu("g8", 8)}
	for _, tk := range given {
		c.AddOrUpdateTask(tk)
	}
	stored := func(name string) api.Resource {
		t.Helper()
		e := c.taskNames.get("ns", name)
		if e == nil {
			t.Fatalf("task %s not in the cache", name)
		}
		return e.shared().Request
	}
	for _, tk := range given {
		if got := stored(tk.Name); !got.Equal(tk.Request) {
			t.Errorf("%s: stored request %v, given %v", tk.Name, got, tk.Request)
		}
	}
	if mapID(stored("a").Scalars) != mapID(stored("b").Scalars) || mapID(stored("g1").Scalars) != mapID(stored("g2").Scalars) {
		t.Error("tasks asking for the same scalars do not share one map")
	}
	if mapID(stored("a").Scalars) == mapID(stored("g1").Scalars) || mapID(stored("g1").Scalars) == mapID(stored("g8").Scalars) {
		t.Error("tasks asking for different scalars share a map")
	}
	// The caller's map is not the cache's.
	given[0].Request.Scalars[api.Pods] = 99
	if got := stored("a").Scalars[api.Pods]; got != 1 {
		t.Errorf("caller's change reached the cache: pods = %d", got)
	}
	// A request of more than two scalars, or beyond the table's bound,
	// gets a map of its own with the same content.
	three := mkTask("ns", "three", "j", 1000, 1)
	three.Request.Scalars["x/a"], three.Request.Scalars["x/b"] = 1, 2
	c.AddOrUpdateTask(three)
	if got := stored("three"); !got.Equal(three.Request) || mapID(got.Scalars) == mapID(three.Request.Scalars) {
		t.Errorf("three scalars: stored %v (own map: %v), given %v", got, mapID(got.Scalars) != mapID(three.Request.Scalars), three.Request)
	}
	for i := range maxInterned + 10 {
		c.AddOrUpdateTask(gpu(fmt.Sprintf("many-%d", i), int64(i+100)))
	}
	if n := len(c.scalars); n != maxInterned {
		t.Errorf("%d interned maps, want the bound %d", n, maxInterned)
	}
	last := fmt.Sprintf("many-%d", maxInterned+9)
	if got := stored(last).Scalars["nvidia.com/gpu"]; got != int64(maxInterned+109) {
		t.Errorf("%s beyond the bound: gpu = %d", last, got)
	}
	mustVerify(t, c)
}

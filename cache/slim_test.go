package cache

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	"github.com/shardsched/shardsched/api"
)

// constrained is a task with every kind of field set, so that a record
// put together again can be compared with what was given, field by field.
func constrained(name string) api.Task {
	t := mkTask("ns", name, "j", 500, 1)
	t.Queue, t.TaskSpec, t.Priority, t.SchedulerName, t.Protected = "q", "worker", 7, "shardsched", true
	t.Request = api.NewResource(500, gi, map[string]int64{api.Pods: 1, "nvidia.com/gpu": 2})
	t.NodeSelector = map[string]string{"zone": "a"}
	t.Tolerations = []api.Toleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}}
	t.Affinity = []api.SelectorTerm{{MatchExpressions: []api.SelectorRequirement{{Key: "arch", Operator: api.SelectorIn, Values: []string{"amd64"}}}}}
	t.Created = at(3)
	return t
}

// A placed or finished task is kept slim, its job's shared fields once for
// all its tasks, and every reader still gets back exactly the task given.
func TestPlacedTasksAreKeptSlim(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 64, 256, 110))
	var given []api.Task
	for i := range 3 {
		tk := constrained(fmt.Sprintf("w-%d", i))
		c.AddOrUpdateTask(tk)
		given = append(given, tk)
	}
	if e := c.tasks["ns/w-0-uid"]; e.slim != nil {
		t.Fatal("a pending task is kept slim: cycles place it from its full record")
	}
	given[0] = on(given[0], "n1", api.TaskRunning)
	given[1] = on(given[1], "n2", api.TaskBound) // a node this cache does not know
	given[2].Phase = api.TaskFailed              // finished without a node
	for _, tk := range given {
		c.AddOrUpdateTask(tk)
	}
	mustVerify(t, c)
	for _, tk := range given {
		e := c.tasks[tk.UID]
		if e.slim == nil || e.obj != nil || e.full != nil {
			t.Errorf("%s (%s on %q) is kept in full", tk.Name, tk.Phase, tk.NodeName)
		}
		got, ok := c.Task(tk.UID)
		if !ok || !reflect.DeepEqual(got, tk) {
			t.Errorf("%s: read back %+v, given %+v", tk.Name, got, tk)
		}
	}
	if l := c.shapes[objKey{"ns", "j"}]; len(l) != 3 {
		t.Fatalf("3 tasks alike but in 3 phases: %d shapes, want 3", len(l))
	}
	jt := c.JobTasks("ns", "j")
	if len(jt) != 3 || !reflect.DeepEqual(jt[0], given[0]) || !reflect.DeepEqual(jt[2], given[2]) {
		t.Fatalf("JobTasks: %+v", jt)
	}
	sum := c.JobSummary("ns", "j")
	if sum.Bound != 2 || sum.Done != 1 || sum.Failed != 1 || sum.Allocated.MilliCPU != 1000 || sum.Allocated.Scalars["nvidia.com/gpu"] != 4 || sum.Priority != 7 {
		t.Fatalf("summary %+v", sum)
	}
	if b := booksOf(t, c, "n1"); b.Used.MilliCPU != 500 || b.Tasks != 1 {
		t.Fatalf("books of n1: %+v", b)
	}

	// A slim task's job with pending work: the snapshot counts and lists it.
	c.AddOrUpdateTask(constrained("w-3"))
	var s Snapshot
	c.UpdateSnapshot(&s)
	if bs := s.BoundBySpec("ns", "j"); bs["worker"] != 2 {
		t.Fatalf("bound by spec %v", bs)
	}
	if !s.AnyProtected("ns", "j") {
		t.Fatal("protected members not seen")
	}
	if p := s.PendingOfJob("ns", "j"); len(p) != 1 || p[0].Name != "w-3" {
		t.Fatalf("pending of job: %v", p)
	}
	if tj := s.TasksOfJob("ns", "j"); len(tj) != 4 || !reflect.DeepEqual(*tj[1], given[1]) {
		t.Fatalf("tasks of job: %v", tj)
	}

	for _, tk := range given {
		c.DeleteTask(tk.UID)
	}
	mustVerify(t, c)
	if len(c.shapes) != 0 {
		t.Fatalf("shapes kept after their tasks went: %v", c.shapes)
	}
}

// A job whose tasks come in more shapes than maxShapes keeps the rest in
// full, and reads them the same.
func TestSlimShapesAreBounded(t *testing.T) {
	c := New(Options{})
	n := maxShapes + 3
	for i := range n {
		tk := on(mkTask("ns", fmt.Sprintf("t-%d", i), "j", int64(100*(i+1)), 1), "n1", api.TaskRunning)
		c.AddOrUpdateTask(tk)
	}
	mustVerify(t, c)
	slim := 0
	for i := range n {
		uid := fmt.Sprintf("ns/t-%d-uid", i)
		if c.tasks[uid].slim != nil {
			slim++
		}
		if got, _ := c.Task(uid); got.Request.MilliCPU != int64(100*(i+1)) || got.NodeName != "n1" {
			t.Errorf("t-%d read back %+v", i, got)
		}
	}
	if slim != maxShapes || len(c.shapes[objKey{"ns", "j"}]) != maxShapes {
		t.Fatalf("%d slim records, %d shapes; want %d", slim, len(c.shapes[objKey{"ns", "j"}]), maxShapes)
	}
}

// sameShape compares every field of api.Task but the per-task ones: a
// field added to api.Task that sameShape does not compare would let two
// tasks differing in it share a shape, and one of them would read back
// wrong. Each field is changed alone, in turn.
func TestSameShapeComparesEveryField(t *testing.T) {
	perTask := map[string]bool{"Name": true, "UID": true, "NodeName": true, "Created": true}
	base := constrained("a")
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		other := constrained("a")
		v := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Name {
		case "Request":
			other.Request = api.NewResource(501, gi, map[string]int64{api.Pods: 1, "nvidia.com/gpu": 2})
		case "NodeSelector":
			other.NodeSelector = map[string]string{"zone": "b"}
		case "Tolerations":
			other.Tolerations = nil
		case "Affinity":
			other.Affinity = []api.SelectorTerm{{}}
		case "Created":
			other.Created = at(9)
		default:
			switch v.Kind() {
			case reflect.String:
				v.SetString(v.String() + "x")
			case reflect.Bool:
				v.SetBool(!v.Bool())
			case reflect.Int32:
				v.SetInt(v.Int() + 1)
			default:
				t.Fatalf("field %s of kind %s: teach this test to change it", f.Name, v.Kind())
			}
		}
		if reflect.DeepEqual(base, other) {
			t.Fatalf("field %s: the test did not change it", f.Name)
		}
		if got := sameShape(&base, &other); got != perTask[f.Name] {
			t.Errorf("field %s changed: sameShape %v, want %v", f.Name, got, perTask[f.Name])
		}
	}
}

// Tasks of a job alike and in one phase share one shape; a change of
// phase moves a task to the shape of its new phase, and reads back right.
func TestSlimTasksShareAShapeByPhase(t *testing.T) {
	c := New(Options{})
	var given []api.Task
	for i := range 4 {
		tk := on(constrained(fmt.Sprintf("w-%d", i)), "n1", api.TaskRunning)
		c.AddOrUpdateTask(tk)
		given = append(given, tk)
	}
	if l := c.shapes[objKey{"ns", "j"}]; len(l) != 1 || l[0].refs != 4 {
		t.Fatalf("4 running tasks alike: %d shapes", len(l))
	}
	given[3].Phase = api.TaskSucceeded
	c.AddOrUpdateTask(given[3])
	mustVerify(t, c)
	if l := c.shapes[objKey{"ns", "j"}]; len(l) != 2 {
		t.Fatalf("after one task finished: %d shapes, want 2", len(l))
	}
	for _, tk := range given {
		if got, _ := c.Task(tk.UID); !reflect.DeepEqual(got, tk) {
			t.Errorf("%s: read back %+v, given %+v", tk.Name, got, tk)
		}
	}
}

// Every pod of the cluster has a task entry in every shard, and nearly
// every one a slim record: each is sized to a size class of Go's
// allocator (80 and 64 bytes), so that a field added to either costs a
// whole class (16 bytes a pod) only on purpose.
func TestRecordsKeepTheirSizeClasses(t *testing.T) {
	if got := unsafe.Sizeof(taskEntry{}); got > 80 {
		t.Errorf("taskEntry is %d bytes, over its 80-byte size class", got)
	}
	if got := unsafe.Sizeof(slimTask{}); got > 64 {
		t.Errorf("slimTask is %d bytes, over its 64-byte size class", got)
	}
}

package daemon

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/testenv"
)

// holdFinalizer keeps a deleted pod terminating (kwok deletes pods at once)
// until the test removes it.
const holdFinalizer = "shardsched.io/test-hold"

// Issue case 8: a PodGroup deleted and re-created under the same name. The
// old gang's three pods are still terminating when the new PodGroup (same
// name, minMember 3) arrives with two of its three pods: the dying pods
// must not count as its members, so the new gang is not placed until its
// third pod exists, then all three bind together.
func TestRecreatedPodGroupDoesNotAdoptTerminatingPods(t *testing.T) {
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("id-node", 2, "8", "32Gi")

	// The first PodGroup and its gang, each pod held by a finalizer.
	ev.podGroup("pg", "default", 3)
	old := []string{"old-0", "old-1", "old-2"}
	for _, name := range old {
		ev.heldPod(name, "pg")
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.boundNamed(old) == 3 }, "the old gang is bound")
	oldPG, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "pg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Delete it all with a long grace period: the pods stay terminating.
	grace := int64(3600)
	for _, name := range old {
		if err := ev.cs.CoreV1().Pods(ev.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Delete(ctx, "pg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var oldUIDs []string
	var lastCreated time.Time
	for _, name := range old {
		p, err := ev.cs.CoreV1().Pods(ev.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oldUIDs = append(oldUIDs, string(p.UID))
		if p.CreationTimestamp.After(lastCreated) {
			lastCreated = p.CreationTimestamp.Time
		}
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		for _, uid := range oldUIDs {
			if tk, ok := ev.d.Cache.Task(uid); !ok || tk.Phase != api.TaskReleasing {
				return false
			}
		}
		_, known := ev.d.Cache.JobByName(ev.ns, "pg")
		return !known
	}, "the shard sees the old pods terminating and the old PodGroup gone")
	// Creation times have one-second resolution: the new PodGroup must be
	// created in a later second than the old pods for anyone to tell them
	// apart (see cache/doc.go, "Job identity").
	if wait := time.Until(lastCreated.Add(time.Second + 100*time.Millisecond)); wait > 0 {
		time.Sleep(wait)
	}

	// The new PodGroup under the same name, with two of its three pods.
	ev.podGroup("pg", "default", 3)
	newPG, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "pg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if newPG.UID == oldPG.UID || !newPG.CreationTimestamp.After(lastCreated) {
		t.Fatalf("precondition: new PodGroup %s created %v, old %s, old pods created %v",
			newPG.UID, newPG.CreationTimestamp, oldPG.UID, lastCreated)
	}
	fresh := []string{"new-0", "new-1", "new-2"}
	ev.pod("new-0", "pg", "1", "1Gi", nil)
	ev.pod("new-1", "pg", "1", "1Gi", nil)
	var newUIDs []string
	for _, name := range fresh[:2] {
		p, err := ev.cs.CoreV1().Pods(ev.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		newUIDs = append(newUIDs, string(p.UID))
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		for _, uid := range newUIDs {
			if _, ok := ev.d.Cache.Task(uid); !ok {
				return false
			}
		}
		j, ok := ev.d.Cache.JobByName(ev.ns, "pg")
		return ok && j.UID == string(newPG.UID)
	}, "the shard sees the new PodGroup and its two pods")
	// Two members of a gang of three: nothing may bind, whatever the three
	// terminating pods of the old PodGroup under the same name.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if n := ev.boundNamed(fresh[:2]); n != 0 {
			sum := ev.d.Cache.JobSummary(ev.ns, "pg")
			t.Fatalf("%d of the new gang's 2 pods bound with only 2 of its minMember 3; the cache counts it as %+v (the old pods were taken as members)", n, sum)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if sum := ev.d.Cache.JobSummary(ev.ns, "pg"); sum.Bound != 0 || sum.Pending != 2 || sum.Done != 0 {
		t.Fatalf("new PodGroup's summary %+v, want 2 pending and nothing bound or done", sum)
	}

	// The third pod: the gang is whole and binds, while the old pods are
	// still terminating on the nodes.
	ev.pod("new-2", "pg", "1", "1Gi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.boundNamed(fresh) == 3 }, "the new gang of 3 is bound")
	for _, uid := range oldUIDs {
		if tk, ok := ev.d.Cache.Task(uid); !ok || tk.Phase != api.TaskReleasing {
			t.Fatalf("old pod %s is no longer terminating (%+v): the test did not hold it", uid, tk)
		}
	}
	if sum := ev.d.Cache.JobSummary(ev.ns, "pg"); sum.Bound != 3 {
		t.Fatalf("new PodGroup's summary %+v after binding, want 3 bound", sum)
	}

	// Let the old pods go.
	for _, name := range old {
		ev.release(name)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		for _, name := range old {
			if _, err := ev.cs.CoreV1().Pods(ev.ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				return false
			}
		}
		return true
	}, "the old pods are gone")
}

// heldPod creates a 1-CPU pod of group carrying holdFinalizer; the test's
// cleanup removes the finalizer so the namespace can go.
func (ev *env) heldPod(name, group string) {
	ev.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ev.ns, Finalizers: []string{holdFinalizer},
			Annotations: map[string]string{"scheduling.k8s.io/group-name": group}},
		Spec: corev1.PodSpec{
			SchedulerName: schedName,
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		},
	}
	if _, err := ev.cs.CoreV1().Pods(ev.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		ev.t.Fatal(err)
	}
	ev.t.Cleanup(func() { ev.release(name) })
}

// release removes holdFinalizer from a pod (gone or without it: nothing).
func (ev *env) release(name string) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": nil}})
	_, err := ev.cs.CoreV1().Pods(ev.ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		ev.t.Logf("release %s: %v", name, err)
	}
}

func (ev *env) boundNamed(names []string) int {
	n := 0
	for _, name := range names {
		if ev.nodeOf(name) != "" {
			n++
		}
	}
	return n
}

package api

import "testing"

// A gang is sized once minMember of its tasks exist, or at once when it
// sets minResources; Sizable is the same rule as AdmitAmount's ok, which
// schedulers use to skip unsized jobs without building their pending list.
func TestSizableIsAdmitAmountsRule(t *testing.T) {
	task := &Task{Request: NewResource(1000, 1<<30, nil)}
	zero := Resource{}
	minRes := NewResource(500, 0, nil)
	for _, mr := range []*Resource{nil, &zero, &minRes} {
		for minMember := int32(0); minMember <= 4; minMember++ {
			for pending := 0; pending <= 4; pending++ {
				for bound := 0; bound <= 4; bound++ {
					j := &Job{MinMember: minMember, MinResources: mr}
					tasks := make([]*Task, pending)
					for i := range tasks {
						tasks[i] = task
					}
					use := NewResource(int64(bound)*1000, 0, map[string]int64{Pods: int64(bound)})
					_, ok := AdmitAmount(j, tasks, use)
					if got := Sizable(j, pending, bound); got != ok {
						t.Fatalf("minMember %d, minResources %v, %d pending, %d bound: Sizable %v, AdmitAmount ok %v", minMember, mr, pending, bound, got, ok)
					}
					want := mr == &minRes || pending+bound >= max(int(minMember), 1)
					if ok != want {
						t.Fatalf("minMember %d, minResources %v, %d pending, %d bound: sized %v, want %v", minMember, mr, pending, bound, ok, want)
					}
				}
			}
		}
	}
}

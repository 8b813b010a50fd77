package api

import (
	"math"
	"testing"
)

// IdleOf agrees with Idle, dimension by dimension, for any books
// whose subtraction does not overflow (where both give 0).
func TestIdleOfAgreesWithIdle(t *testing.T) {
	vals := []int64{0, 1, 7, 1000, 64000, -1, -1000, math.MaxInt64, math.MinInt64 + 1}
	for _, a := range vals {
		for _, u := range vals {
			b := NodeBooks{Node: Node{Allocatable: NewResource(a, 0, nil)}, Used: NewResource(u, 0, nil)}
			want := b.Idle().MilliCPU
			if got := b.IdleOf(CPU); got != want {
				t.Errorf("IdleOf(cpu) with %d allocatable, %d used = %d, Idle gives %d", a, u, got, want)
			}
		}
	}
}

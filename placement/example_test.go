package placement_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/placement"
)

func ExamplePlaceGang() {
	node := func(name string, cores int64) *api.NodeBooks {
		return &api.NodeBooks{Node: api.Node{Name: name,
			Allocatable: api.NewResource(cores*1000, 64<<30, map[string]int64{api.Pods: 110})}}
	}
	nodes := []*api.NodeBooks{node("a", 4), node("b", 4), node("c", 2)}
	worker := func(uid string) *api.Task {
		return &api.Task{UID: uid, Request: api.NewResource(3000, 1<<30, map[string]int64{api.Pods: 1})}
	}
	gang := []*api.Task{worker("w0"), worker("w1"), worker("w2")}

	cfg, err := placement.DefaultConfig(placement.StrategyBinPack)
	if err != nil {
		panic(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))

	res := placement.PlaceGang(cfg, gang, nodes, 3, rng)
	fmt.Println(res.OK, res.Placed, len(res.Assignments), res.Unplaced)
	fmt.Println(placement.Summarize(res.Reasons, len(nodes)))

	res = placement.PlaceGang(cfg, gang, nodes, 2, rng)
	fmt.Println(res.OK, res.Placed, len(res.Assignments), res.Unplaced)
	// Output:
	// false 2 0 [w2]
	// 0/3 nodes are available: 3 Insufficient cpu.
	// true 2 2 [w2]
}

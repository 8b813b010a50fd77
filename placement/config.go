package placement

import (
	"errors"
	"fmt"
)

// Placement strategies accepted by DefaultConfig.
const (
	// StrategyBinPack packs tasks onto the most allocated nodes; the
	// default for batch work.
	StrategyBinPack = "binpack"
	// StrategySpread spreads tasks onto the emptiest nodes.
	StrategySpread = "spread"
)

// Config is a placement pipeline: the filter chain, the scorers with their
// weights, and how many feasible nodes to look at per task. A Config is
// read only once built; one Config may serve many goroutines.
type Config struct {
	// Filters run in order; the first that does not return Success
	// rejects the node.
	Filters []Filter
	// Scorers rank feasible nodes; a node's score is the sum of
	// Weights[i] × Scorers[i].Score, each score clamped to 0..MaxScore.
	Scorers []Scorer
	// Weights has one weight per scorer; a missing weight counts as 1.
	Weights []int64
	// Sample is the most feasible nodes considered per task (0 = all).
	// With a sample, each scan of a call starts where the previous one
	// stopped (a call starts at the first node of its shuffled order).
	// When every step is built in, the tasks after a scan that ask what
	// its task asked (request and constraints) are placed among the nodes
	// it found while one of them can take them, so a gang packs within
	// its sample, and scan on only when none can.
	Sample int
}

// DefaultConfig returns the pipeline for a strategy, "binpack" or
// "spread": every filter of this package (out-of-sync and cordoned nodes,
// node selector, required affinity and taints first, resources last, so a
// node that can never take the task is reported as such rather than as
// short of resources), the strategy's scorer with weight 1 and
// SpareDevices with weight 2, and no sampling.
func DefaultConfig(strategy string) (Config, error) {
	var s Scorer
	switch strategy {
	case StrategyBinPack:
		s = BinPack{}
	case StrategySpread:
		s = Spread{}
	default:
		return Config{}, fmt.Errorf("placement: unknown strategy %q (want %q or %q)",
			strategy, StrategyBinPack, StrategySpread)
	}
	return Config{
		Filters: []Filter{
			OutOfSync{},
			NodeUnschedulable{},
			NodeSelector{},
			RequiredAffinity{},
			Taints{},
			Resources{},
		},
		Scorers: []Scorer{s, SpareDevices{}},
		Weights: []int64{1, 2},
	}, nil
}

// Validate reports what is wrong with a hand-built Config: nil steps,
// a Weights list whose length does not match Scorers, negative weights, a
// negative Sample. PlaceGang never fails on such a Config (it skips nil
// steps, counts a missing weight as 1 and a negative Sample as 0), but a
// constructor should reject it.
func (c Config) Validate() error {
	var errs []error
	for i, f := range c.Filters {
		if f == nil {
			errs = append(errs, fmt.Errorf("placement: Filters[%d] is nil", i))
		}
	}
	for i, s := range c.Scorers {
		if s == nil {
			errs = append(errs, fmt.Errorf("placement: Scorers[%d] is nil", i))
		}
	}
	if len(c.Weights) != 0 && len(c.Weights) != len(c.Scorers) {
		errs = append(errs, fmt.Errorf("placement: %d weights for %d scorers", len(c.Weights), len(c.Scorers)))
	}
	for i, w := range c.Weights {
		if w < 0 {
			errs = append(errs, fmt.Errorf("placement: Weights[%d] is negative (%d)", i, w))
		}
	}
	if c.Sample < 0 {
		errs = append(errs, fmt.Errorf("placement: Sample is negative (%d)", c.Sample))
	}
	return errors.Join(errs...)
}

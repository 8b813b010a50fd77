package ctl

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardsched/shardsched/internal/kube"
)

// SortShards orders shard records by name.
func SortShards(rs []kube.ShardRecord) {
	slices.SortFunc(rs, func(a, b kube.ShardRecord) int { return strings.Compare(a.Shard, b.Shard) })
}

// WriteShards prints one line per shard: whether its record is fresh,
// whether it leads the coordinator, what it holds, how fast it binds.
func WriteShards(w io.Writer, rs []kube.ShardRecord, now time.Time) error {
	if len(rs) == 0 {
		_, err := fmt.Fprintln(w, "no shard status records found (shards keep a Lease labelled "+kube.ShardLeaseLabel+" in their namespace: see --shards-namespace)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSTATUS\tLEADER\tPARTITIONS\tQUEUES\tNODES\tBINDS/S\tBINDS\tFAILED\tOWNERSHIP CHANGES\tSEES\tRENEWED\tVERSION")
	leaders := 0
	for _, r := range rs {
		state := "up"
		if r.Expired {
			state = "STALE"
		}
		leader := ""
		if r.CoordinatorLeader {
			leader = "yes"
			leaders++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%.1f\t%d\t%d\t%d\t%d shard(s)\t%s ago\t%s\n", r.Shard, state, leader,
			r.Partitions, r.PartitionsTotal, r.QueuesHeld, r.Nodes, r.BindsPerSecond, r.Binds, r.BindFailures, r.OwnershipChanges,
			len(r.Members), age(now, r.Renewed), r.Version)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if leaders != 1 {
		_, err := fmt.Fprintf(w, "\n%d shards say they lead the coordinator (one is expected; during an election there may briefly be none)\n", leaders)
		return err
	}
	return nil
}

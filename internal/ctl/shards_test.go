package ctl

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/internal/kube"
)

func TestWriteShardsFlagsStaleAndLeaderCount(t *testing.T) {
	rs := []kube.ShardRecord{
		{ShardStatus: kube.ShardStatus{Shard: "shard-1", Partitions: 100, PartitionsTotal: 256, Members: []string{"shard-0", "shard-1"}}, Renewed: t0.Add(-time.Minute), Expired: true},
		{ShardStatus: kube.ShardStatus{Shard: "shard-0", Partitions: 156, PartitionsTotal: 256, CoordinatorLeader: true}, Renewed: t0},
	}
	SortShards(rs)
	var buf bytes.Buffer
	if err := WriteShards(&buf, rs, t0); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("\n%s", out)
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[1], "shard-0") || !strings.Contains(lines[1], " up ") || !strings.Contains(lines[1], "yes") || !strings.Contains(lines[1], "156/256") {
		t.Errorf("shard-0 line: %q", lines[1])
	}
	if !strings.HasPrefix(lines[2], "shard-1") || !strings.Contains(lines[2], "STALE") || !strings.Contains(lines[2], "1m ago") {
		t.Errorf("shard-1 line: %q", lines[2])
	}
	if strings.Contains(out, "lead the coordinator") {
		t.Error("one leader reported as a problem")
	}
	rs[0].CoordinatorLeader = false
	buf.Reset()
	_ = WriteShards(&buf, rs, t0)
	if !strings.Contains(buf.String(), "0 shards say they lead the coordinator") {
		t.Errorf("no leader not reported:\n%s", buf.String())
	}
	buf.Reset()
	_ = WriteShards(&buf, nil, t0)
	if !strings.Contains(buf.String(), "no shard status records") {
		t.Errorf("empty: %q", buf.String())
	}
}

package wire

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// DefaultPartitions is the number of partitions P that node names hash into
// when nothing else is configured.
//
// With P = 4096 and the eight members "shard-0".."shard-7" every member owns
// between 488 and 528 partition keys, i.e. within -4.7%..+3.1% of the ideal
// P/8 = 512, inside the ±10% that TestPartitionBalanceDefault requires.
// (Measured for comparison: P = 1024 gives -10.2%..+10.2%, P = 2048 gives
// -3.1%..+2.3%, P = 8192 gives -3.2%..+2.4%.)
const DefaultPartitions = 4096

// Key kinds, as returned by ParseKey.
const (
	// KindPartition marks a node partition key made by PartitionKey.
	KindPartition byte = 'p'
	// KindQueue marks a queue key made by QueueKey.
	KindQueue byte = 'q'
)

// Partition returns the partition of node among partitions partitions:
// xxhash64(node) mod partitions. The result is always in [0, partitions);
// it is 0 when partitions <= 0.
func Partition(node string, partitions int) int {
	if partitions <= 0 {
		return 0
	}
	return int(xxhash.Sum64String(node) % uint64(partitions))
}

// PartitionIn is Partition with node pools: when pools is set and matches
// the node's name with a non-empty first submatch, that submatch names the
// node's pool, and every node of a pool falls in the pool's partition, so
// one shard owns the whole pool and places gangs as large as it. Other
// nodes hash by name, as Partition does. Names never change, so every
// shard with the same pattern puts a node in the same partition (the
// pattern, like the number of partitions, must be the same on every shard).
func PartitionIn(node string, partitions int, pools *regexp.Regexp) int {
	if pool, ok := PoolOf(node, pools); ok {
		return Partition("pool/"+pool, partitions)
	}
	return Partition(node, partitions)
}

// PoolOf returns the pool a node's name names under pools (see
// PartitionIn), and whether it names one.
func PoolOf(node string, pools *regexp.Regexp) (string, bool) {
	if pools == nil {
		return "", false
	}
	m := pools.FindStringSubmatch(node)
	if len(m) < 2 || m[1] == "" {
		return "", false
	}
	return m[1], true
}

// CompileNodePools compiles a node pool pattern (PartitionIn): a regular
// expression on node names whose first parenthesized submatch names the
// pool. The empty pattern means no pools (nil).
func CompileNodePools(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("node pools %q: %w", pattern, err)
	}
	if re.NumSubexp() < 1 {
		return nil, fmt.Errorf("node pools %q: no parenthesized submatch to name a node's pool (e.g. %q)", pattern, `^(gpu-[a-z0-9]+)-`)
	}
	return re, nil
}

// PartitionKey returns the ring key of partition i: "p/" followed by i in
// decimal. Partition numbers are meant to be non-negative; ParseKey rejects
// the key of a negative i.
func PartitionKey(i int) string {
	return "p/" + strconv.Itoa(i)
}

// QueueKey returns the ring key of the queue called name: "q/" followed by
// name. Queue names are meant to be non-empty; ParseKey rejects "q/".
func QueueKey(name string) string {
	return "q/" + name
}

// ParseKey splits a ring key made by PartitionKey or QueueKey into its kind
// (KindPartition or KindQueue) and name. For a partition key the name is the
// partition number in canonical decimal (digits only, no sign, no leading
// zero unless the number is 0, fitting in an int); for a queue key it is
// the non-empty rest of the key. ok is false for anything else, in which
// case kind is 0 and name is empty.
func ParseKey(k string) (kind byte, name string, ok bool) {
	if len(k) < 3 || k[1] != '/' {
		return 0, "", false
	}
	name = k[2:]
	switch k[0] {
	case KindQueue:
		return KindQueue, name, true
	case KindPartition:
		if !canonicalDecimal(name) {
			return 0, "", false
		}
		return KindPartition, name, true
	default:
		return 0, "", false
	}
}

// canonicalDecimal reports whether s is a non-negative int written in
// decimal with no sign and no superfluous leading zero.
func canonicalDecimal(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	_, err := strconv.Atoi(s) // rejects values that overflow an int
	return err == nil
}

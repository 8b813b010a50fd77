package wire

import (
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

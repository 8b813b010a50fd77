// Package wire holds the values that cross the scheduler's ports: a job's
// reservation and the coordinator's answers (JobRef, Reservation, Terms,
// Eviction, QuotaError, Result), claim records of jobs handed between
// shards (Claim), what a shard gossips about itself (Meta, Capacity), and
// the ring keys of node partitions and queues (PartitionKey, QueueKey).
//
// It imports only api: the scheduling core (scheduler/) speaks these types
// without linking etcd, gRPC or memberlist, which stay with the packages
// that implement the ports (coordinator/, shard/). Those packages keep
// aliases of the types they serve, so their APIs read whole.
package wire

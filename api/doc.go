// Package api is the domain model every other package speaks: resources
// as checked int64 milli-units (Resource, Limit), the scheduling objects
// (Node, Task, Job with its gang fields, the books of a node), and the
// queue tree (QueueSpec, Tree) with its validation, queue by queue.
//
// It owns the arithmetic and the rules that are pure functions of these
// values: a quantity that overflows or goes negative is an error, never a
// panic or a silent wrap; a queue tree with a cycle or an unknown parent
// leaves out that queue and its subtree, not the rest.
//
// It must never import another package of this module, client-go, etcd or
// memberlist (internal/layering checks it): the Kubernetes objects are
// converted to these types at the edge (internal/kube), and the wire
// values between shards and the coordinator are built on them (wire).
package api

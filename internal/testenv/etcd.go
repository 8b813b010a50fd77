// Package testenv starts real servers for tests: an in-process etcd
// (go.etcd.io/etcd/server/v3/embed) for the coordinator and the shards, and
// the local control plane of package cluster (etcd 3.6, kube-apiserver,
// optionally kube-controller-manager and kwok) with the CRDs installed.
// Servers listen on free loopback ports only and are torn down with no
// process left behind.
package testenv

import "github.com/shardsched/shardsched/internal/cluster"

// TB is the subset of testing.TB that the helpers need.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// NewEtcd starts an embedded etcd (no fsync) for one test and stops it when
// the test ends.
func NewEtcd(t TB) *cluster.Etcd {
	t.Helper()
	e, err := cluster.StartEtcd(cluster.EtcdOptions{NoFsync: true, LogLevel: "fatal"})
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(e.Close)
	return e
}

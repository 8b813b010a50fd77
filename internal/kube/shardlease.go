package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Shard status records: each shard keeps one Lease object in its own
// namespace (coordination.k8s.io, as kube-scheduler's and every
// controller's heartbeats are), renewed every few seconds, with what an
// operator asks of it in one annotation. A read-only user reads them with
// `kubectl shardsched shards` or `kubectl get leases -l` the label below;
// nothing reads them to decide anything (ownership and leadership live in
// the coordinator's etcd).
const (
	// ShardLeaseLabel marks a shard's status Lease; its value is the shard.
	ShardLeaseLabel = "shardsched.io/shard"
	// ShardStatusAnnotation holds the ShardStatus as JSON.
	ShardStatusAnnotation = "shardsched.io/status"
	shardLeasePrefix      = "shardsched-shard-"
)

// ShardStatus is what a shard says of itself.
type ShardStatus struct {
	Shard      string `json:"shard"`
	Version    string `json:"version,omitempty"`
	GossipAddr string `json:"gossipAddr,omitempty"`
	// Members are the shards this one sees in the gossip ring.
	Members []string `json:"members"`
	// CoordinatorLeader is set on the shard whose coordinator holds the
	// election (it serializes every quota reservation).
	CoordinatorLeader bool `json:"coordinatorLeader"`
	// Partitions is how many node partitions it holds, of PartitionsTotal.
	Partitions      int `json:"partitions"`
	PartitionsTotal int `json:"partitionsTotal"`
	// Queues are the queues it holds (admission and status), at most 100
	// named; QueuesHeld counts them all.
	Queues     []string `json:"queues,omitempty"`
	QueuesHeld int      `json:"queuesHeld"`
	// Nodes is how many nodes its cache keeps books for (the nodes of its
	// partitions).
	Nodes        int   `json:"nodes"`
	Binds        int64 `json:"binds"`
	BindFailures int64 `json:"bindFailures"`
	// BindsPerSecond is over the last interval between two records.
	BindsPerSecond   float64   `json:"bindsPerSecond"`
	OwnershipChanges int64     `json:"ownershipChanges"`
	Started          time.Time `json:"started"`
}

// ShardLeaseName is the name of shard's status Lease.
func ShardLeaseName(shard string) string { return shardLeasePrefix + shard }

// PublishShardStatus creates or renews shard's status Lease in namespace:
// holder the shard, renewed now, valid for ttl.
func PublishShardStatus(ctx context.Context, cs kubernetes.Interface, namespace string, st ShardStatus, ttl time.Duration) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	now := metav1.NewMicroTime(time.Now())
	secs := int32(max(ttl/time.Second, 1))
	leases := cs.CoordinationV1().Leases(namespace)
	name := ShardLeaseName(st.Shard)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{ShardLeaseLabel: st.Shard, "app.kubernetes.io/name": "shardsched"}}}
		fill(l, st.Shard, string(b), now, secs)
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	fill(l, st.Shard, string(b), now, secs)
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

func fill(l *coordinationv1.Lease, holder, status string, now metav1.MicroTime, secs int32) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[ShardStatusAnnotation] = status
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.RenewTime = &now
	if l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &now
	}
}

// ShardRecord is one shard's status as read back, with the Lease's timing.
type ShardRecord struct {
	ShardStatus
	Renewed time.Time `json:"renewed"`
	// Expired is set when the Lease was not renewed within its duration:
	// the shard is down, stuck, or cut off from the API server.
	Expired bool `json:"expired"`
}

// ReadShardStatus lists the shard status Leases of namespace, as of now.
func ReadShardStatus(ctx context.Context, cs kubernetes.Interface, namespace string, now time.Time) ([]ShardRecord, error) {
	list, err := cs.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{LabelSelector: ShardLeaseLabel})
	if err != nil {
		return nil, fmt.Errorf("list shard leases in %s: %w", namespace, err)
	}
	var out []ShardRecord
	for _, l := range list.Items {
		var r ShardRecord
		if err := json.Unmarshal([]byte(l.Annotations[ShardStatusAnnotation]), &r.ShardStatus); err != nil {
			r.Shard = l.Labels[ShardLeaseLabel]
		}
		if l.Spec.RenewTime != nil {
			r.Renewed = l.Spec.RenewTime.Time
		}
		ttl := 30 * time.Second
		if l.Spec.LeaseDurationSeconds != nil {
			ttl = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		r.Expired = r.Renewed.IsZero() || now.Sub(r.Renewed) > ttl
		out = append(out, r)
	}
	return out, nil
}

// Package kube is the Kubernetes edge, the one package of the shard that
// speaks client-go:
//
//   - Source: the informers (pods, nodes, PodGroups, Queues,
//     PriorityClasses, Volcano Jobs) converted to package api's types and
//     fed to a shard's cache, with the queue specs validated queue by queue
//     (convert.go, objects.go, queues.go, source.go);
//   - the adapters of the scheduler's ports: Binder (pods/binding),
//     Evictor (the Eviction API with a UID precondition), Groups (implicit
//     PodGroups), Recorder (events), and the status writer (server-side
//     apply for Queue status, a UID-preconditioned merge patch for
//     PodGroup status) (writers.go, evictor.go, recorder.go);
//   - the shard status Lease operators read (shardlease.go).
//
// Nothing under api/, wire/, cache/, placement/, scheduler/, coordinator/,
// shard/ or status/ imports client-go (internal/layering checks it). An
// object that cannot be converted is reported on the object and left out;
// it never stops the rest from being scheduled.
package kube

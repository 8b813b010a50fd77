package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// deleteConfig bounds how deletePods clears a namespace of its pods.
type deleteConfig struct {
	collectionTimeout time.Duration // the one DeleteCollection call
	callTimeout       time.Duration // each List page and each single Delete
	batch             int           // pods listed (then deleted) per page, at first
	workers           int           // single deletes in flight, at first
	attempts          int           // tries of a page's list or deletes
	backoff           time.Duration // wait after a page's first failed try; doubles
	poll              time.Duration // between two counts while waiting
	stall             time.Duration // waiting without fewer pods before deleting again
	maxWait           time.Duration // longest wait for the namespace to empty, per round
	rounds            int           // waits for the namespace to empty before giving up
	log               io.Writer     // where a fallback or a new round is told
}

// defaultDeleteConfig is deletePods' configuration: at most 30 s for the
// DeleteCollection of the whole namespace, then pages of 500 pods deleted
// 16 at a time, each page tried 4 times (1, 2, 4 s apart), and 4 waits of
// at most 3 min for the namespace to empty.
func defaultDeleteConfig() deleteConfig {
	return deleteConfig{
		collectionTimeout: 30 * time.Second,
		callTimeout:       15 * time.Second,
		batch:             500,
		workers:           16,
		attempts:          4,
		backoff:           time.Second,
		poll:              200 * time.Millisecond,
		stall:             30 * time.Second,
		maxWait:           3 * time.Minute,
		rounds:            4,
		log:               os.Stderr,
	}
}

// deletePods deletes every pod of ns (grace period 0) and waits until they
// are gone, so that the next run starts on empty nodes. It survives a slow
// API server: see clearPods.
func deletePods(ctx context.Context, cs kubernetes.Interface, ns string) error {
	return clearPods(ctx, cs, ns, defaultDeleteConfig())
}

// clearPods tries one DeleteCollection of ns's pods with a bounded
// timeout. When that fails (a timeout, a reset HTTP/2 stream: any error
// but the end of ctx) it deletes the pods page by page instead (see
// podDeleter). Then it waits for the namespace to empty; when the count of
// pods stops falling for cfg.stall, or cfg.maxWait passes, it deletes the
// pods still there by pages again, cfg.rounds waits in all. It fails, with
// the number of pods left, only if they are still there after the last.
func clearPods(ctx context.Context, cs kubernetes.Interface, ns string, cfg deleteConfig) error {
	lastErr := deleteCollection(ctx, cs, ns, cfg.collectionTimeout)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete the pods of namespace %s: %w", ns, err)
	}
	byPages := lastErr != nil
	if byPages {
		fmt.Fprintf(cfg.log, "  %v: deleting them page by page instead\n", lastErr)
	}
	d := newPodDeleter(cs, ns, cfg)
	left := -1
	for round := 1; round <= cfg.rounds; round++ {
		if byPages {
			if err := d.deleteAll(ctx); err != nil {
				lastErr = err
			}
		}
		var err error
		left, err = waitNoPods(ctx, cs, ns, cfg)
		if left == 0 {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("delete the pods of namespace %s: %w", ns, cerr)
		}
		if err != nil {
			lastErr = err
		}
		if round < cfg.rounds {
			fmt.Fprintf(cfg.log, "  namespace %s still has pods (%s): deleting them again, round %d of %d\n", ns, podCount(left), round+1, cfg.rounds)
		}
		byPages = true
	}
	return fmt.Errorf("pods left in namespace %s after %d rounds of deletes: %s (last error: %v)", ns, cfg.rounds, podCount(left), lastErr)
}

// podCount is n, or "unknown" when n < 0.
func podCount(n int) string {
	if n < 0 {
		return "unknown"
	}
	return fmt.Sprint(n)
}

// deleteCollection deletes every pod of ns in one call (grace period 0)
// that may last at most timeout.
func deleteCollection(ctx context.Context, cs kubernetes.Interface, ns string, timeout time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(cctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("deletecollection of the pods of %s: %w", ns, err)
	}
	return nil
}

// waitNoPods polls the number of pods in ns until there are none, the
// number has not fallen for cfg.stall, cfg.maxWait has passed, or ctx
// ends. It returns the lowest number seen (-1 if no count succeeded) and
// the last error of a count.
func waitNoPods(ctx context.Context, cs kubernetes.Interface, ns string, cfg deleteConfig) (int, error) {
	start := time.Now()
	best, since := -1, start
	var lastErr error
	for {
		n, err := countPods(ctx, cs, ns, cfg.callTimeout)
		switch {
		case err != nil:
			lastErr = err
		case n == 0:
			return 0, nil
		case best < 0 || n < best:
			best, since = n, time.Now()
		}
		if time.Since(since) >= cfg.stall || time.Since(start) >= cfg.maxWait {
			return best, lastErr
		}
		select {
		case <-ctx.Done():
			return best, ctx.Err()
		case <-time.After(cfg.poll):
		}
	}
}

// countPods counts the pods of ns with a list of one item: the API server
// says how many remain beyond it. Where it does not, the count is a lower
// bound that is 0 only when there are none.
func countPods(ctx context.Context, cs kubernetes.Interface, ns string, timeout time.Duration) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := cs.CoreV1().Pods(ns).List(cctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, fmt.Errorf("count the pods of %s: %w", ns, err)
	}
	n := len(l.Items)
	if r := l.RemainingItemCount; r != nil {
		n += int(*r)
	} else if l.Continue != "" {
		n++
	}
	return n, nil
}

// podDeleter deletes a namespace's pods one by one, a page of names at a
// time, with a bounded number of deletes in flight. A page whose list or
// deletes fail is tried again after a backoff, and every failed try halves
// the page size and the deletes in flight, so that a struggling API server
// gets less at once; each page deleted at the first try doubles them back,
// up to cfg's. It is used by one goroutine.
type podDeleter struct {
	cs      kubernetes.Interface
	ns      string
	cfg     deleteConfig
	batch   int // the page size now
	workers int // the deletes in flight now
}

// newPodDeleter returns a deleter of the pods of ns, starting at cfg's
// page size and deletes in flight.
func newPodDeleter(cs kubernetes.Interface, ns string, cfg deleteConfig) *podDeleter {
	return &podDeleter{cs: cs, ns: ns, cfg: cfg, batch: max(1, cfg.batch), workers: max(1, cfg.workers)}
}

// deleteAll lists the pods page by page and deletes each page's pods
// before it lists the next. A page whose deletes still fail after
// cfg.attempts tries is left for the next round; it returns the last such
// error, or the error of a list that kept failing (which ends the pass).
func (d *podDeleter) deleteAll(ctx context.Context) error {
	var lastErr error
	cont := ""
	for {
		names, next, err := d.listPage(ctx, cont)
		if err != nil {
			return err
		}
		if err := d.deletePage(ctx, names); err != nil {
			lastErr = err
		}
		if next == "" || ctx.Err() != nil {
			return errors.Join(lastErr, ctx.Err())
		}
		cont = next
	}
}

// listPage lists the names of the next page of pods after cont, trying
// cfg.attempts times. A continue token that expired restarts the listing
// from the first page (the pods deleted since are gone from it).
func (d *podDeleter) listPage(ctx context.Context, cont string) (names []string, next string, err error) {
	for try := 1; try <= d.cfg.attempts; try++ {
		if try > 1 {
			if err := d.backOff(ctx, try); err != nil {
				return nil, "", err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, d.cfg.callTimeout)
		l, lerr := d.cs.CoreV1().Pods(d.ns).List(cctx, metav1.ListOptions{Limit: int64(d.batch), Continue: cont})
		cancel()
		if lerr == nil {
			names = make([]string, len(l.Items))
			for i := range l.Items {
				names[i] = l.Items[i].Name
			}
			return names, l.Continue, nil
		}
		err = lerr
		if apierrors.IsResourceExpired(lerr) {
			cont = ""
		}
	}
	return nil, "", fmt.Errorf("list the pods of %s (%d tries): %w", d.ns, d.cfg.attempts, err)
}

// deletePage deletes the pods named, trying those whose delete failed
// again, up to cfg.attempts tries in all.
func (d *podDeleter) deletePage(ctx context.Context, names []string) error {
	var err error
	for try := 1; len(names) > 0 && try <= d.cfg.attempts; try++ {
		if try > 1 {
			if berr := d.backOff(ctx, try); berr != nil {
				return berr
			}
		}
		if names, err = d.deleteNames(ctx, names); len(names) == 0 && try == 1 {
			d.grow()
		}
	}
	if len(names) > 0 {
		return fmt.Errorf("delete %d pods of %s, %s among them (%d tries): %w", len(names), d.ns, names[0], d.cfg.attempts, err)
	}
	return nil
}

// backOff halves the page size and the deletes in flight, then waits
// before try (2, 3, ...): cfg.backoff, doubled at each try.
func (d *podDeleter) backOff(ctx context.Context, try int) error {
	d.batch, d.workers = max(1, d.batch/2), max(1, d.workers/2)
	t := time.NewTimer(d.cfg.backoff << (try - 2))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// grow doubles the page size and the deletes in flight, up to cfg's.
func (d *podDeleter) grow() {
	d.batch, d.workers = min(max(1, d.cfg.batch), d.batch*2), min(max(1, d.cfg.workers), d.workers*2)
}

// deleteNames deletes the pods named (grace period 0) with d.workers
// deletes in flight; a pod already gone counts as deleted. It returns the
// names whose delete failed and the last of their errors.
func (d *podDeleter) deleteNames(ctx context.Context, names []string) ([]string, error) {
	zero := int64(0)
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex // guards failed and lastErr
		failed  []string
		lastErr error
	)
	for range min(d.workers, len(names)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(names); i = int(next.Add(1)) - 1 {
				cctx, cancel := context.WithTimeout(ctx, d.cfg.callTimeout)
				err := d.cs.CoreV1().Pods(d.ns).Delete(cctx, names[i], metav1.DeleteOptions{GracePeriodSeconds: &zero})
				cancel()
				if err != nil && !apierrors.IsNotFound(err) {
					mu.Lock()
					failed, lastErr = append(failed, names[i]), err
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed, lastErr
}

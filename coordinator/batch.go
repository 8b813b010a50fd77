package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The client's batching: concurrent Reserve, Confirm, Release and Resize
// calls wait in Client.queue, a dispatcher sends them together (one
// POST /v1/batch, or straight to the participant of this process while it
// leads), and what a batch does not settle is retried alone.

// queued is one batched call waiting for its answer.
type queued struct {
	ctx  context.Context
	item batchItem
	path string // the single-request endpoint, for the fallback
	body any
	done chan batchResult // buffered, 1
}

type batchResult struct {
	res Result
	err error
}

// batched queues a call for the dispatcher, or sends it alone when batching
// is off.
func (c *Client) batched(ctx context.Context, item batchItem, path string, body any) (Result, error) {
	if c.queue == nil {
		return c.do(ctx, http.MethodPost, path, body)
	}
	if trace.SpanContextFromContext(ctx).IsValid() { // nothing to carry otherwise
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		if len(carrier) > 0 {
			item.Trace = carrier
		}
	}
	q := &queued{ctx: ctx, item: item, path: path, body: body, done: make(chan batchResult, 1)}
	select {
	case c.queue <- q:
	case <-c.closed:
		return Result{}, fmt.Errorf("%w: client closed", ErrUnavailable)
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	select {
	case r := <-q.done:
		return r.res, r.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// dispatch collects waiting calls into batches; calls that arrive while
// MaxInflightBatches are in flight form the next, larger batch.
func (c *Client) dispatch() {
	defer c.wg.Done()
	sem := make(chan struct{}, c.cfg.MaxInflightBatches)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		var first *queued
		select {
		case <-c.closed:
			c.failQueued()
			return
		case first = <-c.queue:
		}
		select {
		case sem <- struct{}{}:
		case <-c.closed:
			first.done <- batchResult{err: fmt.Errorf("%w: client closed", ErrUnavailable)}
			c.failQueued()
			return
		}
		batch := []*queued{first}
	fill:
		for len(batch) < c.cfg.MaxBatch {
			select {
			case q := <-c.queue:
				batch = append(batch, q)
			default:
				break fill
			}
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-sem }()
			c.sendBatch(batch)
		}()
	}
}

func (c *Client) failQueued() {
	for {
		select {
		case q := <-c.queue:
			q.done <- batchResult{err: fmt.Errorf("%w: client closed", ErrUnavailable)}
		default:
			return
		}
	}
}

// sendBatch makes one attempt at the whole batch; calls it could not settle
// (leader change, network, timeout) are retried alone with backoff.
func (c *Client) sendBatch(batch []*queued) {
	var live []*queued
	for _, q := range batch {
		if q.ctx.Err() != nil {
			q.done <- batchResult{err: q.ctx.Err()}
			continue
		}
		live = append(live, q)
	}
	if len(live) == 0 {
		return
	}
	items := make([]batchItem, len(live))
	for i, q := range live {
		items[i] = q.item
	}
	var replies []reply
	if addr, err := c.leaderAddr(context.Background()); err == nil {
		replies, err = c.postBatch(addr, items)
		if err != nil {
			c.forgetLeader(addr)
		}
	}
	for i, q := range live {
		if i < len(replies) {
			rep := replies[i]
			if rep.Error == nil {
				q.done <- batchResult{res: resultOf(rep)}
				continue
			}
			err := fromWire(rep.Error)
			if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrUnavailable) {
				q.done <- batchResult{res: Result{Seq: rep.Seq}, err: err}
				continue
			}
		}
		// Unsettled: retry alone (idempotent by UID).
		go func(q *queued) {
			res, err := c.do(q.ctx, http.MethodPost, q.path, q.body)
			q.done <- batchResult{res: res, err: err}
		}(q)
	}
}

func (c *Client) postBatch(addr string, items []batchItem) ([]reply, error) {
	if l := c.cfg.Local; l != nil && addr == l.Addr() {
		return c.localBatch(l, items)
	}
	asCBOR := !c.cfg.JSONBatches && c.readsCBOR(addr)
	replies, err := c.postBatchAs(addr, items, asCBOR)
	if errors.Is(err, errNoCBOR) {
		// It read nothing of the batch: the same again, as JSON.
		replies, err = c.postBatchAs(addr, items, false)
	}
	return replies, err
}

// errNoCBOR: a CBOR batch was answered by a participant that does not say
// it reads CBOR (an older version at an address that did).
var errNoCBOR = errors.New("coordinator: the participant does not read CBOR batches")

// readsCBOR reports whether the participant at addr said, in its last
// answer, that it reads CBOR batches.
func (c *Client) readsCBOR(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cborAddr == addr
}

// postBatchAs sends one batch in CBOR or JSON, and reads the answer in
// what it came in.
func (c *Client) postBatchAs(addr string, items []batchItem, asCBOR bool) ([]reply, error) {
	payload, err := marshalBody(items, asCBOR)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, addr+"/v1/batch", bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	c.setHeaders(req)
	if asCBOR {
		req.Header.Set("Content-Type", mediaCBOR)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	reads := speaksCBOR(resp.Header)
	c.mu.Lock()
	if reads {
		c.cborAddr = addr
	} else if c.cborAddr == addr {
		c.cborAddr = ""
	}
	c.mu.Unlock()
	if asCBOR && !reads {
		// Read to the end, so that the connection is kept.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		return nil, errNoCBOR
	}
	var br batchReply
	if err := decodeBody(io.LimitReader(resp.Body, maxReply), resp.ContentLength, &br, isCBOR(resp.Header)); err != nil {
		return nil, err
	}
	if br.Error != nil {
		return nil, fromWire(br.Error)
	}
	if len(br.Replies) != len(items) {
		return nil, fmt.Errorf("%w: batch of %d got %d replies", ErrUnavailable, len(items), len(br.Replies))
	}
	return br.Replies, nil
}

// localBatch is postBatch answered by the participant of this process
// (ClientConfig.Local), within RequestTimeout as a request would be. The
// answers are the caller's own, as decoded ones would be: the ledger
// hands out copies of its reservations, never its own.
func (c *Client) localBatch(l *Server, items []batchItem) ([]reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
	defer cancel()
	br, err := l.batch(ctx, items)
	if err != nil {
		return nil, err
	}
	return br.Replies, nil
}

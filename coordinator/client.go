package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/shardsched/shardsched/api"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Prefix must match the servers' Config.Prefix.
	Prefix string
	// Shard names the calling shard (stored with its reservations).
	Shard string
	// Lease is the shard's etcd session lease: tentative reservations are
	// bound to it. LeaseFunc, when set, is asked on every Reserve instead,
	// so a shard whose session was replaced names its current lease.
	Lease     clientv3.LeaseID
	LeaseFunc func() clientv3.LeaseID
	// MaxAttempts bounds the tries of one request across leader changes.
	MaxAttempts int
	// Backoff is the first retry delay; it doubles up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// RequestTimeout bounds one HTTP attempt.
	RequestTimeout time.Duration
	// Batch sends concurrent Reserve, Confirm and Release calls together,
	// up to MaxBatch per HTTP request and MaxInflightBatches requests at
	// once. A batch that fails as a whole (leader change, network) falls
	// back to one request per call with the usual retries.
	Batch              bool
	MaxBatch           int
	MaxInflightBatches int
	// JSONBatches keeps batches in JSON even to a leader that reads CBOR
	// (codec.go): for reading them on the wire, and to compare the two.
	JSONBatches bool
	// Tracer provides the shard-side spans; nil means no tracing.
	Tracer trace.TracerProvider
	// Token is sent with every call (the servers' Config.Token).
	Token string
	// Local is the coordinator participant of this process, if any.
	// While it is the leader the client knows, batches are handed to it
	// directly, with no HTTP request and no JSON; anything it does not
	// settle (it stopped leading) is retried over HTTP as usual.
	Local *Server
}

// DefaultClientConfig returns 8 attempts with 25 ms to 1 s backoff, enough to
// ride over a leader failover of a few seconds.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		Prefix:             DefaultConfig().Prefix,
		MaxAttempts:        8,
		Backoff:            25 * time.Millisecond,
		MaxBackoff:         time.Second,
		RequestTimeout:     10 * time.Second,
		Batch:              true,
		MaxBatch:           128,
		MaxInflightBatches: 2,
	}
}

// Client is what a shard uses to reach the coordinator leader. It finds the
// leader through etcd, follows leader changes, and retries idempotent
// requests a bounded number of times. Safe for concurrent use.
type Client struct {
	cfg ClientConfig
	cli *clientv3.Client
	hc  *http.Client
	// tracer makes the shard-side spans; nil when cfg.Tracer is the no-op
	// provider (tracing off).
	tracer trace.Tracer

	queue  chan *queued // batched calls waiting for the dispatcher
	closed chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex // guards leader and cborAddr
	leader string
	// cborAddr is the last address whose answer said its participant
	// reads CBOR batches, until one of its answers does not (codec.go).
	cborAddr string
}

// NewClient returns a client; cli is used only to find the leader.
func NewClient(cli *clientv3.Client, cfg ClientConfig) (*Client, error) {
	if cli == nil {
		return nil, errors.New("coordinator client: nil etcd client")
	}
	if cfg.Prefix == "" || cfg.MaxAttempts < 1 || cfg.Backoff <= 0 || cfg.MaxBackoff < cfg.Backoff || cfg.RequestTimeout <= 0 {
		return nil, fmt.Errorf("coordinator client: invalid config %+v", cfg)
	}
	if cfg.Batch && (cfg.MaxBatch < 1 || cfg.MaxBatch > maxBatch || cfg.MaxInflightBatches < 1) {
		return nil, fmt.Errorf("coordinator client: batch size %d (1..%d) or in-flight batches %d (≥1) out of range", cfg.MaxBatch, maxBatch, cfg.MaxInflightBatches)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider()
	}
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	c := &Client{cfg: cfg, cli: cli, hc: &http.Client{Transport: tr}, closed: make(chan struct{})}
	c.tracer = tracerOf(cfg.Tracer)
	if cfg.Batch {
		c.queue = make(chan *queued, 4*cfg.MaxBatch)
		c.wg.Add(1)
		go c.dispatch()
	}
	return c, nil
}

// Close stops the batch dispatcher (waiting calls fail) and releases idle
// connections. The client must not be used afterwards.
func (c *Client) Close() {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	c.wg.Wait()
	c.hc.CloseIdleConnections()
}

// Reserve asks for amount on queue and all its ancestors for job. A refusal
// for lack of quota is a *QuotaError (errors.As); bad input wraps ErrInvalid.
// Result.Seq is set for refusals too.
func (c *Client) Reserve(ctx context.Context, job JobRef, queue string, amount api.Resource) (Result, error) {
	return c.ReserveWith(ctx, job, queue, amount, nil)
}

// ReserveWith is Reserve with the job's terms recorded on its reservation.
// With terms.Reclaim a job that does not fit may be answered with a
// Nominated reservation (Result.Victims say who gives quota back) instead
// of a *QuotaError; asking again promotes it once the victims are gone.
func (c *Client) ReserveWith(ctx context.Context, job JobRef, queue string, amount api.Resource, terms *Terms) (Result, error) {
	span := noSpan()
	if c.tracer != nil {
		ctx, span = c.tracer.Start(ctx, "coordinator.reserve",
			trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("job", job.Namespace+"/"+job.Name), attribute.String("queue", queue), attribute.String("shard", c.cfg.Shard)))
	}
	defer span.End()
	lease := c.cfg.Lease
	if c.cfg.LeaseFunc != nil {
		lease = c.cfg.LeaseFunc()
	}
	req := ReserveRequest{Job: job, Queue: queue, Amount: amount, Lease: int64(lease), Shard: c.cfg.Shard, Terms: terms}
	res, err := c.batched(ctx, batchItem{Op: "reserve", Reserve: &req}, "/v1/reserve", req)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return res, err
}

// ReserveInOrder asks for a chain of reservations (a queue's jobs, in
// order) in one round trip; the leader applies them one after another.
// With stop, a reserve is tried only if the one before it was admitted,
// nominated or can never fit, and is answered ErrBehind otherwise (see
// InOrder): the same outcome as asking one after another, in one
// round trip instead of one each. Without stop every reserve is tried. At
// most maxBatch reserves; a longer chain is answered ErrInvalid. Answers
// are in the order asked; a chain the leader did not settle (a leader
// change, the network) is sent again whole, up to MaxAttempts times
// (reserves are idempotent by UID), and then each unsettled reserve is
// answered ErrUnavailable.
func (c *Client) ReserveInOrder(ctx context.Context, reqs []InOrder, stop bool) []Answer {
	out := make([]Answer, len(reqs))
	if len(reqs) == 0 {
		return out
	}
	if len(reqs) > maxBatch {
		for i := range out {
			out[i].Err = fmt.Errorf("%w: a chain of %d reserves (at most %d)", ErrInvalid, len(reqs), maxBatch)
		}
		return out
	}
	span := noSpan()
	if c.tracer != nil {
		ctx, span = c.tracer.Start(ctx, "coordinator.reserve_in_order",
			trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("queue", reqs[0].Queue), attribute.Int("jobs", len(reqs)), attribute.String("shard", c.cfg.Shard)))
	}
	defer span.End()
	lease := c.cfg.Lease
	if c.cfg.LeaseFunc != nil {
		lease = c.cfg.LeaseFunc()
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	items := make([]batchItem, len(reqs))
	for i, r := range reqs {
		req := ReserveRequest{Job: r.Job, Queue: r.Queue, Amount: r.Amount, Lease: int64(lease), Shard: c.cfg.Shard, Terms: r.Terms}
		items[i] = batchItem{Op: "reserve", Reserve: &req}
		if len(carrier) > 0 {
			items[i].Trace = carrier
		}
		if stop && i > 0 {
			items[i].Behind = i // 1-based: the item before
		}
	}
	backoff := c.cfg.Backoff
	var lastErr error
	for attempt := 1; attempt <= c.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := c.pause(ctx, &backoff); err != nil {
				lastErr = errors.Join(err, lastErr)
				break
			}
		}
		addr, err := c.leaderAddr(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		replies, err := c.postBatch(addr, items)
		if err != nil {
			lastErr = err
			c.forgetLeader(addr)
			continue
		}
		settled := true
		for i, rep := range replies {
			if rep.Error == nil {
				out[i] = Answer{Result: resultOf(rep)}
				continue
			}
			err := fromWire(rep.Error)
			if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrUnavailable) {
				settled, lastErr = false, err
				break
			}
			out[i] = Answer{Result: Result{Seq: rep.Seq}, Err: err}
		}
		if settled {
			return out
		}
		c.forgetLeader(addr)
	}
	for i := range out {
		out[i] = Answer{Err: fmt.Errorf("%w: %d attempts failed: %v", ErrUnavailable, c.cfg.MaxAttempts, lastErr)}
	}
	span.SetStatus(codes.Error, fmt.Sprint(lastErr))
	return out
}

// Confirm makes a job's reservation durable once its gang is bound.
func (c *Client) Confirm(ctx context.Context, uid string) (Result, error) {
	return c.batched(ctx, batchItem{Op: "confirm", UID: uid}, "/v1/confirm", uidRequest{UID: uid})
}

// Release frees a job's reservation; releasing an unknown UID is not an error
// (Result.Found is false).
func (c *Client) Release(ctx context.Context, uid string) (Result, error) {
	return c.batched(ctx, batchItem{Op: "release", UID: uid}, "/v1/release", uidRequest{UID: uid})
}

// Resize sets a reservation's amount to each of targets in turn while they
// fit (see Ledger.Resize); Result.Reservation is the reservation after it,
// Result.Granted how many targets were applied and Result.Refused why the
// next was not. A UID with no reservation wraps ErrNotFound. bound, when
// not nil, is what the job's bound pods ask: the reservation is raised to it
// first, capability or not (ResizeRequest.Bound). Retrying is safe: the
// targets are absolute amounts.
func (c *Client) Resize(ctx context.Context, uid string, bound *api.Resource, targets []api.Resource) (Result, error) {
	req := ResizeRequest{UID: uid, Targets: targets, Bound: bound}
	return c.batched(ctx, batchItem{Op: "resize", Resize: &req}, "/v1/resize", req)
}

// SetQueues replaces the queue tree; an invalid tree wraps ErrInvalid and
// changes nothing.
func (c *Client) SetQueues(ctx context.Context, specs []api.QueueSpec) (Result, error) {
	return c.do(ctx, http.MethodPut, "/v1/queues", specs)
}

// List returns the queue tree and the reservations in these leaf queues,
// or every reservation when no queue is named.
func (c *Client) List(ctx context.Context, queues ...string) (Result, error) {
	path := "/v1/reservations"
	if len(queues) > 0 {
		path += "?" + url.Values{"queue": queues}.Encode()
	}
	res, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil || len(queues) == 0 {
		return res, err
	}
	// A leader of an older version lists every queue's: keep the asked.
	in := queueSet(queues)
	res.Reservations = slices.DeleteFunc(res.Reservations, func(r Reservation) bool { return !in[r.Queue] })
	return res, nil
}

// Evictions returns the reservations marked for eviction
// (Result.Reservations, each with its Evict): what the victims' queue
// owners must act on.
func (c *Client) Evictions(ctx context.Context) (Result, error) {
	return c.do(ctx, http.MethodGet, "/v1/evictions", nil)
}

func (c *Client) do(ctx context.Context, method, path string, body any) (Result, error) {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		payload = b
	}
	backoff := c.cfg.Backoff
	var lastErr error
	for attempt := 1; attempt <= c.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := c.pause(ctx, &backoff); err != nil {
				return Result{}, errors.Join(err, lastErr)
			}
		}
		addr, err := c.leaderAddr(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		res, retry, err := c.once(ctx, method, addr+path, payload)
		if err == nil || !retry {
			return res, err
		}
		lastErr = err
		c.forgetLeader(addr)
	}
	return Result{}, fmt.Errorf("coordinator: %d attempts failed: %w", c.cfg.MaxAttempts, lastErr)
}

// pause waits before a retry: *backoff, jittered, which it then doubles
// up to MaxBackoff; it returns ctx's error if ctx ends first.
func (c *Client) pause(ctx context.Context, backoff *time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(jittered(*backoff, rand.Int64N)):
	}
	*backoff = min(2**backoff, c.cfg.MaxBackoff)
	return nil
}

func (c *Client) once(ctx context.Context, method, url string, payload []byte) (res Result, retry bool, err error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(actx, method, url, rd)
	if err != nil {
		return Result{}, false, err
	}
	c.setHeaders(req)
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.hc.Do(req)
	if err != nil {
		return Result{}, ctx.Err() == nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	var rep reply
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxReply)).Decode(&rep); err != nil {
		return Result{}, ctx.Err() == nil, fmt.Errorf("%w: bad reply (%s): %v", ErrUnavailable, resp.Status, err)
	}
	if rep.Error != nil {
		err := fromWire(rep.Error)
		retry := errors.Is(err, ErrNotLeader) || errors.Is(err, ErrUnavailable)
		if rep.Error.Leader != "" && errors.Is(err, ErrNotLeader) {
			c.setLeader(rep.Error.Leader)
			return Result{}, true, err
		}
		// Refusals carry the sequence number of the decision.
		return Result{Seq: rep.Seq}, retry, err
	}
	return resultOf(rep), false, nil
}

// setHeaders marks a request as JSON (postBatchAs may mark it CBOR after)
// and, with a token, authenticates it.
func (c *Client) setHeaders(req *http.Request) {
	req.Header.Set("Content-Type", "application/json")
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
}

func (c *Client) leaderAddr(ctx context.Context) (string, error) {
	c.mu.Lock()
	addr := c.leader
	c.mu.Unlock()
	if addr != "" {
		return addr, nil
	}
	lctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	addr, err := leaderAddr(lctx, c.cli, c.cfg.Prefix)
	if err != nil {
		return "", err
	}
	c.setLeader(addr)
	return addr, nil
}

func (c *Client) setLeader(addr string) {
	c.mu.Lock()
	c.leader = addr
	c.mu.Unlock()
}

func (c *Client) forgetLeader(addr string) {
	c.mu.Lock()
	if c.leader == addr {
		c.leader = ""
	}
	c.mu.Unlock()
}

func resultOf(rep reply) Result {
	out := Result{Existed: rep.Existed, Found: rep.Found, Reservations: rep.Reservations, Specs: rep.Specs, Seq: rep.Seq,
		Granted: rep.Granted, Refused: rep.Refused, Victims: rep.Victims}
	if rep.Reservation != nil {
		out.Reservation = *rep.Reservation
	}
	return out
}

// jittered is d shortened by a random part of up to half of it, so that
// shards retrying after the same failure (a leader change reaches them all
// at once) do not come back in lock step. n(k) returns a number in [0, k).
func jittered(d time.Duration, n func(int64) int64) time.Duration {
	half := int64(d / 2)
	if half <= 0 {
		return d
	}
	return d - time.Duration(n(half))
}

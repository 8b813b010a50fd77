package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardsched/shardsched/api"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Prefix must match the servers' Config.Prefix.
	Prefix string
	// Shard names the calling shard (stored with its reservations).
	Shard string
	// Lease is the shard's etcd session lease: tentative reservations are
	// bound to it.
	Lease clientv3.LeaseID
	// MaxAttempts bounds the tries of one request across leader changes.
	MaxAttempts int
	// Backoff is the first retry delay; it doubles up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// RequestTimeout bounds one HTTP attempt.
	RequestTimeout time.Duration
}

// DefaultClientConfig returns 8 attempts with 25 ms to 1 s backoff, enough to
// ride over a leader failover of a few seconds.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		Prefix:         DefaultConfig().Prefix,
		MaxAttempts:    8,
		Backoff:        25 * time.Millisecond,
		MaxBackoff:     time.Second,
		RequestTimeout: 10 * time.Second,
	}
}

// Client is what a shard uses to reach the coordinator leader. It finds the
// leader through etcd, follows leader changes, and retries idempotent
// requests a bounded number of times. Safe for concurrent use.
type Client struct {
	cfg ClientConfig
	cli *clientv3.Client
	hc  *http.Client

	mu     sync.Mutex // guards leader
	leader string
}

// NewClient returns a client; cli is used only to find the leader.
func NewClient(cli *clientv3.Client, cfg ClientConfig) (*Client, error) {
	if cli == nil {
		return nil, errors.New("coordinator client: nil etcd client")
	}
	if cfg.Prefix == "" || cfg.MaxAttempts < 1 || cfg.Backoff <= 0 || cfg.MaxBackoff < cfg.Backoff || cfg.RequestTimeout <= 0 {
		return nil, fmt.Errorf("coordinator client: invalid config %+v", cfg)
	}
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	return &Client{cfg: cfg, cli: cli, hc: &http.Client{Transport: tr}}, nil
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Result is the answer to a request.
type Result struct {
	Reservation  Reservation
	Existed      bool // Reserve: the UID already held this reservation
	Found        bool // Release: the UID held a reservation
	Reservations []Reservation
	Specs        []api.QueueSpec
	Seq          Seq
}

// Reserve asks for amount on queue and all its ancestors for job. A refusal
// for lack of quota is a *QuotaError (errors.As); bad input wraps ErrInvalid.
// Result.Seq is set for refusals too.
func (c *Client) Reserve(ctx context.Context, job JobRef, queue string, amount api.Resource) (Result, error) {
	return c.do(ctx, http.MethodPost, "/v1/reserve", ReserveRequest{
		Job: job, Queue: queue, Amount: amount, Lease: int64(c.cfg.Lease), Shard: c.cfg.Shard,
	})
}

// Confirm makes a job's reservation durable once its gang is bound.
func (c *Client) Confirm(ctx context.Context, uid string) (Result, error) {
	return c.do(ctx, http.MethodPost, "/v1/confirm", uidRequest{UID: uid})
}

// Release frees a job's reservation; releasing an unknown UID is not an error
// (Result.Found is false).
func (c *Client) Release(ctx context.Context, uid string) (Result, error) {
	return c.do(ctx, http.MethodPost, "/v1/release", uidRequest{UID: uid})
}

// SetQueues replaces the queue tree; an invalid tree wraps ErrInvalid and
// changes nothing.
func (c *Client) SetQueues(ctx context.Context, specs []api.QueueSpec) (Result, error) {
	return c.do(ctx, http.MethodPut, "/v1/queues", specs)
}

// List returns every reservation and the queue tree.
func (c *Client) List(ctx context.Context) (Result, error) {
	return c.do(ctx, http.MethodGet, "/v1/reservations", nil)
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
			select {
			case <-ctx.Done():
				return Result{}, errors.Join(ctx.Err(), lastErr)
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, c.cfg.MaxBackoff)
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
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return Result{}, ctx.Err() == nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	var rep reply
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&rep); err != nil {
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
	out := Result{Existed: rep.Existed, Found: rep.Found, Reservations: rep.Reservations, Specs: rep.Specs, Seq: rep.Seq}
	if rep.Reservation != nil {
		out.Reservation = *rep.Reservation
	}
	return out, false, nil
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

package coordinator

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardsched/shardsched/api"
)

// Wire format of the HTTP API (JSON over loopback or the pod network; a
// batch and its answer in CBOR instead between a client and a participant
// that says it reads it, codec.go):
//
//	POST /v1/reserve       ReserveRequest      → reply
//	POST /v1/confirm       {"uid": "..."}      → reply
//	POST /v1/release       {"uid": "..."}      → reply
//	POST /v1/resize        ResizeRequest       → reply (granted, refused)
//	PUT  /v1/queues        []api.QueueSpec     → reply
//	GET  /v1/reservations[?queue=q&queue=...]  → reply (with queue names: those leaf queues' reservations only)
//	GET  /v1/evictions                         → reply (the reservations marked for eviction)
//	POST /v1/batch         []batchItem         → batchReply (one reply per item, in order)
//
// Errors come back as reply.Error with a code; a follower answers 503 with
// code not_leader and the leader's address.

type uidRequest struct {
	UID string `json:"uid"`
}

// batchItem is one reserve, confirm or release in a batch.
type batchItem struct {
	Op      string          `json:"op"` // "reserve", "confirm", "release", "resize"
	Reserve *ReserveRequest `json:"reserve,omitempty"`
	Resize  *ResizeRequest  `json:"resize,omitempty"`
	UID     string          `json:"uid,omitempty"`
	// Trace carries the caller's W3C trace context (traceparent).
	Trace map[string]string `json:"trace,omitempty"`
	// Behind, on a reserve, is the 1-based index of an earlier reserve of
	// the same batch that this one waits behind: it is tried only if that
	// one was admitted, nominated or can never fit, and is answered
	// ErrBehind otherwise (Client.ReserveInOrder). 0: none.
	Behind int `json:"behind,omitempty"`
}

type batchReply struct {
	Replies []reply    `json:"replies,omitempty"`
	Error   *wireError `json:"error,omitempty"`
}

// maxBatch bounds the items of one batch request.
const maxBatch = 1024

type wireError struct {
	Code    string      `json:"code"`
	Message string      `json:"message"`
	Quota   *QuotaError `json:"quota,omitempty"`
	Leader  string      `json:"leader,omitempty"`
}

type reply struct {
	result
	Error *wireError `json:"error,omitempty"`
}

const (
	codeQuota       = "quota"
	codeInvalid     = "invalid"
	codeNotFound    = "not_found"
	codeNotLeader   = "not_leader"
	codeUnavailable = "unavailable"
	codeSession     = "session_expired"
	codeUnauth      = "unauthenticated"
	codeBehind      = "behind"
)

func toWire(err error) (int, *wireError) {
	var qe *QuotaError
	switch {
	case errors.As(err, &qe):
		return http.StatusConflict, &wireError{Code: codeQuota, Message: err.Error(), Quota: qe}
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest, &wireError{Code: codeInvalid, Message: err.Error()}
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, &wireError{Code: codeNotFound, Message: err.Error()}
	case errors.Is(err, ErrNotLeader):
		return http.StatusServiceUnavailable, &wireError{Code: codeNotLeader, Message: err.Error()}
	case errors.Is(err, ErrSessionExpired):
		return http.StatusGone, &wireError{Code: codeSession, Message: err.Error()}
	case errors.Is(err, ErrBehind):
		return http.StatusConflict, &wireError{Code: codeBehind, Message: err.Error()}
	default:
		return http.StatusServiceUnavailable, &wireError{Code: codeUnavailable, Message: err.Error()}
	}
}

// fromWire turns a wire error back into the typed errors of this package.
func fromWire(w *wireError) error {
	switch w.Code {
	case codeQuota:
		if w.Quota != nil {
			return w.Quota
		}
	case codeInvalid:
		return &wrapped{ErrInvalid, w.Message}
	case codeNotFound:
		return &wrapped{ErrNotFound, w.Message}
	case codeNotLeader:
		return &wrapped{ErrNotLeader, w.Message}
	case codeSession:
		return &wrapped{ErrSessionExpired, w.Message}
	case codeUnauth:
		return &wrapped{ErrUnauthenticated, w.Message}
	case codeBehind:
		return &wrapped{ErrBehind, w.Message}
	}
	return &wrapped{ErrUnavailable, w.Message}
}

// wrapped carries a sentinel and the server's message.
type wrapped struct {
	sentinel error
	msg      string
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.sentinel }

const maxBody = 4 << 20

// maxReply bounds what a client reads of one answer. It is far above
// maxBody, which bounds a request: a list of every reservation grows with
// the cluster (about 400 bytes each), and one cut at maxBody could not be
// decoded, so that at about 10,000 reservations every list failed and
// every shard's reconciliation with it. Batch answers have the same bound.
const maxReply = 64 * maxBody

// handler is the HTTP API, behind the token check when a token is set;
// every answer, a refusal included, says the participant reads CBOR
// batches (codec.go).
func (s *Server) handler() http.Handler {
	api := s.authenticated(s.routes())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(headerCodecs, codecsCBOR)
		api.ServeHTTP(w, r)
	})
}

// authenticated is api behind the token check, or api when no token is set.
func (s *Server) authenticated(api http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return api
	}
	want := []byte("Bearer " + s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(reply{Error: &wireError{Code: codeUnauth,
				Message: "coordinator: the call does not carry the shards' token (Authorization: Bearer)"}})
			return
		}
		api.ServeHTTP(w, r)
	})
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	// decode reads a body in what its Content-Type says (codec.go).
	decode := func(w http.ResponseWriter, r *http.Request, v any) bool {
		if err := decodeBody(http.MaxBytesReader(w, r.Body, maxBody), r.ContentLength, v, isCBOR(r.Header)); err != nil {
			s.writeReply(w, r.Context(), result{err: &wrapped{ErrInvalid, "invalid request body: " + err.Error()}})
			return false
		}
		return true
	}
	mux.HandleFunc("POST /v1/reserve", func(w http.ResponseWriter, r *http.Request) {
		var req ReserveRequest
		if decode(w, r, &req) {
			ctx, span := s.span(propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), opReserve, req.Job.UID, req.Queue)
			res := s.submit(ctx, &call{kind: opReserve, reserve: req})
			endSpan(span, res.err)
			s.writeReply(w, r.Context(), res)
		}
	})
	mux.HandleFunc("POST /v1/confirm", func(w http.ResponseWriter, r *http.Request) {
		var req uidRequest
		if decode(w, r, &req) {
			s.writeReply(w, r.Context(), s.submit(r.Context(), &call{kind: opConfirm, uid: req.UID}))
		}
	})
	mux.HandleFunc("POST /v1/release", func(w http.ResponseWriter, r *http.Request) {
		var req uidRequest
		if decode(w, r, &req) {
			s.writeReply(w, r.Context(), s.submit(r.Context(), &call{kind: opRelease, uid: req.UID}))
		}
	})
	mux.HandleFunc("POST /v1/resize", func(w http.ResponseWriter, r *http.Request) {
		var req ResizeRequest
		if decode(w, r, &req) {
			s.writeReply(w, r.Context(), s.submit(r.Context(), &call{kind: opResize, resize: req, uid: req.UID}))
		}
	})
	mux.HandleFunc("PUT /v1/queues", func(w http.ResponseWriter, r *http.Request) {
		var specs []api.QueueSpec
		if decode(w, r, &specs) {
			s.writeReply(w, r.Context(), s.submit(r.Context(), &call{kind: opSetTree, specs: specs}))
		}
	})
	mux.HandleFunc("POST /v1/batch", func(w http.ResponseWriter, r *http.Request) {
		// Answered in what it was asked in (codec.go); errors in JSON.
		asCBOR := isCBOR(r.Header)
		var items []batchItem
		if !decode(w, r, &items) {
			return
		}
		out, err := s.batch(r.Context(), items)
		if err != nil {
			s.writeReply(w, r.Context(), result{err: err})
			return
		}
		body, err := marshalBody(out, asCBOR)
		if err != nil {
			s.writeReply(w, r.Context(), result{err: fmt.Errorf("%w: encoding the answer: %v", ErrUnavailable, err)})
			return
		}
		if asCBOR {
			w.Header().Set("Content-Type", mediaCBOR)
		} else {
			w.Header().Set("Content-Type", mediaJSON)
		}
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET /v1/reservations", func(w http.ResponseWriter, r *http.Request) {
		s.writeReply(w, r.Context(), s.submit(r.Context(), &call{kind: opList, queues: r.URL.Query()["queue"]}))
	})
	mux.HandleFunc("GET /v1/evictions", func(w http.ResponseWriter, r *http.Request) {
		s.writeReply(w, r.Context(), s.submit(r.Context(), &call{kind: opEvicting}))
	})
	return mux
}

// batch answers a batch of calls, one reply per item in order: the body of
// POST /v1/batch, or a client in this process (ClientConfig.Local). A
// malformed batch is refused whole (ErrInvalid) before any call is applied.
func (s *Server) batch(ctx context.Context, items []batchItem) (batchReply, error) {
	if len(items) > maxBatch {
		return batchReply{}, &wrapped{ErrInvalid, "batch of more than 1024 items"}
	}
	calls := make([]*call, len(items))
	for i, it := range items {
		switch {
		case it.Op == "reserve" && it.Reserve != nil:
			calls[i] = &call{kind: opReserve, reserve: *it.Reserve}
		case it.Op == "confirm":
			calls[i] = &call{kind: opConfirm, uid: it.UID}
		case it.Op == "release":
			calls[i] = &call{kind: opRelease, uid: it.UID}
		case it.Op == "resize" && it.Resize != nil:
			calls[i] = &call{kind: opResize, resize: *it.Resize, uid: it.Resize.UID}
		default:
			return batchReply{}, &wrapped{ErrInvalid, "batch item " + itoa(int64(i)) + ": unknown op " + it.Op}
		}
		if it.Behind != 0 {
			if it.Behind < 1 || it.Behind > i || calls[i].kind != opReserve || calls[it.Behind-1].kind != opReserve {
				return batchReply{}, &wrapped{ErrInvalid, "batch item " + itoa(int64(i)) + ": behind must name an earlier reserve (1-based) from a reserve"}
			}
			calls[i].behind = calls[it.Behind-1]
		}
	}
	spans := make([]trace.Span, len(items))
	for i, it := range items {
		q, uid := "", it.UID
		if it.Reserve != nil {
			q, uid = it.Reserve.Queue, it.Reserve.Job.UID
		}
		_, spans[i] = s.span(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(it.Trace)), calls[i].kind, uid, q)
	}
	results := s.submitMany(ctx, calls)
	for i, res := range results {
		endSpan(spans[i], res.err)
	}
	out := batchReply{Replies: make([]reply, len(results))}
	for i, res := range results {
		out.Replies[i] = reply{result: res}
		if res.err != nil {
			_, out.Replies[i].Error = toWire(res.err)
		}
	}
	return out, nil
}

// span starts the leader-side span of one request, as a child of the
// caller's span when the request carried trace context.
func (s *Server) span(ctx context.Context, kind opKind, uid, queue string) (context.Context, trace.Span) {
	if s.tracer == nil {
		// Tracing off: a span that records nothing, and not the caller's
		// (ending it must not end theirs).
		return ctx, noSpan()
	}
	return s.tracer.Start(ctx, "coordinator."+kind.String()+".leader",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("job.uid", uid), attribute.String("queue", queue), attribute.String("coordinator", s.cfg.Name)))
}

// noSpan is a span that records nothing and is nobody's: what a call gets
// when tracing is off (the Tracer is the no-op provider), so that it builds
// no span attributes. Ending it ends nothing; the caller's span, if any,
// stays in the context and still travels to the leader.
func noSpan() trace.Span { return trace.SpanFromContext(context.Background()) }

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (s *Server) writeReply(w http.ResponseWriter, ctx context.Context, res result) {
	rep := reply{result: res}
	status := http.StatusOK
	if res.err != nil {
		status, rep.Error = toWire(res.err)
		if rep.Error.Code == codeNotLeader {
			if addr, err := leaderAddr(ctx, s.cli, s.cfg.Prefix); err == nil {
				rep.Error.Leader = addr
			}
		}
	}
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(rep)
}

package coordinator

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/shardsched/shardsched/api"
)

// otlpReceiver is an in-process OTLP/gRPC trace receiver.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) byName(name string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// TestTraceCrossesShardToCoordinator sends spans from a shard's client and
// from the coordinator leader to an OTLP receiver and checks that the
// leader's span is a child of the shard's, in the same trace, for both the
// batched and the single-request paths.
func TestTraceCrossesShardToCoordinator(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, rcv)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	ctx := ctxT(t, 30*time.Second)
	newTP := func() *sdktrace.TracerProvider {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(ln.Addr().String()), otlptracegrpc.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		return sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	}
	leaderTP, shardTP := newTP(), newTP()
	defer leaderTP.Shutdown(context.Background())
	defer shardTP.Shutdown(context.Background())

	ev := newEnv(t, 0, 5)
	ev.cfg.Tracer = leaderTP
	ev.add()
	ev.leader(10 * time.Second)
	// A traced client's span is the leader's parent. A client with tracing
	// off (no Tracer: the no-op provider) starts no span of its own, but its
	// caller's span still reaches the leader, which makes its span that
	// span's child. Both for the batched and the single-request paths.
	for _, traced := range []bool{true, false} {
		for _, batch := range []bool{true, false} {
			name := map[bool]string{true: "traced", false: "untraced"}[traced]
			sh := ev.newShard(name, 5)
			cc := DefaultClientConfig()
			cc.Prefix, cc.Shard, cc.Lease, cc.Batch = ev.cfg.Prefix, name, sh.session.Lease(), batch
			rctx, caller := ctx, trace.SpanFromContext(ctx)
			if traced {
				cc.Tracer = shardTP
			} else {
				rctx, caller = shardTP.Tracer("test").Start(ctx, "caller")
			}
			c, err := NewClient(sh.cli, cc)
			if err != nil {
				t.Fatal(err)
			}
			uid := name + map[bool]string{true: "-batch", false: "-single"}[batch]
			if _, err := c.Reserve(rctx, JobRef{Namespace: "ns", Name: uid, UID: uid}, api.DefaultQueue, res(1000, gi)); err != nil {
				t.Fatal(err)
			}
			caller.End()
			c.Close()
		}
	}
	_ = leaderTP.ForceFlush(ctx)
	_ = shardTP.ForceFlush(ctx)
	callers := rcv.byName("caller")
	clients, leaders := rcv.byName("coordinator.reserve"), rcv.byName("coordinator.reserve.leader")
	if len(clients) != 2 || len(leaders) != 4 || len(callers) != 2 {
		t.Fatalf("received %d shard spans, %d leader spans and %d callers' spans, want 2, 4 and 2", len(clients), len(leaders), len(callers))
	}
	clients = append(clients, callers...)
	for _, c := range clients {
		found := false
		for _, l := range leaders {
			if bytes.Equal(l.TraceId, c.TraceId) && bytes.Equal(l.ParentSpanId, c.SpanId) {
				found = true
			}
		}
		if !found {
			t.Errorf("no leader span in trace %x with parent %x", c.TraceId, c.SpanId)
		}
	}
}

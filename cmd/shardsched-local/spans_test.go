package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/shardsched/shardsched/internal/telemetry"
)

// TestMain fails the package when a test leaves a goroutine running (a span
// receiver or a gRPC connection that was not closed).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lockedBuffer is a -spans-file stand-in that the test reads after the
// receiver wrote to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// process is one exporting "process": a tracer provider with its own
// service name, batching to the receiver like a shard does.
type process struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

func newProcess(t *testing.T, ctx context.Context, addr, service, instance string) *process {
	t.Helper()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", service)}
	if instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", instance))
	}
	// A long batch delay: nothing is exported until the test flushes.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &process{tp: tp, tracer: tp.Tracer("test")}
}

func (p *process) flush(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := p.tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
}

// remoteChild starts a span in callee as a child of parent's span in
// another process: the context crosses as a W3C traceparent, as it does
// between a shard and the coordinator leader.
func remoteChild(ctx context.Context, callee *process, name string, attrs ...attribute.KeyValue) trace.Span {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	rctx := propagation.TraceContext{}.Extract(context.Background(), carrier)
	_, span := callee.tracer.Start(rctx, name, trace.WithAttributes(attrs...))
	return span
}

func TestSpanReceiverCountsAndCrossProcessTraces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	file := &lockedBuffer{}
	rcv, err := startSpanReceiver(3, file)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Stop(5 * time.Second)
	shard := newProcess(t, ctx, rcv.Addr(), "shardsched", "shard-1")
	leader := newProcess(t, ctx, rcv.Addr(), "shardsched", "shard-0")

	// Trace 1: the leader's child is exported before the shard's parent
	// (the usual order: the client span ends last).
	actx, admit := shard.tracer.Start(ctx, "scheduler.admit", trace.WithAttributes(
		attribute.String("job", "demo/a"), attribute.String("queue", "q1")))
	rctx, reserve := shard.tracer.Start(actx, "coordinator.reserve") // same process: not a crossing
	lspan := remoteChild(rctx, leader, "coordinator.reserve.leader", attribute.String("queue", "q1"))
	lspan.End()
	leader.flush(t, ctx)
	reserve.End()
	admit.SetAttributes(attribute.Bool("admitted", true))
	admit.End()
	shard.flush(t, ctx)

	// Trace 2: the parent is exported first.
	pctx, place := shard.tracer.Start(ctx, "scheduler.place", trace.WithAttributes(attribute.String("job", "demo/b")))
	place.SetAttributes(attribute.Bool("placed", false))
	place.End()
	shard.flush(t, ctx)
	child := remoteChild(pctx, leader, "coordinator.reserve.leader", attribute.String("queue", "q2"))
	child.End()
	leader.flush(t, ctx)

	// Not part of any crossing: a root span in the leader.
	_, bind := leader.tracer.Start(ctx, "scheduler.bind", trace.WithAttributes(attribute.String("node", "kwok-node-7")))
	bind.End()
	leader.flush(t, ctx)

	v := rcv.view()
	if v.Received != 6 {
		t.Errorf("received %d spans, want 6", v.Received)
	}
	wantCounts := map[string]int{"scheduler.admit": 1, "coordinator.reserve": 1, "coordinator.reserve.leader": 2, "scheduler.place": 1, "scheduler.bind": 1}
	for name, want := range wantCounts {
		if got := v.ByName[name].Count; got != want {
			t.Errorf("%s: count %d, want %d", name, got, want)
		}
	}
	if len(v.ByName) != len(wantCounts) {
		t.Errorf("span names %v, want %v", v.ByName, wantCounts)
	}
	if s := v.ByName["scheduler.admit"]; s.Max < s.Mean() || s.Max < v.ByName["coordinator.reserve"].Max {
		t.Errorf("scheduler.admit: max %v, mean %v; want max >= mean and >= its child's", s.Max, s.Mean())
	}
	if v.CrossLinks != 2 || v.CrossTraces != 2 {
		t.Errorf("cross-process: %d links in %d traces, want 2 in 2", v.CrossLinks, v.CrossTraces)
	}
	// The latest span of each of the last three names, oldest first, with
	// its process and attributes (the second leader span replaced the first).
	var got []string
	for _, l := range v.Recent {
		got = append(got, l.Process+" "+l.Name+" "+strings.Join(l.Attrs, " "))
	}
	want := []string{
		"shard-1 scheduler.place job=demo/b placed=false",
		"shard-0 coordinator.reserve.leader queue=q2",
		"shard-0 scheduler.bind node=kwok-node-7",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("recent:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	var b strings.Builder
	v.render(&b)
	for _, s := range []string{"6 received", "2 cross-process parent links in 2 traces", "coordinator.reserve.leader         2", "scheduler.bind"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("SPANS section lacks %q:\n%s", s, b.String())
		}
	}

	// -spans-file: one JSON object per span, with the parent link.
	var recs []spanRecord
	sc := bufio.NewScanner(strings.NewReader(file.String()))
	for sc.Scan() {
		var r spanRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("spans file line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 6 {
		t.Fatalf("spans file has %d lines, want 6", len(recs))
	}
	ids := map[string]spanRecord{}
	for _, r := range recs {
		ids[r.SpanID] = r
	}
	first := recs[0]
	if first.Name != "coordinator.reserve.leader" || first.Instance != "shard-0" || first.Service != "shardsched" {
		t.Errorf("first record %+v, want the leader's span from shard-0", first)
	}
	if p, ok := ids[first.ParentID]; !ok || p.Name != "coordinator.reserve" || p.Instance != "shard-1" || p.TraceID != first.TraceID {
		t.Errorf("leader span's parent %q: %+v, want shard-1's coordinator.reserve in trace %s", first.ParentID, p, first.TraceID)
	}
	for _, r := range recs {
		if r.Name == "scheduler.admit" && (r.Attributes["admitted"] != true || r.Attributes["job"] != "demo/a" || r.ParentID != "") {
			t.Errorf("scheduler.admit record %+v: want a root with admitted=true job=demo/a", r)
		}
	}
}

// Two services may run under the same instance name; a link between them
// still crosses processes. A parent that never arrives counts nothing.
func TestSpanReceiverServiceNameIsPartOfTheProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rcv, err := startSpanReceiver(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Stop(5 * time.Second)
	a := newProcess(t, ctx, rcv.Addr(), "scheduler", "")
	b := newProcess(t, ctx, rcv.Addr(), "coordinator", "")
	orphanParent := newProcess(t, ctx, rcv.Addr(), "never-flushed", "")

	pctx, parent := a.tracer.Start(ctx, "parent")
	remoteChild(pctx, b, "child").End()
	parent.End()
	octx, lost := orphanParent.tracer.Start(ctx, "lost")
	remoteChild(octx, b, "orphan").End()
	_ = lost // never ended: never exported
	a.flush(t, ctx)
	b.flush(t, ctx)
	// A busy name keeps one line in the recent list: its latest span.
	for i := range 3 {
		_, cycle := b.tracer.Start(ctx, "cycle", trace.WithAttributes(attribute.Int("jobs", i)))
		cycle.End()
	}
	b.flush(t, ctx)

	v := rcv.view()
	if v.Received != 6 || v.CrossLinks != 1 || v.CrossTraces != 1 {
		t.Errorf("received %d, cross %d links in %d traces; want 6, 1 in 1", v.Received, v.CrossLinks, v.CrossTraces)
	}
	if v.ByName["cycle"].Count != 3 {
		t.Errorf("cycle count %d, want 3", v.ByName["cycle"].Count)
	}
	var recent []string
	for _, l := range v.Recent {
		recent = append(recent, l.Process+"/"+l.Name+" "+strings.Join(l.Attrs, " "))
	}
	// parent and child were exported by different flushes, in that order;
	// orphan and child share a batch (its order is the SDK's), so only
	// the set of the first three is checked.
	if len(recent) != 4 || recent[3] != "coordinator/cycle jobs=2" {
		t.Fatalf("recent %q: want 4 lines ending with the last cycle", recent)
	}
	first := map[string]bool{}
	for _, r := range recent[:3] {
		first[r] = true
	}
	for _, want := range []string{"scheduler/parent ", "coordinator/child ", "coordinator/orphan "} {
		if !first[want] {
			t.Errorf("recent %q lacks %q", recent, want)
		}
	}
}

func TestStartSpanReceiverRejectsEmptyRecent(t *testing.T) {
	if _, err := startSpanReceiver(0, nil); err == nil {
		t.Fatal("startSpanReceiver(0): want an error")
	}
}

// A shard started with ShardEnv exports to the receiver through
// internal/telemetry, whatever OTLP settings the caller's environment had.
func TestShardEnvReachesTheReceiver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rcv, err := startSpanReceiver(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Stop(5 * time.Second)
	env := rcv.ShardEnv([]string{"PATH=/bin", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://elsewhere:4317", "OTEL_TRACES_EXPORTER=none"})
	if !slices.Contains(env, "PATH=/bin") || slices.ContainsFunc(env, func(kv string) bool { return strings.Contains(kv, "elsewhere") }) {
		t.Fatalf("env %q: want PATH kept and the foreign endpoint dropped", env)
	}
	// What the child process would see (exec keeps the last of duplicates).
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, v)
		}
	}
	tp, shutdown, err := telemetry.Setup(ctx, "shardsched", "shard-7", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(ctx, "probe")
	span.End()
	if err := shutdown(ctx); err != nil { // flushes
		t.Fatal(err)
	}
	v := rcv.view()
	if v.ByName["probe"].Count != 1 || len(v.Recent) != 1 || v.Recent[0].Process != "shard-7" {
		t.Fatalf("received %+v, want one probe span from shard-7", v)
	}
}

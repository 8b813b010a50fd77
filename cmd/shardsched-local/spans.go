package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// spanReceiver is the OTLP/gRPC trace receiver behind -spans: the shards
// export to it (the TraceService Export RPC) and the live summary reads a
// copy of what it has counted. Export is called concurrently by gRPC; every
// field below mu is guarded by it, and nothing under mu blocks on the
// network (the -spans-file write is a local append).
type spanReceiver struct {
	collectortrace.UnimplementedTraceServiceServer

	ln  net.Listener
	srv *grpc.Server
	// served is closed when Serve returns.
	served chan struct{}

	// recentMax and window are fixed at construction.
	recentMax int
	window    int

	mu       sync.Mutex
	received int
	byName   map[string]*spanStats
	// recent holds the latest span of each of the recentMax names seen
	// last, oldest first.
	recent []spanLine
	// origin maps the id of each of the last window spans to the process
	// that sent it; order is the ring that evicts them (oldest first).
	origin map[spanID]spanOrigin
	order  []spanID
	head   int
	// waiting holds, by parent span id, the processes of children that
	// arrived before their parent (a client span ends, and is exported,
	// after the server span it caused). Evicted with the child.
	waiting map[spanID][]string
	// crossLinks counts spans whose parent came from another process;
	// crossTraces counts distinct traces with at least one such link
	// (distinct within the window: crossed remembers the last window).
	crossLinks  int
	crossTraces int
	crossed     map[traceID]struct{}
	crossOrder  []traceID
	crossHead   int
	file        io.Writer
	fileErr     error
}

type (
	spanID  [8]byte
	traceID [16]byte
)

type spanOrigin struct {
	process string
	parent  spanID
	trace   traceID
}

// spanStats is the running count and duration of one span name.
type spanStats struct {
	Count int
	Total time.Duration
	Max   time.Duration
}

// Mean is the mean duration (zero when nothing was counted).
func (s spanStats) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Total / time.Duration(s.Count)
}

// spanLine is one received span as the summary shows it.
type spanLine struct {
	End      time.Time
	Process  string
	Name     string
	Duration time.Duration
	Error    bool
	// Attrs are the attributes worth a glance (see pickAttrs), as
	// key=value.
	Attrs []string
}

// spanView is a copy of the receiver's counters at one instant.
type spanView struct {
	Addr        string
	Received    int
	ByName      map[string]spanStats
	Recent      []spanLine // the latest of each recent name, by end time
	CrossLinks  int
	CrossTraces int
	FileErr     error
}

// startSpanReceiver listens on a free loopback port and serves the OTLP
// trace service. file, when not nil, gets every span as one JSON line.
func startSpanReceiver(recentMax int, file io.Writer) (*spanReceiver, error) {
	if recentMax < 1 {
		return nil, fmt.Errorf("span receiver: recent=%d, want at least 1", recentMax)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("span receiver: %w", err)
	}
	const window = 8192
	r := &spanReceiver{
		ln: ln, srv: grpc.NewServer(), served: make(chan struct{}),
		recentMax: recentMax, window: window,
		byName: map[string]*spanStats{}, recent: make([]spanLine, 0, recentMax),
		origin: make(map[spanID]spanOrigin, window), order: make([]spanID, 0, window),
		waiting: map[spanID][]string{},
		crossed: map[traceID]struct{}{}, crossOrder: make([]traceID, 0, window),
		file: file,
	}
	collectortrace.RegisterTraceServiceServer(r.srv, r)
	go func() {
		defer close(r.served)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

// Addr is the receiver's host:port.
func (r *spanReceiver) Addr() string { return r.ln.Addr().String() }

// ShardEnv returns base (an inherited environment) set up for a shard
// process to export its spans here: OTLP over gRPC as internal/telemetry
// configures it from the standard variables, and a short batch delay so
// spans show up within a second. Inherited OTEL_EXPORTER_OTLP_* variables
// are dropped: a per-signal endpoint or TLS setting would win over ours.
func (r *spanReceiver) ShardEnv(base []string) []string {
	out := make([]string, 0, len(base)+5)
	for _, kv := range base {
		if !strings.HasPrefix(kv, "OTEL_EXPORTER_OTLP_") {
			out = append(out, kv)
		}
	}
	return append(out,
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+r.Addr(),
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_BSP_SCHEDULE_DELAY=500",
	)
}

// Stop lets in-flight exports finish for up to grace, then closes every
// connection.
func (r *spanReceiver) Stop(grace time.Duration) {
	done := make(chan struct{})
	go func() {
		r.srv.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.srv.Stop()
		<-done
	}
	<-r.served
}

// Export implements the OTLP TraceService. Called concurrently.
func (r *spanReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var lines bytes.Buffer
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service, instance := resourceNames(rs.GetResource().GetAttributes())
		process := service
		if instance != "" {
			process = instance
		}
		// Two services may share an instance name: the identity that
		// decides "another process" is both.
		ident := service + "\x00" + instance
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.add(ident, process, sp)
				if r.file != nil && r.fileErr == nil {
					writeSpanJSON(&lines, service, instance, sp)
				}
			}
		}
	}
	if lines.Len() > 0 {
		if _, err := r.file.Write(lines.Bytes()); err != nil {
			r.fileErr = err
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// add counts one span. r.mu is held.
func (r *spanReceiver) add(ident, process string, sp *tracepb.Span) {
	r.received++
	d := spanDuration(sp)
	st := r.byName[sp.GetName()]
	if st == nil {
		st = &spanStats{}
		r.byName[sp.GetName()] = st
	}
	st.Count++
	st.Total += d
	st.Max = max(st.Max, d)

	line := spanLine{
		End: time.Unix(0, int64(sp.GetEndTimeUnixNano())), Process: process, Name: sp.GetName(), Duration: d,
		Error: sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, Attrs: pickAttrs(sp.GetAttributes()),
	}
	// The latest span of each name: a busy name (a cycle every few
	// milliseconds) would otherwise push every other one off the screen.
	r.recent = slices.DeleteFunc(r.recent, func(l spanLine) bool { return l.Name == line.Name })
	if len(r.recent) == r.recentMax {
		r.recent = slices.Delete(r.recent, 0, 1)
	}
	r.recent = append(r.recent, line)

	id, ok := toSpanID(sp.GetSpanId())
	if !ok {
		return
	}
	parent, hasParent := toSpanID(sp.GetParentSpanId())
	var tid traceID
	copy(tid[:], sp.GetTraceId())
	// This span's parent is known: compare processes.
	if hasParent {
		if p, known := r.origin[parent]; known {
			if p.process != ident {
				r.cross(tid)
			}
		} else {
			r.waiting[parent] = append(r.waiting[parent], ident)
		}
	}
	// This span is the parent of children that came first.
	for _, child := range r.waiting[id] {
		if child != ident {
			r.cross(tid)
		}
	}
	delete(r.waiting, id)
	r.remember(id, spanOrigin{process: ident, parent: parent, trace: tid})
}

// remember records id's process, evicting the oldest when the window is
// full. r.mu is held.
func (r *spanReceiver) remember(id spanID, o spanOrigin) {
	if _, dup := r.origin[id]; dup {
		r.origin[id] = o
		return
	}
	if len(r.order) < r.window {
		r.order = append(r.order, id)
	} else {
		old := r.order[r.head]
		if oo, ok := r.origin[old]; ok {
			delete(r.waiting, oo.parent)
		}
		delete(r.origin, old)
		r.order[r.head] = id
		r.head = (r.head + 1) % r.window
	}
	r.origin[id] = o
}

// cross counts one cross-process link in trace t. r.mu is held.
func (r *spanReceiver) cross(t traceID) {
	r.crossLinks++
	if _, seen := r.crossed[t]; seen {
		return
	}
	r.crossTraces++
	if len(r.crossOrder) < r.window {
		r.crossOrder = append(r.crossOrder, t)
	} else {
		delete(r.crossed, r.crossOrder[r.crossHead])
		r.crossOrder[r.crossHead] = t
		r.crossHead = (r.crossHead + 1) % r.window
	}
	r.crossed[t] = struct{}{}
}

// view copies the counters.
func (r *spanReceiver) view() spanView {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := spanView{
		Addr: r.Addr(), Received: r.received, ByName: make(map[string]spanStats, len(r.byName)),
		CrossLinks: r.crossLinks, CrossTraces: r.crossTraces, FileErr: r.fileErr,
	}
	for n, s := range r.byName {
		v.ByName[n] = *s
	}
	v.Recent = slices.Clone(r.recent)
	// Arrival order is batch order: show them by end time.
	slices.SortStableFunc(v.Recent, func(a, b spanLine) int { return a.End.Compare(b.End) })
	return v
}

// render writes the SPANS section: one line per span name, the recent
// spans, and the cross-process count.
func (v spanView) render(b *strings.Builder) {
	fmt.Fprintf(b, "\nSPANS  %d received on %s, %d cross-process parent links in %d traces\n", v.Received, v.Addr, v.CrossLinks, v.CrossTraces)
	if v.FileErr != nil {
		fmt.Fprintf(b, "-spans-file: %v (no longer written)\n", v.FileErr)
	}
	names := make([]string, 0, len(v.ByName))
	for n := range v.ByName {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(b, "%-28s %7s %9s %9s\n", "NAME", "COUNT", "MEAN", "MAX")
	for _, n := range names {
		s := v.ByName[n]
		fmt.Fprintf(b, "%-28s %7d %9s %9s\n", n, s.Count, fmtDuration(s.Mean()), fmtDuration(s.Max))
	}
	for _, l := range v.Recent {
		mark := ""
		if l.Error {
			mark = " ERROR"
		}
		line := fmt.Sprintf("%s %-8s %-26s %8s%s %s", l.End.Format("15:04:05.000"), l.Process, l.Name, fmtDuration(l.Duration), mark, strings.Join(l.Attrs, " "))
		b.WriteString(truncate(strings.TrimRight(line, " "), 120))
		b.WriteByte('\n')
	}
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return strconv.FormatInt(d.Microseconds(), 10) + "µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	}
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func spanDuration(sp *tracepb.Span) time.Duration {
	s, e := sp.GetStartTimeUnixNano(), sp.GetEndTimeUnixNano()
	if e < s {
		return 0
	}
	return time.Duration(e - s)
}

func toSpanID(b []byte) (spanID, bool) {
	var id spanID
	if len(b) != len(id) || bytes.Equal(b, id[:]) {
		return id, false
	}
	copy(id[:], b)
	return id, true
}

func resourceNames(attrs []*commonpb.KeyValue) (service, instance string) {
	for _, kv := range attrs {
		switch kv.GetKey() {
		case "service.name":
			service = kv.GetValue().GetStringValue()
		case "service.instance.id":
			instance = kv.GetValue().GetStringValue()
		}
	}
	if service == "" {
		service = "unknown_service"
	}
	return service, instance
}

// pickAttrs returns the attributes a recent-span line shows, in a fixed
// order: what the job was, where it went, and how it ended.
func pickAttrs(attrs []*commonpb.KeyValue) []string {
	var out []string
	for _, k := range [...]string{"job", "job.uid", "queue", "node", "admitted", "placed", "tasks", "jobs", "writes"} {
		for _, kv := range attrs {
			if kv.GetKey() != k {
				continue
			}
			v := anyString(kv.GetValue())
			if k == "job.uid" && len(v) > 8 {
				v = v[:8] // enough to tell jobs apart on one screen
			}
			if v != "" {
				out = append(out, k+"="+v)
			}
			break
		}
	}
	return out
}

// anyValue converts an OTLP attribute value to a JSON-friendly Go value.
func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		if math.IsNaN(x.DoubleValue) || math.IsInf(x.DoubleValue, 0) {
			return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64) // JSON has no NaN or Inf
		}
		return x.DoubleValue
	case *commonpb.AnyValue_BytesValue:
		return hex.EncodeToString(x.BytesValue)
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, anyValue(e))
		}
		return out
	case *commonpb.AnyValue_KvlistValue:
		out := map[string]any{}
		for _, kv := range x.KvlistValue.GetValues() {
			out[kv.GetKey()] = anyValue(kv.GetValue())
		}
		return out
	default:
		return nil
	}
}

func anyString(v *commonpb.AnyValue) string {
	if s, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
		return s.StringValue
	}
	return fmt.Sprint(anyValue(v))
}

// spanRecord is one line of -spans-file.
type spanRecord struct {
	Service    string         `json:"service"`
	Instance   string         `json:"instance,omitempty"`
	TraceID    string         `json:"trace_id"`
	SpanID     string         `json:"span_id"`
	ParentID   string         `json:"parent_span_id,omitempty"`
	Name       string         `json:"name"`
	Kind       string         `json:"kind"`
	Start      time.Time      `json:"start"`
	DurationMS float64        `json:"duration_ms"`
	Status     string         `json:"status,omitempty"`
	Message    string         `json:"status_message,omitempty"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

func writeSpanJSON(w *bytes.Buffer, service, instance string, sp *tracepb.Span) {
	rec := spanRecord{
		Service: service, Instance: instance,
		TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
		ParentID: hex.EncodeToString(sp.GetParentSpanId()), Name: sp.GetName(),
		Kind:       strings.ToLower(strings.TrimPrefix(sp.GetKind().String(), "SPAN_KIND_")),
		Start:      time.Unix(0, int64(sp.GetStartTimeUnixNano())).UTC(),
		DurationMS: float64(spanDuration(sp)) / float64(time.Millisecond),
		Message:    sp.GetStatus().GetMessage(),
	}
	if c := sp.GetStatus().GetCode(); c != tracepb.Status_STATUS_CODE_UNSET {
		rec.Status = strings.ToLower(strings.TrimPrefix(c.String(), "STATUS_CODE_"))
	}
	if len(sp.GetAttributes()) > 0 {
		rec.Attributes = make(map[string]any, len(sp.GetAttributes()))
		for _, kv := range sp.GetAttributes() {
			rec.Attributes[kv.GetKey()] = anyValue(kv.GetValue())
		}
	}
	enc, err := json.Marshal(rec)
	if err != nil {
		// Not expected (anyValue yields JSON-safe values): keep the line, drop the attributes.
		rec.Attributes = map[string]any{"marshal_error": err.Error()}
		enc, _ = json.Marshal(rec)
	}
	w.Write(enc)
	w.WriteByte('\n')
}

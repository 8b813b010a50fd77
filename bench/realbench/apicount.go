package main

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// What a run asks of the API server: apiserver_request_total read from the
// API server's /metrics before the clock starts and after the last bind,
// so that a system's writes per bound pod (binds, PodGroup and Queue
// status, events) can be set beside the binder's, whose only write per pod
// is its binding. On 2 shared cores the API server is the ceiling of every
// system, and a write a system adds per pod is throughput it gives up.
// apiserver_watch_events_total is read with it: the events the API server
// sent to every watcher, by resource, which no request count shows (a
// watch is one request however many events it carries).

// apiKey is one series of apiserver_request_total, less the response code.
type apiKey struct{ verb, resource string }

// apiCounts are request totals by verb and resource (resource/subresource),
// and the watch events sent by resource under the verb watchEventsVerb.
type apiCounts map[apiKey]float64

// watchEventsVerb is the verb apiCounts keeps apiserver_watch_events_total
// under: not a request's, so neither the reads, the writes nor the
// requests per second count it.
const watchEventsVerb = "watch-events"

// readAPICounts scrapes the API server's request counters.
func readAPICounts(ctx context.Context, cs kubernetes.Interface) (apiCounts, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's metrics: %w", err)
	}
	return parseAPICounts(raw)
}

// parseAPICounts reads apiserver_request_total and
// apiserver_watch_events_total from a metrics page; the page's other
// families (most of its size) are skipped before parsing.
func parseAPICounts(page []byte) (apiCounts, error) {
	const requests, events = "apiserver_request_total", "apiserver_watch_events_total"
	var kept bytes.Buffer
	for line := range bytes.Lines(page) {
		s := string(bytes.TrimSpace(line))
		name := strings.TrimPrefix(strings.TrimPrefix(s, "# TYPE "), "# HELP ")
		for _, f := range []string{requests, events} {
			if strings.HasPrefix(name, f+" ") || strings.HasPrefix(name, f+"{") {
				kept.Write(line)
			}
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&kept)
	if err != nil {
		return nil, fmt.Errorf("parse %s and %s: %w", requests, events, err)
	}
	out := apiCounts{}
	for _, m := range fams[requests].GetMetric() {
		var verb, res, sub string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				res = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			}
		}
		if sub != "" {
			res += "/" + sub
		}
		out[apiKey{verb, res}] += m.GetCounter().GetValue()
	}
	for _, m := range fams[events].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "resource" {
				out[apiKey{watchEventsVerb, l.GetValue()}] += m.GetCounter().GetValue()
			}
		}
	}
	return out, nil
}

// isWrite reports whether verb changes state.
func isWrite(verb string) bool {
	switch verb {
	case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY":
		return true
	}
	return false
}

// isRead reports whether verb is a request's that changes nothing.
func isRead(verb string) bool { return !isWrite(verb) && verb != watchEventsVerb }

// apiWritesNote sets out the writes between two readings per bound pod,
// most first: "API writes per bound pod (...): 2.310 (POST pods 1.000,
// POST pods/binding 1.000, PATCH podgroups 0.290, ...)". Only series with
// at least one write per 1,000 pods are named. Every response code counts
// (a refused write is still work for the API server); what the system
// writes after the last bind (a late status flush) falls outside. what
// says what the readings cover.
func apiWritesNote(before, after apiCounts, bound int, what string) string {
	return apiPerPodNote(before, after, bound, "writes", isWrite, what)
}

// apiReadsNote is apiWritesNote's reads (GET, LIST, WATCH): a system's
// reads cost the API server as its writes do, and no write shows them.
func apiReadsNote(before, after apiCounts, bound int, what string) string {
	return apiPerPodNote(before, after, bound, "reads", isRead, what)
}

// apiWatchEventsNote is the watch events the API server sent between two
// readings per bound pod, by resource, most first: "API watch events sent
// per bound pod (...): 9.10 (pods 8.950, podgroups 0.120)". Every
// watcher's copy counts (the harness's watch and kwok's too), so a
// system's own watches show as its excess over the binder's.
func apiWatchEventsNote(before, after apiCounts, bound int, what string) string {
	return apiPerPodNote(before, after, bound, "watch events sent", func(verb string) bool { return verb == watchEventsVerb }, what)
}

// apiPerPodNote is the series of the verbs keep takes between two
// readings, per bound pod, named kind; a series is named by its verb and
// resource, watch events by their resource alone.
func apiPerPodNote(before, after apiCounts, bound int, kind string, keep func(verb string) bool, what string) string {
	if bound == 0 {
		return ""
	}
	rows, total := apiDeltas(before, after, keep)
	var parts []string
	for _, r := range rows {
		if per := r.n / float64(bound); per >= 0.001 {
			name := r.k.verb + " " + r.k.resource
			if r.k.verb == watchEventsVerb {
				name = r.k.resource
			}
			parts = append(parts, fmt.Sprintf("%s %.3f", name, per))
		}
	}
	return fmt.Sprintf("API %s per bound pod (%s): %.2f (%s)",
		kind, what, total/float64(bound), strings.Join(parts, ", "))
}

// apiRatesNote sets out every request between two readings taken seconds
// apart, reads included, per second, most first: "API requests per second
// (...): 12.4 (GET leases 4.0, APPLY queues/status 3.2, ...)". Only series
// of at least 0.1 a second are named; a watch counts once, when it starts;
// the harness's own reading at the window's start is in it.
func apiRatesNote(before, after apiCounts, seconds float64, what string) string {
	if seconds <= 0 || before == nil || after == nil {
		return "" // a reading failed: the totals since the API server started are no rate
	}
	rows, total := apiDeltas(before, after, func(verb string) bool { return verb != watchEventsVerb })
	var parts []string
	for _, r := range rows {
		if per := r.n / seconds; per >= 0.1 {
			parts = append(parts, fmt.Sprintf("%s %s %.1f", r.k.verb, r.k.resource, per))
		}
	}
	named := strings.Join(parts, ", ")
	if named == "" {
		named = "none of 0.1 a second or more"
	}
	return fmt.Sprintf("API requests per second (%s): %.1f (%s)", what, total/seconds, named)
}

// apiDelta is how many requests of one series were made between two
// readings.
type apiDelta struct {
	k apiKey
	n float64
}

// apiDeltas are the series of verbs keep grew between two readings, most
// first (then by verb and resource), and their sum.
func apiDeltas(before, after apiCounts, keep func(verb string) bool) ([]apiDelta, float64) {
	var rows []apiDelta
	var total float64
	for k, v := range after {
		if d := v - before[k]; d > 0 && keep(k.verb) {
			total += d
			rows = append(rows, apiDelta{k, d})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].n != rows[j].n {
			return rows[i].n > rows[j].n
		}
		return rows[i].k.verb+rows[i].k.resource < rows[j].k.verb+rows[j].k.resource
	})
	return rows, total
}

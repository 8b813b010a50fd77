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

// apiKey is one series of apiserver_request_total, less the response code.
type apiKey struct{ verb, resource string }

// apiCounts are request totals by verb and resource (resource/subresource).
type apiCounts map[apiKey]float64

// readAPICounts scrapes the API server's request counters.
func readAPICounts(ctx context.Context, cs kubernetes.Interface) (apiCounts, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's metrics: %w", err)
	}
	return parseAPICounts(raw)
}

// parseAPICounts reads apiserver_request_total from a metrics page; the
// page's other families (most of its size) are skipped before parsing.
func parseAPICounts(page []byte) (apiCounts, error) {
	const family = "apiserver_request_total"
	var kept bytes.Buffer
	for line := range bytes.Lines(page) {
		s := string(bytes.TrimSpace(line))
		name := strings.TrimPrefix(strings.TrimPrefix(s, "# TYPE "), "# HELP ")
		if strings.HasPrefix(name, family+" ") || strings.HasPrefix(name, family+"{") {
			kept.Write(line)
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&kept)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", family, err)
	}
	out := apiCounts{}
	f, ok := fams[family]
	if !ok {
		return out, nil
	}
	for _, m := range f.GetMetric() {
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
	return apiPerPodNote(before, after, bound, "reads", func(verb string) bool { return !isWrite(verb) }, what)
}

// apiPerPodNote is the requests of the verbs keep takes between two
// readings, per bound pod, named kind.
func apiPerPodNote(before, after apiCounts, bound int, kind string, keep func(verb string) bool, what string) string {
	if bound == 0 {
		return ""
	}
	rows, total := apiDeltas(before, after, keep)
	var parts []string
	for _, r := range rows {
		if per := r.n / float64(bound); per >= 0.001 {
			parts = append(parts, fmt.Sprintf("%s %s %.3f", r.k.verb, r.k.resource, per))
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
	rows, total := apiDeltas(before, after, func(string) bool { return true })
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

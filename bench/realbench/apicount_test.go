package main

import (
	"strings"
	"testing"
)

const metricsPage = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.volcano.sh",resource="podgroups",scope="resource",subresource="",verb="PATCH",version="v1beta1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 7
# HELP apiserver_watch_events_total [ALPHA] Number of events sent in watch clients
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="",resource="pods",version="v1"} 900
apiserver_watch_events_total{group="scheduling.volcano.sh",resource="podgroups",version="v1beta1"} 12
# HELP apiserver_request_duration_seconds Response latency.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{verb="POST",le="0.1"} 3
`

func TestParseAPICounts(t *testing.T) {
	c, err := parseAPICounts([]byte(metricsPage))
	if err != nil {
		t.Fatal(err)
	}
	if got := c[apiKey{"POST", "pods/binding"}]; got != 42 {
		t.Errorf("POST pods/binding = %v, want 42 (every code summed)", got)
	}
	if got := c[apiKey{"PATCH", "podgroups"}]; got != 10 {
		t.Errorf("PATCH podgroups = %v, want 10", got)
	}
	if got := c[apiKey{watchEventsVerb, "pods"}]; got != 900 {
		t.Errorf("watch events of pods = %v, want 900", got)
	}
	if got := c[apiKey{watchEventsVerb, "podgroups"}]; got != 12 {
		t.Errorf("watch events of podgroups = %v, want 12", got)
	}
	if len(c) != 5 {
		t.Errorf("%d series, want 5 (other families skipped): %v", len(c), c)
	}
}

func TestAPIWatchEventsNote(t *testing.T) {
	before := apiCounts{{watchEventsVerb, "pods"}: 100, {watchEventsVerb, "nodes"}: 7, {"LIST", "pods"}: 1, {"POST", "pods/binding"}: 3}
	after := apiCounts{{watchEventsVerb, "pods"}: 280, {watchEventsVerb, "nodes"}: 7, {watchEventsVerb, "podgroups"}: 4, {"LIST", "pods"}: 50, {"POST", "pods/binding"}: 23}
	if n, want := apiWatchEventsNote(before, after, 20, "x"), "API watch events sent per bound pod (x): 9.20 (pods 9.000, podgroups 0.200)"; n != want {
		t.Errorf("got  %q\nwant %q", n, want)
	}
	if apiWatchEventsNote(before, after, 0, "x") != "" {
		t.Error("a note with no pod bound")
	}
	// Watch events are no request: neither a read, a write nor a request a second.
	if r := apiReadsNote(before, after, 20, "x"); r != "API reads per bound pod (x): 2.45 (LIST pods 2.450)" {
		t.Errorf("reads note %q", r)
	}
	if w := apiWritesNote(before, after, 20, "x"); w != "API writes per bound pod (x): 1.00 (POST pods/binding 1.000)" {
		t.Errorf("writes note %q", w)
	}
	if r := apiRatesNote(before, after, 10, "x"); r != "API requests per second (x): 6.9 (LIST pods 4.9, POST pods/binding 2.0)" {
		t.Errorf("rates note %q", r)
	}
}

func TestAPIWritesNote(t *testing.T) {
	before := apiCounts{{"POST", "pods/binding"}: 100, {"PATCH", "podgroups"}: 5, {"LIST", "pods"}: 1}
	after := apiCounts{{"POST", "pods/binding"}: 120, {"PATCH", "podgroups"}: 15, {"LIST", "pods"}: 50, {"POST", "events"}: 2}
	n := apiWritesNote(before, after, 20, "x")
	for _, want := range []string{"(x): 1.60 (", "POST pods/binding 1.000, PATCH podgroups 0.500, POST events 0.100"} {
		if !strings.Contains(n, want) {
			t.Errorf("note %q lacks %q", n, want)
		}
	}
	if strings.Contains(n, "LIST") {
		t.Errorf("reads counted as writes: %q", n)
	}
	if apiWritesNote(before, after, 0, "x") != "" {
		t.Error("a note with no pod bound")
	}
	if r := apiReadsNote(before, after, 20, "x"); r != "API reads per bound pod (x): 2.45 (LIST pods 2.450)" {
		t.Errorf("reads note %q", r)
	}
}

func TestAPIRatesNote(t *testing.T) {
	before := apiCounts{{"GET", "leases"}: 10, {"APPLY", "queues/status"}: 4, {"WATCH", "pods"}: 3}
	after := apiCounts{{"GET", "leases"}: 30, {"APPLY", "queues/status"}: 34, {"WATCH", "pods"}: 3, {"LIST", "nodes"}: 0.5}
	n := apiRatesNote(before, after, 5, "idle")
	if want := "API requests per second (idle): 10.1 (APPLY queues/status 6.0, GET leases 4.0, LIST nodes 0.1)"; n != want {
		t.Errorf("got  %q\nwant %q", n, want)
	}
	if n := apiRatesNote(apiCounts{}, apiCounts{{"GET", "leases"}: 0.1}, 5, "quiet"); n != "API requests per second (quiet): 0.0 (none of 0.1 a second or more)" {
		t.Errorf("nothing to name: %q", n)
	}
	if apiRatesNote(before, after, 0, "x") != "" || apiRatesNote(before, nil, 5, "x") != "" || apiRatesNote(nil, after, 5, "x") != "" {
		t.Error("a note without a window or a reading")
	}
}
